"""The rewrite behind ``boundary.session.incremental.plan``: it checks the message loop's body (and the
macros it calls) and routes every read of state from outside the iteration through a hook.

Where it sits: inside the session stage, under ``boundary.session.incremental.plan``, which runs it on
the instrumented tree; ``boundary.session.incremental.run`` answers the hooks it names.

A read it cannot route (``messages``, a namespace or ``loop`` used as a whole, ``loop.cycle``,
a macro with ``caller``, ``break``, an impure global, ...) raises ``Unsafe`` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from boundary.render import instrumentation as ins

SCAN = "bnd.i.scan"  # seq|hook(ns, 'attr'): a guarded scan's items, stopped once ns.attr is false
ITER = "bnd.i.iter"  # seq|hook(values...): the message loop's items, runs of unchanged ones skipped
ENTER = "bnd.i.enter"
MISS = "bnd.i.miss"
LEAVE = "bnd.i.leave"
LOOP = "bnd.i.loop"  # 0|hook('attr'): a read of loop.attr, recorded
LOOP_VALUE = "bnd.i.loopv"  # 0|hook('attr'): loop.attr, not recorded (a compared operand)
NS = "bnd.i.ns"  # value|hook('ns', 'attr'): a read of ns.attr
NS_WRITE = "bnd.i.nsw"  # value|hook('ns', 'attr'): the value written to ns.attr
ITEM = "bnd.i.item"  # seq|hook('name', index): seq[index], read and recorded
LENGTH = "bnd.i.len"  # seq|hook('name'): seq|length
LOOP_ALL = "bnd.i.loopall"  # 0|hook: the loop as a whole (a probe's argument), recorded
NS_ALL = "bnd.i.nsall"
SEQ_ALL = "bnd.i.seqall"
COMPARE = "bnd.i.cmp"  # (a < b)|hook(spec): a comparison of loop / namespace reads, recorded by its outcome
COMPARE_OPS = frozenset({"eq", "ne", "gt", "gteq", "lt", "lteq"})

LOOP_ATTRS = frozenset(
    {
        "index",
        "index0",
        "revindex",
        "revindex0",
        "first",
        "last",
        "length",
        "previtem",
        "nextitem",
        "depth",
        "depth0",
    }
)
IMPURE_NAMES = frozenset({"strftime_now", "lipsum", "caller", "self"})
IMPURE_FILTERS = frozenset({"random"})
LENGTH_FILTERS = frozenset({"length", "count"})


class Unsafe(Exception):
    """Raised by the analysis with the reason the loop cannot be run incrementally."""


@dataclass(slots=True)
class _Scope:
    """Which scope the visitor is in: the message loop's body (``macro`` None) or a macro it
    calls (``macro`` names it; ``local`` its parameters)."""

    macro: str | None = None
    local: frozenset[str] = field(default_factory=frozenset)


def hook(name: str, subject: nodes.Expr, args: list[nodes.Expr], lineno: int) -> nodes.Filter:
    return nodes.Filter(subject, name, args, [], None, None, lineno=lineno)


def const(value: object, lineno: int) -> nodes.Const:
    return nodes.Const(value, lineno=lineno)


class Rewrite(NodeTransformer):
    """Checks the message loop's body and the macros it calls, and routes every read of
    state from outside the iteration through a recording hook (module docstring)."""

    def __init__(
        self,
        target: str,
        namespaces: frozenset[str],
        sequences: frozenset[str],
        macros: dict[str, nodes.Macro],
    ) -> None:
        self.target = target
        self.namespaces = namespaces
        self.sequences = sequences
        self.macros = macros
        self.scope = _Scope()
        self.nested = False  # inside a loop nested in the body or in a macro: `loop` is its own
        self.outer: dict[str, None] = {}
        self.called: dict[str, None] = {}
        self.assigned: set[str] = set()  # names surely bound on every path to here in this scope

    def _unsafe(self, node: nodes.Node, what: str) -> Unsafe:
        where = (
            f"macro {self.scope.macro!r} called from the message loop"
            if self.scope.macro
            else "the message loop"
        )
        return Unsafe(f"{where} {what} (template line {node.lineno})")

    def _shared(self, name: str) -> bool:
        """Whether ``name`` names the template-wide value here (not a macro's own)."""
        return name not in self.scope.local

    def visit_Name(self, node: nodes.Name) -> nodes.Node:
        name = node.name
        if node.ctx != "load" or not self._shared(name) or name in self.assigned:
            return node
        if name == "loop":
            if not self.nested:
                raise self._unsafe(node, "uses `loop` other than by one of its attributes")
            return node
        if name in self.namespaces or name in self.sequences:
            raise self._unsafe(node, f"uses {name!r} as a whole")
        if name in self.macros:
            raise self._unsafe(node, f"uses macro {name!r} other than by calling it")
        if name in IMPURE_NAMES:
            raise self._unsafe(node, f"reads {name!r}")
        if name == self.target and self.scope.macro is not None:
            raise self._unsafe(node, f"reads {name!r}, the loop's variable, from outside the loop")
        self.outer[name] = None  # a global is keyed too: a template kwarg may shadow it
        return node

    def visit_Getattr(self, node: nodes.Getattr) -> nodes.Node:
        owner, line = node.node, node.lineno
        if isinstance(owner, nodes.Name) and owner.ctx == "load" and self._shared(owner.name):
            if owner.name == "loop" and not self.nested and self.scope.macro is None:
                if node.attr not in LOOP_ATTRS:
                    raise self._unsafe(node, f"uses `loop.{node.attr}`")
                return hook(LOOP, const(0, line), [const(node.attr, line)], line)
            if owner.name in self.namespaces:
                return hook(NS, node, [const(owner.name, line), const(node.attr, line)], line)
        return self.generic_visit(node)

    def _leaf(self, node: nodes.Expr) -> tuple[object, ...] | None:
        """A comparison operand the runtime can re-evaluate: a constant, ``loop.<attr>``,
        ``ns.<attr>`` or ``messages|length`` (None: another expression)."""
        if isinstance(node, nodes.Const) and type(node.value) in (int, str, bool, type(None)):
            return ("const", node.value)
        if (
            isinstance(node, nodes.Getattr)
            and isinstance(node.node, nodes.Name)
            and self._shared(node.node.name)
        ):
            owner = node.node.name
            if owner == "loop" and not self.nested and self.scope.macro is None and node.attr in LOOP_ATTRS:
                return ("loop", node.attr)
            if owner in self.namespaces:
                return ("ns", owner, node.attr)
        if (
            isinstance(node, nodes.Filter)
            and node.name in LENGTH_FILTERS
            and isinstance(node.node, nodes.Name)
            and node.node.name in self.sequences
            and self._shared(node.node.name)
            and not (node.args or node.kwargs or node.dyn_args or node.dyn_kwargs)
        ):
            return ("len", node.node.name)
        return None

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:
        """A comparison of re-evaluable operands is recorded by its outcome, so that e.g.
        ``loop.index0 > ns.last_query_index`` stays the same while the index moves on."""
        leaves = [self._leaf(node.expr), *(self._leaf(o.expr) for o in node.ops)]
        if all(leaf is not None for leaf in leaves) and all(o.op in COMPARE_OPS for o in node.ops):
            spec = (leaves[0], *((o.op, leaf) for o, leaf in zip(node.ops, leaves[1:], strict=True)))
            node.expr = self._operand(node.expr)
            for o in node.ops:
                o.expr = self._operand(o.expr)
            return hook(COMPARE, node, [const(spec, node.lineno)], node.lineno)
        return self.generic_visit(node)

    def _operand(self, node: nodes.Expr) -> nodes.Expr:
        """A compared leaf: ``loop.<attr>`` read from the run (unrecorded), others as they are."""
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name) and node.node.name == "loop":
            return hook(LOOP_VALUE, const(0, node.lineno), [const(node.attr, node.lineno)], node.lineno)
        return node

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Node:
        owner, line = node.node, node.lineno
        if isinstance(owner, nodes.Name) and owner.name in self.sequences and self._shared(owner.name):
            if isinstance(node.arg, nodes.Slice):
                raise self._unsafe(node, f"slices {owner.name!r}")
            return hook(ITEM, owner, [const(owner.name, line), self.visit(node.arg)], line)
        return self.generic_visit(node)

    def visit_Filter(self, node: nodes.Filter) -> nodes.Node:
        subject, line = node.node, node.lineno
        if node.name in IMPURE_FILTERS:
            raise self._unsafe(node, f"uses the filter {node.name!r}")
        if node.name == ins.MESSAGE:
            raise self._unsafe(node, "holds a loop over messages")
        if node.name == ins.FLIP:
            node.args = [self._probe_argument(a) for a in node.args]
            return node
        if (
            node.name in LENGTH_FILTERS
            and isinstance(subject, nodes.Name)
            and subject.name in self.sequences
            and self._shared(subject.name)
            and not (node.args or node.kwargs or node.dyn_args or node.dyn_kwargs)
        ):
            return hook(LENGTH, subject, [const(subject.name, line)], line)
        return self.generic_visit(node)

    def _probe_argument(self, arg: nodes.Expr) -> nodes.Expr:
        """A name the instrumentation hands to a flipped if-test: recorded as a whole."""
        if isinstance(arg, nodes.Name) and self._shared(arg.name):
            line = arg.lineno
            if arg.name == "loop" and not self.nested and self.scope.macro is None:
                return hook(LOOP_ALL, const(0, line), [], line)
            if arg.name in self.namespaces:
                return hook(NS_ALL, arg, [const(arg.name, line)], line)
            if arg.name in self.sequences:
                return hook(SEQ_ALL, arg, [const(arg.name, line)], line)
        return self.visit(arg)  # type: ignore[no-any-return]

    def visit_Call(self, node: nodes.Call) -> nodes.Node:
        callee = node.node
        if isinstance(callee, nodes.Name) and callee.name in self.macros and self._shared(callee.name):
            self.called[callee.name] = None
            node.args = [self.visit(a) for a in node.args]
            node.kwargs = [self.visit(k) for k in node.kwargs]
            node.dyn_args = None if node.dyn_args is None else self.visit(node.dyn_args)
            node.dyn_kwargs = None if node.dyn_kwargs is None else self.visit(node.dyn_kwargs)
            return node
        return self.generic_visit(node)

    def _targets(self, target: nodes.Node) -> None:
        for name in [target] if isinstance(target, nodes.Name) else list(target.find_all(nodes.Name)):
            if name.name in {"loop", *self.sequences, *self.macros} and self._shared(name.name):
                raise self._unsafe(target, f"rebinds {name.name!r}")

    def visit_Assign(self, node: nodes.Assign) -> nodes.Node:
        target, line = node.target, node.lineno
        if isinstance(target, nodes.NSRef):
            if target.name in self.assigned:  # a namespace this iteration made: its own state
                node.node = self.visit(node.node)
                return node
            if target.name not in self.namespaces or not self._shared(target.name):
                raise self._unsafe(node, f"writes to {target.name!r}, not a top-level namespace")
            node.node = hook(
                NS_WRITE, self.visit(node.node), [const(target.name, line), const(target.attr, line)], line
            )
            return node
        self._targets(target)
        node.node = self.visit(node.node)
        self._bind(target)
        return node

    def _bind(self, target: nodes.Node) -> None:
        names = [target] if isinstance(target, nodes.Name) else list(target.find_all(nodes.Name))
        self.assigned |= {n.name for n in names}

    def visit_If(self, node: nodes.If) -> nodes.Node:
        node.test = self.visit(node.test)
        before = set(self.assigned)
        node.body = self._statements(node.body)
        then, self.assigned = self.assigned, set(before)
        for elif_ in node.elif_:
            elif_.test = self.visit(elif_.test)
            elif_.body = self._statements(elif_.body)
            then, self.assigned = then & self.assigned, set(before)
        node.else_ = self._statements(node.else_)
        self.assigned &= then
        return node

    def visit_AssignBlock(self, node: nodes.AssignBlock) -> nodes.Node:
        if isinstance(node.target, nodes.NSRef):
            raise self._unsafe(node, "writes a namespace from a {% set %} block")
        self._targets(node.target)
        node.body = self._inner(node.body)
        self._bind(node.target)
        return node

    def visit_FilterBlock(self, node: nodes.FilterBlock) -> nodes.Node:
        node.body = self._inner(node.body)
        node.filter = self.visit(node.filter)
        return node

    def _inner(self, body: list[nodes.Node]) -> list[nodes.Node]:
        """A block body with a scope of its own: what it assigns does not outlive it."""
        before = set(self.assigned)
        try:
            return self._statements(body)
        finally:
            self.assigned = before

    def visit_For(self, node: nodes.For) -> nodes.Node:
        if any(
            n.name == "loop"
            for part in [node.test, *node.else_]
            if part is not None
            for n in part.find_all(nodes.Name)
        ):
            raise self._unsafe(node, "reads `loop` in a nested loop's test or else block")
        node.iter = self.visit(node.iter)
        self._targets(node.target)
        nested, self.nested, before = self.nested, True, set(self.assigned)
        self._bind(node.target)
        try:
            node.test = None if node.test is None else self.visit(node.test)
            node.body = self._statements(node.body)
        finally:
            self.nested, self.assigned = nested, set(before)
        node.else_ = self._statements(node.else_)
        self.assigned = before
        return node

    def _refuse(self, node: nodes.Node) -> nodes.Node:
        raise self._unsafe(node, f"holds a {type(node).__name__} statement")

    visit_Macro = visit_CallBlock = visit_With = visit_Scope = visit_Block = _refuse
    visit_ScopedEvalContextModifier = visit_EvalContextModifier = _refuse

    def visit_Break(self, node: nodes.Node) -> nodes.Node:
        if not self.nested:
            raise self._unsafe(node, "breaks out of or continues the loop")
        return node

    visit_Continue = visit_Break

    def _statements(self, body: list[nodes.Node]) -> list[nodes.Node]:
        return [self.visit(n) for n in body]

    def body(self, body: list[nodes.Node]) -> list[nodes.Node]:
        """The loop body rewritten, then every macro it calls (transitively)."""
        out = self._statements(body)
        done: set[str] = set()
        while pending := [m for m in self.called if m not in done]:
            for name in pending:
                done.add(name)
                self._macro(self.macros[name])
        return out

    def _macro(self, macro: nodes.Macro) -> None:
        local = frozenset({a.name for a in macro.args} | {"varargs", "kwargs"})
        saved, nested, assigned = self.scope, self.nested, self.assigned
        self.scope, self.nested, self.assigned = (
            _Scope(macro=macro.name, local=local),
            False,
            set(),
        )
        try:
            macro.defaults = [self.visit(d) for d in macro.defaults]
            macro.body = self._statements(macro.body)
        finally:
            self.scope, self.nested, self.assigned = saved, nested, assigned
