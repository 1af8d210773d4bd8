"""Decide, once per template and from its Jinja AST alone, whether its message loop may be run
incrementally, and rewrite the instrumented tree so that it can be.

Where it sits: inside the session stage, beside ``instrumentation``: it reads the tree
``instrumentation.instrument`` produced and adds the hooks ``boundary.session.incremental.run``
answers (the rewrite itself is ``boundary.session.incremental.rewrite``);
``boundary.session.incremental.store``
compiles the result.

The message loop is the loop the instrumentation marks as printing messages (a
``bnd.message`` mark heads its body), at the top level of the template (outside macros,
captures and other loops). Its body runs, per message, as a function of:

- the message (exact content) and the values of every other name it (or a macro it calls)
  reads from outside, fixed for the whole loop: jinja2 resets a loop body's own variables to
  the outer value at each iteration, so only namespaces carry state from one iteration to
  the next;
- ``loop.<attr>``, ``ns.<attr>`` of a top-level namespace, ``messages[i]`` and
  ``messages|length`` (or any name bound only to ``messages`` or a slice of it), and
  comparisons of those (recorded by their outcome): each such read goes through a hook that
  records the value it returned, so a cached iteration is reused only when every recorded
  read would return the same value now (a verifying trace);
- the recorder's state (probes) and the render's counters, which the runtime keys and replays.

Anything outside that (``messages`` or a namespace or ``loop`` used as a whole, macros with
``caller``, ``loop.cycle`` / ``loop.changed``, ``break`` / ``continue``, impure globals such
as ``strftime_now``, nested loops over messages, a filtered or recursive message loop, ...)
makes the plan a reason string: the session then renders in full and reports why.

The plan also names one fact outside the message loop: a *guarded scan* (``_guard``), the
top-level ``{% for m in messages[::-1] %}{% if ns.multi_step_tool and ... %}`` that finds
the last user query, can do nothing once its guard is false, so it is ended there.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import nodes

from boundary.render import instrumentation as ins
from boundary.session.incremental.rewrite import (
    ENTER,
    ITER,
    LEAVE,
    LENGTH_FILTERS,
    MISS,
    SCAN,
    Rewrite,
    Unsafe,
    const,
    hook,
)


@dataclass(frozen=True, slots=True)
class Plan:
    """A rewritten tree and the names the ``ITER`` hook receives after the loop's items, in
    order: ``namespaces``, ``sequences`` and ``outer`` values. ``site`` is the message loop's
    mark site (``instrumentation.MESSAGE``)."""

    tree: nodes.Template
    target: str
    namespaces: tuple[str, ...]
    sequences: tuple[str, ...]
    outer: tuple[str, ...]
    site: int
    scans: tuple[str, ...] = ()  # the guarded scans found, as ``ns.attr`` (line N)


def _top_level(body: list[nodes.Node]) -> list[nodes.Node]:
    """Statements run at the template's top level: its body and the branches of its ifs."""
    out: list[nodes.Node] = []
    for node in body:
        out.append(node)
        if isinstance(node, nodes.If):
            out += _top_level(node.body)
            for elif_ in node.elif_:
                out += _top_level(elif_.body)
            out += _top_level(node.else_)
    return out


def _namespaces(tree: nodes.Template) -> frozenset[str]:
    """Names bound to ``namespace(...)`` at the top level and bound nowhere else."""
    top = [
        n
        for n in _top_level(tree.body)
        if isinstance(n, nodes.Assign)
        and isinstance(n.target, nodes.Name)
        and isinstance(n.node, nodes.Call)
        and isinstance(n.node.node, nodes.Name)
        and n.node.node.name == "namespace"
    ]
    candidates = {n.target.name for n in top if isinstance(n.target, nodes.Name)}
    ids = {id(n.target) for n in top}
    for name in tree.find_all(nodes.Name):
        if name.name in candidates and name.ctx != "load" and id(name) not in ids:
            candidates.discard(name.name)
    candidates -= {m.name for m in tree.find_all(nodes.Macro)}
    return frozenset(candidates)


