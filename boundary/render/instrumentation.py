"""Rewrite a chat template's Jinja AST so that one render also reports where things are.

Where it sits: inside the render stage, under ``boundary.render.template_run``, which calls it once per
compile to rewrite the template's AST before the run; it imports ``flag_branches`` and
``flag_flip``.

The invariant: **removing what the rewrite adds gives transformers' output, byte for byte,
for every template transformers renders.** The rewrite never evaluates template code twice
and never puts a mark where template code could observe it:

- marks are printed only in *direct output* — statements whose output flows straight to the
  template's top-level output stream. Output captured as a value (``{% set %}`` blocks,
  macro and ``caller()`` bodies, ``{% filter %}`` blocks, recursive loops, named blocks)
  can be measured, sliced or filtered by the template, so no mark is ever placed there;
- every ``{% if %}`` / ``{% elif %}`` test that reads ``add_generation_prompt`` (in direct
  output) becomes ``probe(flipped, test)``: the flipped evaluation (``boundary.render.flag_flip``,
  side-effect free by construction) runs first, then the template's own test exactly once,
  and the branch taken starts with a mark that is non-empty only at the first test whose
  two outcomes differ — U_end;
- at the top of loop bodies over ``messages`` (direct output only), a mark with the loop
  site and the message index (the loop item is matched by identity against the request's
  message dicts);
- at the top of every loop body, a step counted against the render limits; ``+`` (a chain
  ``a + b + c`` in one call, its operands evaluated left to right as before), ``~`` and
  slices are routed through the sandbox's size checks;
- ``{% generation %}`` blocks (transformers' extension, same scoping) are bracketed by marks
  when they sit in direct output.

The added calls are filters whose names are not Jinja identifiers (``bnd.probe`` ...), so no
template can name, read or call them. A template that reads the flag anywhere a probe can't
be placed soundly (an output expression, a ``{% set %}``, a loop's iterable, captured output)
or that rebinds it gets a static ``unavailable_reason`` instead (the no-op ``set ... if
add_generation_prompt is defined else ...`` / ``| default(...)`` idioms excepted, see
``boundary.render.flag_branches``). A probe whose branches carry state the template reads elsewhere
is marked ``stateful``: when it is the first to diverge, U_end is withdrawn for that render if
the template reads that state afterwards (reads of watched state go through ``bnd.read``), or
at once when the state cannot be watched.

jinja2 gotchas handled here: the transformer mutates the tree in place (callers parse fresh
per compile), and ``Node.find_all`` does not yield the node itself.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeGuard, cast

from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from boundary.render.flag_branches import (
    BranchState,
    StateReads,
    branch_state,
    is_default_guard,
    is_noop_rebinding,
    is_silent,
    watched_keys,
)
from boundary.render.flag_flip import GENERATION_FLAG, test_names

FLIP = "bnd.flip"
PROBE = "bnd.probe"
EMIT = "bnd.emit"
MESSAGE = "bnd.message"
TICK = "bnd.tick"
GENERATION = "bnd.generation"
CHECKED_ADD = "bnd.add"
CHECKED_ADDS = "bnd.adds"  # a + b + c + ...: one call for the chain
CHECKED_CONCAT = "bnd.concat"
CHECKED_SLICE = "bnd.slice"
READ = "bnd.read"  # a read of state a branch on the flag may have changed

GENERATION_METHOD = "_generation_support"  # transformers' extension method name


@dataclass(frozen=True, slots=True)
class ProbeSite:
    """A probed ``if`` test: its site number, the expression and where it is; ``stateful``
    says why a divergence there may not be where the renders part ways (None: it is)."""

    site: int
    test: nodes.Expr
    lineno: int
    stateful: BranchState | None = None
    silent: bool = False  # neither branch prints: a divergence there places no mark


@dataclass(frozen=True, slots=True)
class Instrumented:
    """The rewritten tree and what the rewrite learned about the template."""

    tree: nodes.Template
    probes: tuple[ProbeSite, ...]
    message_sites: int  # loop bodies that may start a message
    unavailable_reason: str | None  # why U_end cannot be located, when it cannot
    generation_reason: str | None  # why ``{% generation %}`` spans are not tracked, when not


def _names(node: nodes.Node, ctx: str | None = "load") -> Iterator[nodes.Name]:
    candidates = [node] if isinstance(node, nodes.Name) else []
    for name in [*candidates, *node.find_all(nodes.Name)]:
        if name.name == GENERATION_FLAG and (ctx is None or name.ctx == ctx):
            yield name


def _reads_flag(node: nodes.Node) -> bool:
    return next(_names(node), None) is not None


def _call(filter_name: str, subject: nodes.Expr, args: Sequence[nodes.Expr], lineno: int) -> nodes.Filter:
    return nodes.Filter(subject, filter_name, args, [], None, None, lineno=lineno)


def _mark(filter_name: str, args: list[nodes.Expr], lineno: int) -> nodes.Output:
    return nodes.Output([_call(filter_name, nodes.Const(0), args, lineno)], lineno=lineno)


def _unchain_elif(node: nodes.If) -> nodes.If:
    """``if a ... elif b ... else c`` as ``if a ... else (if b ... else c)``: same semantics,
    and every test then heads its own statement."""
    if not node.elif_:
        return node
    first, *rest = node.elif_
    inner = nodes.If(first.test, first.body, rest, node.else_, lineno=first.lineno)
    return nodes.If(node.test, node.body, [], [_unchain_elif(inner)], lineno=node.lineno)


def _is_generation_block(node: nodes.Node) -> TypeGuard[nodes.CallBlock]:
    return (
        isinstance(node, nodes.CallBlock)
        and isinstance(node.call.node, nodes.ExtensionAttribute)
        and node.call.node.name == GENERATION_METHOD
    )


def _captures(node: nodes.Node, transparent: frozenset[str]) -> bool:
    """Whether ``node``'s body output is captured as a value the template can inspect."""
    if isinstance(node, nodes.For):
        return node.recursive
    if _is_generation_block(node):
        return False  # its output is returned unchanged (transformers' semantics)
    if isinstance(node, nodes.Macro):
        return node.name not in transparent
    return isinstance(node, (nodes.CallBlock, nodes.FilterBlock, nodes.AssignBlock, nodes.Block))


