"""Rewrites a chat template's Jinja AST so that one render also reports where things are.

The rewrite only adds output of in-band marks (and loop-step checks); it never changes what
the template computes. The renderer records each mark's position and strips it, so the
text is exactly what the original template renders.

Marks added:

- **generation-prompt probe** — before every ``{% if %}`` / ``{% elif %}`` whose test reads
  ``add_generation_prompt``, a call that evaluates the test twice, with the flag as passed
  and flipped, and emits a mark when the two disagree. The first such mark is where the
  rendering with the generation prompt and the one without it part ways: U_end.
- **message start** — at the top of every printing loop body that iterates over
  ``messages`` (or a variable assigned from it), when the loop variable is one of the
  request's message dicts (checked by identity at render time): the loop site and index.
- **loop step** — at the top of every loop body, a step counted against the limits.

It also routes every ``+`` through a size check (``RenderLimits.max_string_chars``).
The callbacks are filters applied to the per-render recorder (``_bnd_rec``): jinja2 calls
filters directly, without the sandbox's per-call checks, which keeps the overhead small.

A template that reads ``add_generation_prompt`` anywhere else (a ``{% set %}``, an output
expression, a macro body, a captured block), where a probe could not be placed soundly,
gets a static ``unavailable_reason`` instead, and its boundary is reported unavailable.

jinja2 gotchas handled here: the transformer mutates the tree in place (callers parse fresh
per compile), and ``Node.find_all`` does not yield the node itself.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

from jinja2 import nodes
from jinja2.visitor import NodeTransformer

GENERATION_FLAG = "add_generation_prompt"

RECORDER = "_bnd_rec"  # the per-render recorder, passed as a template variable
PROBE = "_bnd_probe"
MESSAGE = "_bnd_message"
TICK = "_bnd_tick"
GENERATION = "_bnd_generation"
CHECKED_ADD = "_bnd_add"
RESERVED_NAMES = frozenset({RECORDER, PROBE, MESSAGE, TICK, GENERATION, CHECKED_ADD})

# Statements whose output is captured as a value (and may be filtered) instead of printed.
_CAPTURING = (nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.AssignBlock)


@dataclass(frozen=True, slots=True)
class Instrumented:
    """The rewritten tree and what the rewrite learned about the template."""

    tree: nodes.Template
    probes: int  # generation-prompt probes placed
    message_sites: int  # loop bodies that may start a message
    unavailable_reason: str | None  # why U_end cannot be located, when it cannot


def _reads_flag(node: nodes.Node) -> bool:
    if isinstance(node, nodes.Name):
        return node.name == GENERATION_FLAG and node.ctx == "load"
    return any(n.name == GENERATION_FLAG and n.ctx == "load" for n in node.find_all(nodes.Name))


def _flag_reads(node: nodes.Node) -> Iterator[nodes.Name]:
    if isinstance(node, nodes.Name):
        if node.name == GENERATION_FLAG and node.ctx == "load":
            yield node
        return
    for name in node.find_all(nodes.Name):
        if name.name == GENERATION_FLAG and name.ctx == "load":
            yield name


class _FlipFlag(NodeTransformer):
    def visit_Name(self, node: nodes.Name) -> nodes.Node:
        if node.name == GENERATION_FLAG and node.ctx == "load":
            return nodes.Not(nodes.Name(GENERATION_FLAG, "load", lineno=node.lineno), lineno=node.lineno)
        return node


def recorder_call(callback: str, args: list[nodes.Expr], lineno: int) -> nodes.Filter:
    """``_bnd_rec|callback(*args)``: a callback on the per-render recorder."""
    recorder = nodes.Name(RECORDER, "load", lineno=lineno)
    return nodes.Filter(recorder, callback, args, [], None, None, lineno=lineno)


def _unchain_elif(node: nodes.If) -> nodes.If:
    """``if a ... elif b ... else c`` as ``if a ... else (if b ... else c)``: same semantics,
    and every test then heads its own statement, where a probe can precede it."""
    if not node.elif_:
        return node
    first, *rest = node.elif_
    inner = nodes.If(first.test, first.body, rest, node.else_, lineno=first.lineno)
    return nodes.If(node.test, node.body, [], [_unchain_elif(inner)], lineno=node.lineno)


class _Rewriter(NodeTransformer):
    def __init__(self, message_names: frozenset[str]) -> None:
        self.probes = 0
        self.message_sites = 0
        self.unavailable: str | None = None
        self._capture_depth = 0
        self._message_names = message_names

    def _unavailable(self, name: nodes.Name, where: str) -> None:
        if self.unavailable is None:
            self.unavailable = f"{GENERATION_FLAG} is read {where} (template line {name.lineno})"

    def _check_expr(self, expr: nodes.Node | None, where: str) -> None:
        if expr is not None:
            for name in _flag_reads(expr):
                self._unavailable(name, where)

    def generic_visit(self, node: nodes.Node, *args: object, **kwargs: object) -> nodes.Node:
        if isinstance(node, _CAPTURING):
            self._capture_depth += 1
            try:
                for name in _flag_reads(node):
                    self._unavailable(name, f"inside a {type(node).__name__} whose output is captured")
                return super().generic_visit(node, *args, **kwargs)
            finally:
                self._capture_depth -= 1
        if isinstance(node, (nodes.Output, nodes.Assign, nodes.ExprStmt)):
            self._check_expr(node, f"in a {type(node).__name__} statement")
        elif isinstance(node, nodes.With):
            for value in node.values:
                self._check_expr(value, "in a with-statement")
        return super().generic_visit(node, *args, **kwargs)

    def visit_If(self, node: nodes.If) -> list[nodes.Node] | nodes.Node:
        node = _unchain_elif(node)
        node.body = self._visit_body(node.body)
        node.else_ = self._visit_body(node.else_)
        if self._capture_depth or not _reads_flag(node.test):
            if self._capture_depth:
                self._check_expr(node.test, "in a test inside a captured block")
            return node
        self.probes += 1
        flipped = _FlipFlag().visit(copy.deepcopy(node.test))
        probe = nodes.Output([recorder_call(PROBE, [node.test, flipped], node.lineno)], lineno=node.lineno)
        return [probe, node]

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self._check_expr(node.iter, "in a for-loop's iterable")
        self._check_expr(node.test, "in a for-loop's filter")
        node.body = self._visit_body(node.body)
        node.else_ = self._visit_body(node.else_)
        head: list[nodes.Node] = [nodes.ExprStmt(recorder_call(TICK, [], node.lineno), lineno=node.lineno)]
        if (
            not self._capture_depth
            and isinstance(node.target, nodes.Name)
            and _reads_any(node.iter, self._message_names)
            and any(True for _ in _outputs(node.body))
        ):
            self.message_sites += 1
            site = nodes.Const(self.message_sites)
            item = nodes.Name(node.target.name, "load", lineno=node.lineno)
            head.append(nodes.Output([recorder_call(MESSAGE, [site, item], node.lineno)], lineno=node.lineno))
        node.body = head + node.body
        return node

    def visit_Add(self, node: nodes.Add) -> nodes.Filter:
        left, right = self.visit(node.left), self.visit(node.right)
        return nodes.Filter(left, CHECKED_ADD, [right], [], None, None, lineno=node.lineno)

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
    assigns = [a for a in tree.find_all(nodes.Assign) if isinstance(a.target, nodes.Name)]
    changed = True
    while changed:
        changed = False
        for a in assigns:
            if a.target.name not in names and _reads_any(a.node, frozenset(names)):
                names.add(a.target.name)
                changed = True
    return frozenset(names)


def instrument(tree: nodes.Template) -> Instrumented:
    """Rewrite ``tree`` in place (parse a fresh tree per call) and describe what was placed."""
    used = {n.name for n in tree.find_all(nodes.Name)} | {f.name for f in tree.find_all(nodes.Filter)}
    used &= RESERVED_NAMES
    rewriter = _Rewriter(_message_names(tree))
    tree = rewriter.visit(tree)
    reason = rewriter.unavailable
    if used:
        reason = f"the template uses names reserved by boundary: {', '.join(sorted(used))}"
    return Instrumented(tree, rewriter.probes, rewriter.message_sites, reason)