def _is_mark(node: nodes.Node, name: str) -> bool:
    return (
        isinstance(node, nodes.Output)
        and len(node.nodes) == 1
        and isinstance(node.nodes[0], nodes.Filter)
        and node.nodes[0].name == name
    )


def _message_loop(tree: nodes.Template) -> nodes.For | None:
    for node in _top_level(tree.body):
        if isinstance(node, nodes.For) and len(node.body) >= 2 and _is_mark(node.body[1], ins.MESSAGE):
            return node
    return None


def _sequences(tree: nodes.Template) -> frozenset[str]:
    """``messages`` and names bound only at the top level, and only to ``messages`` or a
    slice of it (or of another such name), e.g. ``loop_messages = messages[1:]``."""
    top = {id(n) for n in _top_level(tree.body)}

    def source(a: nodes.Assign) -> str | None:
        value = a.node
        if isinstance(value, nodes.Getitem) and isinstance(value.arg, nodes.Slice):
            value = value.node
        if id(a) in top and isinstance(a.target, nodes.Name) and isinstance(value, nodes.Name):
            return value.name
        return None

    assigns = [a for a in tree.find_all(nodes.Assign) if source(a) is not None]
    copies = {id(a.target) for a in assigns}
    other = {n.name for n in tree.find_all(nodes.Name) if n.ctx != "load" and id(n) not in copies}
    names = {"messages"}
    changed = True
    while changed:
        changed = False
        for a in assigns:
            name = a.target.name  # type: ignore[attr-defined]
            if source(a) in names and name not in names and name not in other:
                names.add(name)
                changed = True
    return frozenset(names)


def _macros(tree: nodes.Template) -> dict[str, nodes.Macro]:
    """Top-level macros whose names are bound nowhere else."""
    top = [m for m in tree.body if isinstance(m, nodes.Macro)]
    names = [m.name for m in tree.find_all(nodes.Macro)]
    stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx != "load"}
    return {m.name: m for m in top if names.count(m.name) == 1 and m.name not in stored}


_SCAN_LOOP_ATTRS = frozenset({"index0", "index", "first", "previtem", "depth", "depth0"})


def _int_expr(node: nodes.Node, sequences: frozenset[str]) -> bool:
    """Whether ``node`` is integer arithmetic that cannot raise or print: int constants,
    ``loop.index0`` / ``loop.index``, ``seq|length`` of a message sequence, ``+`` and ``-``."""
    if isinstance(node, nodes.Const):
        return type(node.value) is int
    if isinstance(node, nodes.Getattr):
        return (
            isinstance(node.node, nodes.Name)
            and node.node.name == "loop"
            and node.attr in ("index0", "index")
        )
    if isinstance(node, (nodes.Add, nodes.Sub)):
        return _int_expr(node.left, sequences) and _int_expr(node.right, sequences)
    if isinstance(node, nodes.Filter) and not (node.kwargs or node.dyn_args or node.dyn_kwargs):
        if node.name in LENGTH_FILTERS:
            return not node.args and isinstance(node.node, nodes.Name) and node.node.name in sequences
        if node.name in (ins.CHECKED_ADD, ins.CHECKED_ADDS):
            return all(_int_expr(n, sequences) for n in [node.node, *node.args] if n is not None)
    return False


def _guard(loop: nodes.For, namespaces: frozenset[str], sequences: frozenset[str]) -> tuple[str, str] | None:
    """``(ns, attr)`` when ``loop`` is a guarded scan: its body is the loop step, then local
    integer ``set``s (``_int_expr``), then one ``if ns.attr and ...`` (or ``if ns.attr``)
    with no else, and it reads ``loop`` only by position (``_SCAN_LOOP_ATTRS``). Once
    ``ns.attr`` is false when an iteration starts, that iteration and every later one can
    only take their loop step: the sets cannot raise, the test is false before anything
    else in it runs, and nothing else in the body can make it true again."""
    if loop.recursive or loop.test is not None or loop.else_ or len(loop.body) < 2:
        return None
    head, *sets, last = loop.body
    if not (
        isinstance(head, nodes.ExprStmt)
        and isinstance(head.node, nodes.Filter)
        and head.node.name == ins.TICK
    ):
        return None
    for node in sets:
        if not (
            isinstance(node, nodes.Assign)
            and isinstance(node.target, nodes.Name)
            and node.target.name not in {"loop", *namespaces, *sequences}
            and _int_expr(node.node, sequences)
        ):
            return None
    if not (isinstance(last, nodes.If) and not last.elif_ and not last.else_):
        return None
    flag = last.test
    while isinstance(flag, nodes.And):  # ``a and b and c`` is ``(a and b) and c``: ``a`` runs first
        flag = flag.left
    if not (
        isinstance(flag, nodes.Getattr) and isinstance(flag.node, nodes.Name) and flag.node.name in namespaces
    ):
        return None
    positional = {id(g.node) for g in loop.find_all(nodes.Getattr) if g.attr in _SCAN_LOOP_ATTRS}
    if any(
        n.name == "loop" and id(n) not in positional for body in loop.body for n in body.find_all(nodes.Name)
    ):
        return None
    return flag.node.name, flag.attr


