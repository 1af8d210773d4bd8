"""Rewrites a chat template's Jinja AST so that one render also reports where things are.

The rewrite only adds output of in-band marks (and loop-step checks); it never changes what
the template computes. The renderer records each mark's position and strips it, so the
text is exactly what the original template renders.

Marks added:

- **generation-prompt probe** — before every ``{% if %}`` / ``{% elif %}`` whose test reads
  ``add_generation_prompt``, a call that evaluates the test twice, with the flag as passed
  and flipped, and emits a mark when the two disagree. The first such mark is where the
  rendering with the generation prompt and the one without it part ways: U_end.
- **message start** — at the top of every loop body whose loop variable is one of the
  request's message dicts (checked by identity at render time): the loop site and message
  index.
- **loop step** — at the top of every loop body, a call counting steps against the limits.

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

PROBE = "_bnd_probe"
MESSAGE = "_bnd_message"
TICK = "_bnd_tick"
GENERATION = "_bnd_generation"
RESERVED_NAMES = frozenset({PROBE, MESSAGE, TICK, GENERATION})

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


def _call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    return nodes.Call(nodes.Name(name, "load", lineno=lineno), args, [], None, None, lineno=lineno)


def _unchain_elif(node: nodes.If) -> nodes.If:
    """``if a ... elif b ... else c`` as ``if a ... else (if b ... else c)``: same semantics,
    and every test then heads its own statement, where a probe can precede it."""
    if not node.elif_:
        return node
    first, *rest = node.elif_
    inner = nodes.If(first.test, first.body, rest, node.else_, lineno=first.lineno)
    return nodes.If(node.test, node.body, [], [_unchain_elif(inner)], lineno=node.lineno)


class _Rewriter(NodeTransformer):
    def __init__(self) -> None:
        self.probes = 0
        self.message_sites = 0
        self.unavailable: str | None = None
        self._capture_depth = 0

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
        probe = nodes.Output([_call(PROBE, [node.test, flipped], node.lineno)], lineno=node.lineno)
        return [probe, node]

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self._check_expr(node.iter, "in a for-loop's iterable")
        self._check_expr(node.test, "in a for-loop's filter")
        node.body = self._visit_body(node.body)
        node.else_ = self._visit_body(node.else_)
        head: list[nodes.Node] = [nodes.ExprStmt(_call(TICK, [], node.lineno), lineno=node.lineno)]
        if not self._capture_depth and isinstance(node.target, nodes.Name):
            self.message_sites += 1
            site = nodes.Const(self.message_sites)
            item = nodes.Name(node.target.name, "load", lineno=node.lineno)
            head.append(nodes.Output([_call(MESSAGE, [site, item], node.lineno)], lineno=node.lineno))
        node.body = head + node.body
        return node

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


def instrument(tree: nodes.Template) -> Instrumented:
    """Rewrite ``tree`` in place (parse a fresh tree per call) and describe what was placed."""
    used = {n.name for n in tree.find_all(nodes.Name)} & RESERVED_NAMES
    rewriter = _Rewriter()
    tree = rewriter.visit(tree)
    reason = rewriter.unavailable
    if used:
        reason = f"the template uses names reserved by boundary: {', '.join(sorted(used))}"
    return Instrumented(tree, rewriter.probes, rewriter.message_sites, reason)