def _direct_outputs(body: list[nodes.Node], transparent: frozenset[str]) -> Iterator[nodes.Output]:
    for node in body:
        if isinstance(node, nodes.Output):
            yield node
        elif not _captures(node, transparent):
            children = [c for c in node.iter_child_nodes() if not isinstance(c, nodes.Expr)]
            yield from _direct_outputs(children, transparent)


def transparent_macros(tree: nodes.Template) -> frozenset[str]:
    """Top-level macros whose output always reaches direct output unchanged: every use of the
    name is a bare call printed by ``{{ name(...) }}`` in direct output (possibly inside another
    such macro). Marks inside their bodies are as safe as at top level."""
    candidates = {m.name for m in tree.body if isinstance(m, nodes.Macro)}
    if not candidates:
        return frozenset()
    names = list(tree.find_all(nodes.Name))
    candidates -= {n.name for n in names if n.ctx != "load"}
    candidates -= {m.name for m in tree.find_all(nodes.Macro) if m not in tree.body}
    while True:
        current = frozenset(candidates)
        printed = {
            id(e.node)
            for o in _direct_outputs(tree.body, current)
            for e in o.nodes
            if isinstance(e, nodes.Call) and isinstance(e.node, nodes.Name)
        }
        misused = {n.name for n in names if n.name in candidates and id(n) not in printed}
        if not misused:
            return current
        candidates -= misused


