"""What a template does with ``add_generation_prompt`` besides testing it in an ``{% if %}``.

Where it sits: inside the render stage, read by ``boundary.render.instrumentation`` before it
rewrites a template and by ``boundary.render.template_run`` (``BranchState``) as it runs; it only
inspects the AST.

Two questions, both answered statically:

- *Is a statement that names the flag a no-op?* The flag is always passed (transformers and
  ``run_template`` both pass it), so ``{% set add_generation_prompt = add_generation_prompt
  if add_generation_prompt is defined else X %}``, its ``| default(X)`` form and
  ``{% if add_generation_prompt is not defined %}...{% endif %}`` never change it.
- *Is the first divergent test where the two renders part ways?* The instrumented render marks
  U_end at the start of the branch taken by the first test whose two outcomes differ. That is
  where the texts part ways only if nothing *else* the branches do lives on: a branch that sets
  a variable or a ``namespace`` attribute, defines a macro, or advances a ``cycler`` /
  ``joiner`` that the template reads elsewhere carries the flag forward (``{% if
  add_generation_prompt %}{% set ns.agp = true %}{% endif %} ... {% if ns.agp %}``): the two
  renders may print the same text at the branch and part ways later. Such a test is reported
  by ``branch_state`` unless its two branches open with different literal characters (then
  the texts part ways right there, whatever the state). State held in plain variables and
  ``namespace`` attributes is *watched*: the render marks U_end at the branch and withdraws it
  only if the template reads that state after the divergence (if it never does, both renders
  run the same code on the same values after the branch). Any other state (a cycler, a
  ``caller()``, a namespace passed whole, a macro defined in the branch) withdraws it at once.
  A divergence at a *silent* test (neither branch prints) changes no text by itself: it places
  no mark, and only its state is watched.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from jinja2 import nodes

from boundary.render.flag_flip import GENERATION_FLAG

# Globals a template may call that change no state (constructors return a fresh object).
_PURE_GLOBALS = frozenset(
    {"raise_exception", "strftime_now", "range", "dict", "namespace", "lipsum", "cycler", "joiner"}
)
_STATEFUL_METHODS = frozenset({"next", "reset", "changed"})  # cycler.next(), loop.changed() ...


def _is_flag(node: nodes.Node | None) -> bool:
    return isinstance(node, nodes.Name) and node.name == GENERATION_FLAG


def _defined_test(node: nodes.Node) -> bool | None:
    """True for ``flag is defined`` (or ``not flag is undefined``), False for the opposite,
    None for anything else."""
    negated = isinstance(node, nodes.Not)
    test = node.node if isinstance(node, nodes.Not) else node
    if not (isinstance(test, nodes.Test) and _is_flag(test.node) and not test.args and not test.kwargs):
        return None
    if test.name not in ("defined", "undefined"):
        return None
    return (test.name == "defined") != negated


def is_noop_rebinding(node: nodes.Assign) -> bool:
    """``add_generation_prompt = add_generation_prompt if add_generation_prompt is defined
    else X`` (either arm order, ``is undefined`` too) or ``= add_generation_prompt |
    default(X)`` (``d``, not the ``boolean=true`` form): the value is the flag itself."""
    if not (isinstance(node.target, nodes.Name) and node.target.name == GENERATION_FLAG):
        return False
    value = node.node
    if isinstance(value, nodes.CondExpr):
        defined = _defined_test(value.test)
        return _is_flag(value.expr1 if defined else value.expr2 if defined is False else None)
    if isinstance(value, nodes.Filter) and value.name in ("default", "d") and _is_flag(value.node):
        if value.dyn_args is not None or value.dyn_kwargs is not None or not value.args:
            return False
        flags = [*value.args[1:], *(k.value for k in value.kwargs if k.key == "boolean")]
        other = [k for k in value.kwargs if k.key != "boolean"]
        plain = all(isinstance(f, nodes.Const) and f.value is False for f in flags)
        return plain and not other and len(value.args) <= 2
    return False


def is_default_guard(node: nodes.If) -> bool:
    """``{% if add_generation_prompt is not defined %}{% set add_generation_prompt = false
    %}{% endif %}``: dead code, since the flag is always passed."""
    return _defined_test(node.test) is False and not node.elif_ and not node.else_


@dataclass(frozen=True, slots=True)
class StateReads:
    """Where a template reads state: every load of a name, of ``name.attr``, and the names
    loaded other than as the object of an attribute read (``ns`` passed whole)."""

    names: Counter[str]
    attributes: Counter[tuple[str, str]]
    whole: frozenset[str]
    macros: dict[str, nodes.Macro]

    @classmethod
    def of(cls, tree: nodes.Template) -> StateReads:
        """Collect the reads of ``tree`` (before it is rewritten)."""
        attributes: Counter[tuple[str, str]] = Counter()
        objects: set[int] = set()
        for node in tree.find_all(nodes.Getattr):
            if isinstance(node.node, nodes.Name) and node.node.ctx == "load":
                attributes[(node.node.name, node.attr)] += 1
                objects.add(id(node.node))
        loads = [n for n in tree.find_all(nodes.Name) if n.ctx == "load"]
        whole = frozenset(n.name for n in loads if id(n) not in objects)
        macros = {m.name: copy.deepcopy(m) for m in tree.find_all(nodes.Macro)}  # kept unrewritten
        return cls(Counter(n.name for n in loads), attributes, whole, macros)


def _within(body: list[nodes.Node]) -> Iterator[nodes.Node]:
    for stmt in body:
        yield stmt
        yield from stmt.find_all(nodes.Node)


def _targets(node: nodes.Node) -> Iterator[nodes.Name | nodes.NSRef]:
    if isinstance(node, (nodes.Name, nodes.NSRef)):
        yield node
    elif isinstance(node, nodes.Tuple):
        for item in node.items:
            yield from _targets(item)


Effect = tuple[str, str | None]
"""What a branch changes: a description, and the key its later reads are watched by
(``name`` or ``ns.attr``), None when they cannot be watched."""


def _effects(body: list[nodes.Node], reads: StateReads, seen: set[str], local: bool) -> Iterator[Effect]:
    """What the statements in ``body`` change that the template reads anywhere; ``local``
    for a macro body, whose plain ``set`` stays inside the call."""
    for node in _within(body):
        if isinstance(node, (nodes.Assign, nodes.AssignBlock)):
            for target in _targets(node.target):
                if isinstance(target, nodes.NSRef):
                    key = f"{target.name}.{target.attr}"
                    if target.name in reads.whole:
                        yield f"{key} (its namespace is read whole)", None
                    elif reads.attributes[(target.name, target.attr)]:
                        yield key, key
                elif not local and reads.names[target.name]:
                    yield target.name, target.name
        elif isinstance(node, nodes.Macro) and not local and reads.names[node.name]:
            yield f"macro {node.name}", None
        elif isinstance(node, nodes.Call):
            yield from _call_effects(node, reads, seen)


def _call_effects(call: nodes.Call, reads: StateReads, seen: set[str]) -> Iterator[Effect]:
    callee = call.node
    if isinstance(callee, nodes.Getattr) and callee.attr in _STATEFUL_METHODS:
        owner = callee.node
        if not isinstance(owner, nodes.Name) or reads.names[owner.name] > 1:
            yield f"the state behind .{callee.attr}()", None
    elif isinstance(callee, nodes.Name) and callee.name == "caller":
        yield "whatever caller() does", None
    elif isinstance(callee, nodes.Name) and callee.name in reads.macros:
        if callee.name not in seen:
            seen.add(callee.name)
            yield from _effects(reads.macros[callee.name].body, reads, seen, local=True)
    elif isinstance(callee, nodes.Name) and callee.name not in _PURE_GLOBALS and reads.names[callee.name] > 1:
        yield f"the state behind {callee.name}()", None


def _opening(body: list[nodes.Node]) -> str | None:
    """The first character a branch prints, when it opens with literal text."""
    first = body[0] if body else None
    if not isinstance(first, nodes.Output) or not first.nodes:
        return None
    head = first.nodes[0]
    text = head.data if isinstance(head, nodes.TemplateData) else None
    if isinstance(head, nodes.Const) and isinstance(head.value, str):
        text = head.value
    return text[0] if text else None


def is_silent(node: nodes.If) -> bool:
    """Neither branch of ``node`` prints anything: a divergence there changes no text by
    itself, only (perhaps) state."""
    for stmt in [*node.body, *node.else_]:
        if isinstance(stmt, (nodes.Output, nodes.CallBlock)) or any(
            True for _ in stmt.find_all((nodes.Output, nodes.CallBlock))
        ):
            return False
    return True


@dataclass(frozen=True, slots=True)
class BranchState:
    """State a branch on the flag carries past itself. ``watch``: the keys whose reads after
    a divergence there withdraw U_end; None when the state cannot be watched (U_end is
    withdrawn at the divergence)."""

    reason: str
    watch: frozenset[str] | None


def branch_state(node: nodes.If, reads: StateReads) -> BranchState | None:
    """What a divergence at ``node`` (an ``if`` without ``elif``) carries past the branch that
    could make the two renders part ways later; None when nothing does."""
    if is_default_guard(node):
        return None  # its outcome never depends on the flag's value
    then, otherwise = _opening(node.body), _opening(node.else_)
    if then is not None and otherwise is not None and then != otherwise:
        return None
    effects = list(_effects([*node.body, *node.else_], reads, set(), local=False))
    if not effects:
        return None
    keys = [key for _, key in effects]
    unwatched = next((what for what, key in effects if key is None), None)
    reason = (
        f"the branch on {GENERATION_FLAG} at template line {node.lineno} changes "
        f"{unwatched or effects[0][0]}, which the template reads"
    )
    if unwatched is not None:
        return BranchState(f"{reason} elsewhere: the two renders may part ways later", None)
    return BranchState(
        f"{reason} after the renders took different branches: they may part ways later",
        frozenset(k for k in keys if k is not None),
    )


def watched_keys(tree: nodes.Template, reads: StateReads) -> frozenset[str]:
    """Every key some branch on the flag in ``tree`` (unrewritten) may need watched."""
    keys: set[str] = set()
    for node in tree.find_all(nodes.If):
        tests = [node.test, *(e.test for e in node.elif_)]
        if not any(_is_flag(n) for t in tests for n in [t, *t.find_all(nodes.Name)]):
            continue
        branches = [node.body, *(e.body for e in node.elif_), node.else_]
        for _, key in _effects([s for b in branches for s in b], reads, set(), local=False):
            if key is not None:
                keys.add(key)
    return frozenset(keys)