def _rewrite_scans(
    tree: nodes.Template, message_loop: nodes.For, namespaces: frozenset[str], sequences: frozenset[str]
) -> tuple[str, ...]:
    """Route every top-level guarded scan (``_guard``) through ``SCAN``, which stops it once
    its guard is false and charges the steps it skipped; what was found."""
    found: list[str] = []
    for node in _top_level(tree.body):
        if isinstance(node, nodes.For) and node is not message_loop:
            guard = _guard(node, namespaces, sequences)
            if guard is not None:
                line = node.lineno
                ns = nodes.Name(guard[0], "load", lineno=line)
                node.iter = hook(SCAN, node.iter, [ns, const(guard[1], line)], line)  # type: ignore[arg-type]
                found.append(f"{guard[0]}.{guard[1]} (line {line})")
    return tuple(found)


def plan(source: str, parse: object) -> Plan | str:
    """The rewritten, instrumented tree of ``source`` (``parse``: the sandbox's ``parse``),
    or why its message loop cannot run incrementally."""
    parse_ = parse  # a callable: str -> nodes.Template
    original: nodes.Template = parse_(source)  # type: ignore[operator]
    for node in original.find_all((nodes.Filter, nodes.Test)):
        if node.name.startswith("bnd."):
            return f"the template names the reserved filter {node.name!r} (template line {node.lineno})"
    tree = ins.instrument(parse_(source)).tree  # type: ignore[operator]
    loop = _message_loop(tree)
    if loop is None or not isinstance(loop.target, nodes.Name):
        return "the template has no top-level loop that prints messages"
    target, line = loop.target.name, loop.lineno
    if loop.recursive or loop.test is not None:
        return f"the message loop is {'recursive' if loop.recursive else 'filtered'} (template line {line})"
    namespaces = _namespaces(original)
    sequences = _sequences(original) - namespaces
    rewrite = Rewrite(target, namespaces, sequences, _macros(tree))
    try:
        rest = rewrite.body(loop.body[2:])
    except Unsafe as exc:
        return str(exc)
    outer = tuple(n for n in rewrite.outer if n not in (target, *namespaces, *sequences))
    names = [target, *sorted(namespaces), *sorted(sequences), *outer]
    values: list[nodes.Expr] = [nodes.Name(n, "load", lineno=line) for n in names[1:]]
    loop.iter = hook(ITER, loop.iter, values, line)  # type: ignore[arg-type]  # an expression
    item = nodes.Name(target, "load", lineno=line)
    enter = nodes.Output([hook(ENTER, const(0, line), [item], line)], lineno=line)
    leave = nodes.Output([hook(LEAVE, const(0, line), [], line)], lineno=line)
    miss = nodes.If(hook(MISS, const(0, line), [], line), [*rest, leave], [], [], lineno=line)
    mark = loop.body[1].nodes[0]  # type: ignore[attr-defined]  # _is_mark: Output([Filter])
    loop.body = [*loop.body[:2], enter, miss]
    site = mark.args[0].value
    scans = _rewrite_scans(tree, loop, namespaces, sequences)
    return Plan(tree, target, tuple(sorted(namespaces)), tuple(sorted(sequences)), outer, site, scans)


__all__ = ["Plan", "plan"]