class _Instrument(NodeTransformer):
    """Places probes, message marks, loop steps and size checks, tracking whether the
    statement being visited prints to direct output."""

    def __init__(
        self,
        message_names: frozenset[str],
        transparent: frozenset[str],
        reads: StateReads,
        watched: frozenset[str],
    ) -> None:
        self._transparent = transparent
        self._reads = reads
        self._watched = watched
        self.probes: list[ProbeSite] = []
        self.message_sites = 0
        self.generation_reason: str | None = None
        self._captured = 0
        self._message_names = message_names

    def generic_visit(self, node: nodes.Node, *args: object, **kwargs: object) -> nodes.Node:
        captures = _captures(node, self._transparent)
        self._captured += captures
        try:
            if _is_generation_block(node):
                self._generation(node)
            return super().generic_visit(node, *args, **kwargs)
        finally:
            self._captured -= captures

    def visit_If(self, node: nodes.If) -> nodes.Node:
        node = _unchain_elif(node)
        original = cast(nodes.Expr, copy.deepcopy(node.test))  # the parser makes every test an Expr
        stateful = branch_state(node, self._reads)  # before the branches are rewritten
        silent = is_silent(node)
        node.test = self.visit(node.test)
        node.body = self._visit_body(node.body)
        node.else_ = self._visit_body(node.else_)
        if self._captured or not _reads_flag(node.test):
            return node
        site = len(self.probes)
        self.probes.append(ProbeSite(site, original, node.lineno, stateful, silent))
        names = [nodes.Name(n, "load", lineno=node.lineno) for n in test_names(original)]
        flipped = _call(FLIP, nodes.Const(site), names, node.lineno)
        node.test = _call(PROBE, flipped, [nodes.Const(site), cast(nodes.Expr, node.test)], node.lineno)
        node.body = [_mark(EMIT, [], node.lineno), *node.body]
        node.else_ = [_mark(EMIT, [], node.lineno), *node.else_]
        return node

    def visit_For(self, node: nodes.For) -> nodes.Node:
        captures = node.recursive
        self._captured += captures
        try:
            node.iter = self.visit(node.iter)
            if node.test is not None:
                node.test = self.visit(node.test)
            node.body = self._visit_body(node.body)
            node.else_ = self._visit_body(node.else_)
        finally:
            self._captured -= captures
        head: list[nodes.Node] = [
            nodes.ExprStmt(_call(TICK, nodes.Const(0), [], node.lineno), lineno=node.lineno)
        ]
        if (
            not self._captured
            and not captures
            and isinstance(node.target, nodes.Name)
            and _reads_any(node.iter, self._message_names)
            and any(True for _ in _outputs(node.body))
        ):
            self.message_sites += 1
            item = nodes.Name(node.target.name, "load", lineno=node.lineno)
            head.append(_mark(MESSAGE, [nodes.Const(self.message_sites), item], node.lineno))
        node.body = head + node.body
        return node

    def visit_Add(self, node: nodes.Add) -> nodes.Filter:
        operands: list[nodes.Expr] = []
        chain: nodes.Expr = node
        while isinstance(chain, nodes.Add):  # a + b + c parses as (a + b) + c
            operands.append(chain.right)
            chain = chain.left
        first, *rest = [self.visit(e) for e in [chain, *reversed(operands)]]
        return _call(CHECKED_ADD if len(rest) == 1 else CHECKED_ADDS, first, rest, node.lineno)

    def visit_Getattr(self, node: nodes.Getattr) -> nodes.Node:
        owner = node.node
        key = f"{owner.name}.{node.attr}" if isinstance(owner, nodes.Name) and owner.ctx == "load" else None
        if key is not None and key in self._watched:
            return _call(READ, node, [nodes.Const(key)], node.lineno)
        return self.generic_visit(node)

    def visit_Name(self, node: nodes.Name) -> nodes.Node:
        if node.ctx == "load" and node.name in self._watched:
            return _call(READ, node, [nodes.Const(node.name)], node.lineno)
        return node

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Node:
        if not isinstance(node.arg, nodes.Slice):
            return self.generic_visit(node)
        bounds = [node.arg.start, node.arg.stop, node.arg.step]
        args = [nodes.Const(None) if b is None else self.visit(b) for b in bounds]
        return _call(CHECKED_SLICE, self.visit(node.node), args, node.lineno)

    def visit_Concat(self, node: nodes.Concat) -> nodes.Filter:
        parts = [self.visit(n) for n in node.nodes]
        return _call(CHECKED_CONCAT, nodes.Tuple(parts, "load", lineno=node.lineno), [], node.lineno)

    def _generation(self, node: nodes.CallBlock) -> None:
        if self._captured > 0:
            self.generation_reason = (
                f"a {{% generation %}} block (template line {node.lineno}) sits in captured output"
            )
            return
        node.body = [_mark(GENERATION, [nodes.Const(True)], node.lineno), *node.body]
        node.body.append(_mark(GENERATION, [nodes.Const(False)], node.lineno))

    def _visit_body(self, body: list[nodes.Node]) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for child in body:
            result = self.visit(child)
            if result is None:
                continue
            out.extend(result if isinstance(result, list) else [result])
        return out

    def visit_Template(self, node: nodes.Template) -> nodes.Template:
        node.body = self._visit_body(node.body)
        return node


