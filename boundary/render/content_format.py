"""The content format vLLM 0.33.0 detects for a chat template: ``"openai"`` or ``"string"``.

Where it sits: the render stage's entry, under ``boundary.render.target``: the ``vllm-0.33`` target joins the
text parts of a message for a ``"string"`` template as vLLM does. It parses templates with
jinja2 only (and the ``{% generation %}`` tag from ``boundary.render.sandbox``); nothing is rendered.

A port of ``vllm.renderers.hf._detect_content_format`` and the AST walk it uses (vLLM,
Apache-2.0): a template is ``"openai"`` when some ``{% for %}`` iterates a message's
``content`` (a variable bound from ``messages`` or its items, a namespace alias, a macro
parameter given ``message.content``, or a top-level name ``content``), else ``"string"``; a
template that does not parse is ``"string"``, vLLM's default. ``tests/test_render_target.py``
holds it equal to vLLM's own function on every shipped template and generated ones.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from functools import lru_cache
from typing import Literal

import jinja2
import jinja2.ext
from jinja2 import nodes

from boundary.render.sandbox.template_globals import GenerationTag

ContentFormat = Literal["string", "openai"]
_ENV = jinja2.Environment(
    trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
)


@lru_cache(maxsize=64)
def detect_content_format(source: str) -> ContentFormat:
    """``"openai"`` when the template loops over a message's content, else ``"string"``.
    Cached: at most 64 template sources (each kept as its key)."""
    try:
        root = _ENV.parse(source)
        next(_content_loops(root))
    except StopIteration:
        return "string"
    except Exception:  # vLLM logs and falls back to its default
        return "string"
    return "openai"


def _is_var(node: nodes.Node, name: str) -> bool:
    if isinstance(node, nodes.Name):
        return node.ctx == "load" and node.name == name
    if isinstance(node, nodes.Getattr) and "." in name:
        base, _, attr = name.rpartition(".")
        return node.attr == attr and _is_var(node.node, base)
    return False


def _is_attr(node: nodes.Node, name: str, key: str) -> bool:
    if isinstance(node, nodes.Getitem):
        return _is_var(node.node, name) and isinstance(node.arg, nodes.Const) and node.arg.value == key
    if isinstance(node, nodes.Getattr):
        return _is_var(node.node, name) and node.attr == key
    return False


def _reads(node: nodes.Node, name: str, key: str | None = None) -> bool:
    """``name`` (or ``name.key``), perhaps filtered, tested or sliced."""
    if isinstance(node, nodes.Filter):
        return node.node is not None and _reads(node.node, name, key)
    if isinstance(node, nodes.Test):
        return _reads(node.node, name, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _reads(node.node, name, key)
    return _is_attr(node, name, key) if key else _is_var(node, name)


def _dotted(node: nodes.Node) -> str | None:
    if isinstance(node, nodes.NSRef):
        return f"{node.name}.{node.attr}"
    parts = []
    while isinstance(node, nodes.Getattr):
        parts.append(node.attr)
        node = node.node
    if isinstance(node, nodes.Name):
        parts.append(node.name)
        return ".".join(reversed(parts))
    return None


def _aliases(root: nodes.Node, name: str) -> Iterator[str]:
    """``name`` and every variable (or namespace attribute) assigned from it, transitively."""
    yield name
    seen, pending = {name}, deque([name])
    while pending:
        current = pending.popleft()
        for assign in root.find_all(nodes.Assign):
            lhs, rhs = assign.target, assign.node
            found: list[str] = []
            if isinstance(lhs, nodes.Name) and _reads(rhs, current):
                found.append(lhs.name)
            if (
                isinstance(lhs, nodes.Name)
                and isinstance(rhs, nodes.Call)
                and isinstance(rhs.node, nodes.Name)
                and rhs.node.name == "namespace"
            ):
                found += [f"{lhs.name}.{kw.key}" for kw in rhs.kwargs if _reads(kw.value, current)]
            elif isinstance(lhs, (nodes.Getattr, nodes.NSRef)) and _reads(rhs, current):
                dotted = _dotted(lhs)
                found += [dotted] if dotted is not None else []
            for alias in found:
                yield alias
                if alias != current and alias not in seen:
                    seen.add(alias)
                    pending.append(alias)


def _message_names(root: nodes.Node) -> list[str]:
    """The loop variables of ``{% for message in messages %}`` (or an alias of messages)."""
    names = list(_aliases(root, "messages"))
    out = []
    for loop in root.find_all(nodes.For):
        if any(_reads(loop.iter, name) for name in names):
            assert isinstance(loop.target, nodes.Name)
            out.append(loop.target.name)
    return out


def _macro_content_params(root: nodes.Node, messages: list[str]) -> tuple[dict[int, set[str]], set[int]]:
    """For loops inside macros: the macro's parameters given a message's content, by loop."""
    by_loop: dict[int, set[str]] = {}
    in_macros: set[int] = set()
    for macro in root.find_all(nodes.Macro):
        params = {arg.name for arg in macro.args}
        content_params: set[str] = set()
        for call in root.find_all(nodes.Call):
            if not (isinstance(call.node, nodes.Name) and call.node.name == macro.name):
                continue
            for i, arg in enumerate(call.args):
                if i < len(macro.args) and any(_reads(arg, m, "content") for m in messages):
                    content_params.add(macro.args[i].name)
            for kw in call.kwargs:
                if kw.key in params and any(_reads(kw.value, m, "content") for m in messages):
                    content_params.add(kw.key)
        for loop in macro.find_all(nodes.For):
            in_macros.add(id(loop))
            if content_params:
                by_loop[id(loop)] = content_params
    return by_loop, in_macros


def _content_loops(root: nodes.Node) -> Iterator[nodes.For]:
    """Loops over a message's content (vLLM's ``_iter_nodes_assign_content_item``)."""
    messages = _message_names(root)
    by_loop, in_macros = _macro_content_params(root, messages)
    for loop in root.find_all(nodes.For):
        it = loop.iter
        if (
            any(_reads(it, m, "content") for m in messages)
            or (isinstance(it, nodes.Name) and it.name in by_loop.get(id(loop), ()))
            or (id(loop) not in in_macros and isinstance(it, nodes.Name) and it.name == "content")
        ):
            assert isinstance(loop.target, nodes.Name)  # as vLLM asserts: else its default, "string"
            yield loop


__all__ = ["ContentFormat", "detect_content_format"]
