"""Evaluate an ``{% if %}`` test as the render with the other ``add_generation_prompt`` would.

Where it sits: inside the render stage, at its bottom: ``boundary.render.template_run`` evaluates each
flipped test with it, ``boundary.render.instrumentation`` and ``boundary.render.flag_branches`` read its flag
name; it imports nothing of boundary's.

U_end is where the render with the generation prompt and the render without it first take
different branches. The renderer evaluates each test once, as the template wrote it; to know
what the *other* render would decide at the same point, the same test is evaluated again by
``FlippedTest`` with the flag negated — *before* the template's own evaluation, so anything
the template's evaluation does cannot leak into it.

The evaluation is an interpreter over the test's Jinja AST that only performs operations
that are side-effect free on the values a chat template can hold, and mirrors what jinja2's
compiled code does for each node (the sandbox's ``getattr`` / ``getitem`` / ``call_binop``,
the environment's own filters and tests, Python's operators with short-circuiting). The
subset, each checked on the values at run time:

- names (the flag reads as ``not flag``), constants, list / tuple / dict literals;
- ``not``, ``and``, ``or``, inline ``if``, comparisons (``==``, ``<``, ``in`` ...), unary
  ``-`` / ``+``, arithmetic and ``~`` on plain values (str, numbers, bool, None, list,
  tuple, dict, Undefined);
- attribute and item access on plain values, on ``loop`` (its read-only properties), on
  ``namespace()`` objects and a ``cycler``'s ``current``;
- the side-effect-free builtin filters and tests listed below, on plain values;
- calls of side-effect-free ``str`` / ``dict`` / ``list`` methods (``startswith``,
  ``get``, ``strip`` ...).

Anything else (a macro or ``caller()`` call, ``cycler.next()``, ``joiner()``, ``range``,
``namespace()``, ``loop.changed``, generators, a filter that takes the context, an
exception) makes the flipped value *unknown*: the renderer then reports U_end as
unavailable for this render, with the reason, instead of guessing. Nothing the interpreter
does is observable by the template, so the instrumented render's text is unchanged.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.nodes import EvalContext
from jinja2.runtime import LoopContext, Undefined
from jinja2.utils import Cycler, Namespace
from markupsafe import Markup

GENERATION_FLAG = "add_generation_prompt"

PURE_FILTERS = frozenset(
    {
        "abs", "capitalize", "count", "d", "default", "dictsort", "first", "float", "int", "items",
        "join", "last", "length", "list", "lower", "max", "min", "replace", "round", "string",
        "sum", "title", "tojson", "trim", "truncate", "unique", "upper", "wordcount",
    }
)  # fmt: skip
PURE_TESTS = frozenset(
    {
        "!=", "<", "<=", "==", ">", ">=", "boolean", "defined", "divisibleby", "eq", "equalto",
        "escaped", "even", "false", "float", "ge", "greaterthan", "gt", "in", "integer", "le",
        "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
        "string", "true", "undefined", "upper",
    }
)  # fmt: skip
PURE_METHODS: dict[type, frozenset[str]] = {
    str: frozenset(
        {
            "capitalize", "count", "endswith", "find", "index", "isalnum", "isalpha", "isdigit",
            "islower", "isspace", "isupper", "lower", "lstrip", "partition", "removeprefix",
            "removesuffix", "rfind", "rindex", "rpartition", "rsplit", "rstrip", "split",
            "splitlines", "startswith", "strip", "title", "upper",
        }
    ),
    dict: frozenset({"get", "items", "keys", "values"}),
    list: frozenset({"count", "index"}),
    tuple: frozenset({"count", "index"}),
}  # fmt: skip
_LOOP_ATTRIBUTES = frozenset(
    {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
     "previtem", "nextitem"}
)  # fmt: skip
_PLAIN = (str, int, float, bool, type(None), list, tuple, dict, Markup, Undefined)
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "lteq": operator.le,
    "gt": operator.gt,
    "gteq": operator.ge,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}
_ARITHMETIC: dict[type[nodes.BinExpr], str] = {
    nodes.Add: "+",
    nodes.Sub: "-",
    nodes.Mul: "*",
    nodes.Div: "/",
    nodes.FloorDiv: "//",
    nodes.Mod: "%",
    nodes.Pow: "**",
}
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
}


class Unknown(Exception):
    """The flipped value cannot be had without running template code that might observe it."""


Evaluator = Callable[[dict[str, Any]], Any]


def _plain(value: Any, what: str) -> Any:
    if isinstance(value, _PLAIN):
        return value
    raise Unknown(f"{what} is a {type(value).__name__}, not a plain value")


def _container(value: Any, what: str) -> Any:
    if isinstance(value, (str, list, tuple, dict, Markup)):
        return value
    raise Unknown(f"{what} is a {type(value).__name__}, not a container")


@dataclass(frozen=True, slots=True)
class FlippedTest:
    """A test's evaluation with the generation flag negated; ``names`` are the variables the
    test reads, in the order their values are passed to ``evaluate``."""

    names: tuple[str, ...]
    lineno: int
    _evaluate: Evaluator

    def evaluate(self, values: Sequence[Any]) -> bool:
        """The flipped test's truth value; raises ``Unknown`` when it can't be had purely."""
        scope = dict(zip(self.names, values, strict=True))
        try:
            return bool(self._evaluate(scope))
        except Unknown:
            raise
        except Exception as exc:  # the other render would raise here; nothing to compare
            raise Unknown(f"it raises {type(exc).__name__}") from None


def test_names(test: nodes.Expr) -> tuple[str, ...]:
    """The variables ``test`` reads, in a stable order (the flag included when read)."""
    seen: dict[str, None] = {}
    if isinstance(test, nodes.Name):
        seen[test.name] = None
    for name in test.find_all(nodes.Name):
        if name.ctx == "load":
            seen[name.name] = None
    return tuple(seen)


def flipped_test(test: nodes.Expr, env: Any) -> FlippedTest:
    """Build the flipped evaluation of ``test`` for environment ``env`` (a ``Sandbox``)."""
    return FlippedTest(test_names(test), test.lineno, _Builder(env).build(test))


class _Builder:
    """Turns a Jinja expression node into a closure over a name -> value scope."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.eval_ctx = EvalContext(env)

    def build(self, node: nodes.Node) -> Evaluator:
        method: Callable[[nodes.Node], Evaluator] | None = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            kind = type(node).__name__

            def unsupported(scope: dict[str, Any]) -> Any:
                raise Unknown(f"it contains a {kind} expression")

            return unsupported
        return method(node)

    def _Name(self, node: nodes.Name) -> Evaluator:
        name = node.name
        if name == GENERATION_FLAG:
            return lambda scope: not scope[name]
        return lambda scope: scope[name]

    def _Const(self, node: nodes.Const) -> Evaluator:
        value = node.value
        return lambda scope: value

    def _List(self, node: nodes.List) -> Evaluator:
        items = [self.build(i) for i in node.items]
        return lambda scope: [f(scope) for f in items]

    def _Tuple(self, node: nodes.Tuple) -> Evaluator:
        items = [self.build(i) for i in node.items]
        return lambda scope: tuple(f(scope) for f in items)

    def _Dict(self, node: nodes.Dict) -> Evaluator:
        pairs = [(self.build(p.key), self.build(p.value)) for p in node.items]
        return lambda scope: {k(scope): v(scope) for k, v in pairs}

    def _Not(self, node: nodes.Not) -> Evaluator:
        inner = self.build(node.node)
        return lambda scope: not inner(scope)

    def _Neg(self, node: nodes.Neg) -> Evaluator:
        inner = self.build(node.node)
        return lambda scope: -_plain(inner(scope), "the operand of -")

    def _Pos(self, node: nodes.Pos) -> Evaluator:
        inner = self.build(node.node)
        return lambda scope: +_plain(inner(scope), "the operand of +")

    def _And(self, node: nodes.And) -> Evaluator:
        left, right = self.build(node.left), self.build(node.right)
        return lambda scope: left(scope) and right(scope)

    def _Or(self, node: nodes.Or) -> Evaluator:
        left, right = self.build(node.left), self.build(node.right)
        return lambda scope: left(scope) or right(scope)

    def _CondExpr(self, node: nodes.CondExpr) -> Evaluator:
        test, then = self.build(node.test), self.build(node.expr1)
        otherwise = self.build(node.expr2) if node.expr2 is not None else None
        undefined = self.env.undefined

        def cond(scope: dict[str, Any]) -> Any:
            if test(scope):
                return then(scope)
            return otherwise(scope) if otherwise is not None else undefined("inline if without else")

        return cond

    def _Compare(self, node: nodes.Compare) -> Evaluator:
        first = self.build(node.expr)
        ops = [(_COMPARE[o.op], self.build(o.expr)) for o in node.ops]

        def compare(scope: dict[str, Any]) -> Any:
            left = _plain(first(scope), "a compared value")
            for op, build in ops:
                right = _plain(build(scope), "a compared value")
                if not op(left, right):
                    return False
                left = right
            return True

        return compare

    def _Concat(self, node: nodes.Concat) -> Evaluator:
        parts = [self.build(n) for n in node.nodes]
        join = self.env.checked_concat
        return lambda scope: join(tuple(_plain(p(scope), "a ~ operand") for p in parts))

    def _binary(self, node: nodes.BinExpr) -> Evaluator:
        symbol = _ARITHMETIC[type(node)]
        left, right = self.build(node.left), self.build(node.right)
        env = self.env
        checked_add = getattr(env, "_checked_add", None)

        def arithmetic(scope: dict[str, Any]) -> Any:
            a = _plain(left(scope), f"an operand of {symbol}")
            b = _plain(right(scope), f"an operand of {symbol}")
            if symbol == "+" and checked_add is not None:
                return checked_add(a, b)
            if symbol in env.intercepted_binops:
                return env.call_binop(None, symbol, a, b)
            return _OPERATORS[symbol](a, b)

        return arithmetic

    _Add = _Sub = _Mul = _Div = _FloorDiv = _Mod = _Pow = _binary

    def _Getattr(self, node: nodes.Getattr) -> Evaluator:
        obj, attr = self.build(node.node), node.attr
        env = self.env

        def getattr_(scope: dict[str, Any]) -> Any:
            value = obj(scope)
            if isinstance(value, LoopContext):
                if attr not in _LOOP_ATTRIBUTES:
                    raise Unknown(f"loop.{attr} is not a read-only loop property")
            elif isinstance(value, Cycler):
                if attr != "current":
                    raise Unknown(f"cycler.{attr} is not side-effect free")
            elif not isinstance(value, Namespace):
                _plain(value, f"the object of .{attr}")
            return env.getattr(value, attr)

        return getattr_

    def _Getitem(self, node: nodes.Getitem) -> Evaluator:
        obj, env = self.build(node.node), self.env
        if isinstance(node.arg, nodes.Slice):
            bounds = [
                None if n is None else self.build(n) for n in (node.arg.start, node.arg.stop, node.arg.step)
            ]

            def sliced(scope: dict[str, Any]) -> Any:
                value = _plain(obj(scope), "a sliced value")
                return value[slice(*(None if b is None else b(scope) for b in bounds))]

            return sliced
        key = self.build(node.arg)
        return lambda scope: env.getitem(_plain(obj(scope), "a subscripted value"), key(scope))

    def _Filter(self, node: nodes.Filter) -> Evaluator:
        return self._call_named(node, "filter", PURE_FILTERS)

    def _Test(self, node: nodes.Test) -> Evaluator:
        return self._call_named(node, "test", PURE_TESTS)

    def _call_named(self, node: nodes.Filter | nodes.Test, kind: str, allowed: frozenset[str]) -> Evaluator:
        name = node.name
        if (
            name not in allowed
            or node.dyn_args is not None
            or node.dyn_kwargs is not None
            or node.node is None
        ):
            return self._refuse(f"the {kind} {name!r} is not in the side-effect-free subset")
        subject = self.build(node.node)
        args = [self.build(a) for a in node.args]
        kwargs = [(k.key, self.build(k.value)) for k in node.kwargs]
        env, eval_ctx = self.env, self.eval_ctx
        call = env.call_filter if kind == "filter" else env.call_test

        def named(scope: dict[str, Any]) -> Any:
            value = subject(scope)
            if not (kind == "test" and name in ("defined", "undefined")):
                value = _plain(value, f"the value given to {name!r}")
            positional = [_plain(a(scope), f"an argument of {name!r}") for a in args]
            keywords = {k: _plain(v(scope), f"an argument of {name!r}") for k, v in kwargs}
            if kind == "filter" and name in ("join", "list", "sum", "max", "min", "unique", "first", "last"):
                _container(value, f"the value given to {name!r}")
            if kind == "test" and name == "in" and positional:
                _container(positional[0], "the container of 'in'")
            return call(name, value, positional, keywords, eval_ctx=eval_ctx)

        return named

    def _Call(self, node: nodes.Call) -> Evaluator:
        if (
            node.dyn_args is not None
            or node.dyn_kwargs is not None
            or not isinstance(node.node, nodes.Getattr)
        ):
            return self._refuse("it calls a function")
        obj, method = self.build(node.node.node), node.node.attr
        args = [self.build(a) for a in node.args]
        kwargs = [(k.key, self.build(k.value)) for k in node.kwargs]
        env = self.env

        def call(scope: dict[str, Any]) -> Any:
            value = obj(scope)
            if method not in PURE_METHODS.get(type(value), ()):
                raise Unknown(f"it calls {type(value).__name__}.{method}()")
            bound = env.getattr(value, method)
            positional = [_plain(a(scope), "a method argument") for a in args]
            keywords = {k: _plain(v(scope), "a method argument") for k, v in kwargs}
            return bound(*positional, **keywords)

        return call

    @staticmethod
    def _refuse(reason: str) -> Evaluator:
        def refuse(scope: dict[str, Any]) -> Any:
            raise Unknown(reason)

        return refuse