def _reads_any(node: nodes.Node, names: frozenset[str]) -> bool:
    if isinstance(node, nodes.Name):
        return node.name in names
    return any(n.name in names for n in node.find_all(nodes.Name))


def _outputs(body: list[nodes.Node]) -> Iterator[nodes.Output]:
    """Output statements in ``body`` that print when it runs (macro definitions excluded)."""
    for stmt in body:
        if isinstance(stmt, nodes.Output):
            yield stmt
        elif not isinstance(stmt, nodes.Macro):
            yield from (o for o in stmt.find_all(nodes.Output))


def _message_names(tree: nodes.Template) -> frozenset[str]:
    """``messages`` and every variable assigned from an expression that reads it (e.g.
    ``loop_messages = messages[1:]``): the iterables a message loop can run over."""
    names = {"messages"}
    assigns = [
        (a.target.name, a.node) for a in tree.find_all(nodes.Assign) if isinstance(a.target, nodes.Name)
    ]
    changed = True
    while changed:
        changed = False
        for target, value in assigns:
            if target not in names and _reads_any(value, frozenset(names)):
                names.add(target)
                changed = True
    return frozenset(names)


class _FlagUse:
    """Finds reads of the flag that no probe covers, and rebindings of the flag."""

    def __init__(self, transparent: frozenset[str]) -> None:
        self._transparent = transparent
        self.reason: str | None = None

    def _flag(self, lineno: int, where: str) -> None:
        if self.reason is None:
            self.reason = f"{GENERATION_FLAG} is {where} (template line {lineno})"

    def scan(self, body: list[nodes.Node], captured: str | None) -> None:
        for node in body:
            self.statement(node, captured)

    def statement(self, node: nodes.Node, captured: str | None) -> None:
        """``captured`` names the innermost construct whose output is captured, if any."""
        if isinstance(node, nodes.If) and is_default_guard(node):
            return
        if isinstance(node, nodes.Assign) and is_noop_rebinding(node):
            return
        if isinstance(node, nodes.If):
            for test in [node.test, *(e.test for e in node.elif_)]:
                if captured and _reads_flag(test):
                    self._flag(test.lineno, f"tested inside a {captured} whose output is captured")
                self._expression(test, inside_test=True)
            for branch in [node.body, *(e.body for e in node.elif_), node.else_]:
                self.scan(branch, captured)
            return
        if _captures(node, self._transparent):
            captured = "recursive loop" if isinstance(node, nodes.For) else type(node).__name__
        for child in node.iter_child_nodes():
            if isinstance(child, nodes.Expr):
                self._expression(child, inside_test=False)
            else:
                self.statement(child, captured)

    def _expression(self, expr: nodes.Node, *, inside_test: bool) -> None:
        for name in _names(expr, ctx=None):
            if name.ctx != "load":
                self._flag(name.lineno, "rebound by the template")
            elif not inside_test:
                self._flag(name.lineno, "read outside an if-test")


def instrument(tree: nodes.Template) -> Instrumented:
    """Rewrite ``tree`` in place (parse a fresh tree per call) and describe what was placed."""
    transparent = transparent_macros(tree)
    use = _FlagUse(transparent)
    use.scan(tree.body, captured=None)
    reads = StateReads.of(tree)
    rewriter = _Instrument(_message_names(tree), transparent, reads, watched_keys(tree, reads))
    tree = rewriter.visit(tree)
    return Instrumented(
        tree, tuple(rewriter.probes), rewriter.message_sites, use.reason, rewriter.generation_reason
    )
