"""Render targets: whose request handling a render reproduces, named and as data.

Where it sits: the render stage's entry, after validation (``boundary.request``): it
turns a validated request into the message and tool dicts the template reads, the way the
named target hands them over. The renderer, sessions and CLI only pass a target's name
through (``resolve_target``); every rule lives here.

- ``vllm-0.33`` (the default): vLLM 0.33.0's OpenAI server with its pinned transformers
  (< 5.21). A message is rebuilt from the fields vLLM reads, in its order (``role``,
  ``content``, ``tool_calls``, ``reasoning``, ``reasoning_content``, ``tool_call_id``,
  ``name``, ``task``; a developer message's ``tools``); reasoning sent as ``reasoning`` or
  ``reasoning_content`` is given under both (``reasoning`` wins); ``None`` content is ``""``;
  ``tool_calls`` that is ``None`` or empty is left out; each call is ``{id, function:
  {arguments, name, ...}, type, ...}`` with its arguments an object; a tool message's list of
  text parts is joined with newlines. Tools are ``ChatCompletionToolsParam.model_dump()``:
  ``{type, function: {name, description, parameters[, strict][, defer_loading]}[,
  defer_loading]}``, ``description`` / ``parameters`` kept when ``None``, other keys dropped.
  On top, as family facts: the family's ``reasoning_field``, ``tool_arguments`` and
  ``content_parts = "join"``.
- ``transformers`` (the installed version) or ``transformers-X.Y[.Z]`` (a declared one):
  ``apply_chat_template`` given the request as the client sent it — every field in the
  client's order, ``None`` included, tools untouched — plus the version's own rules
  (``TRANSFORMERS_RULES``): from 5.21 reasoning found under ``reasoning_content``,
  ``thinking`` or ``reasoning`` (first not ``None``) fills ``reasoning_content`` and, when
  unset, ``thinking``; from 5.24 fields whose value is ``None`` are dropped first.

Invariant: the dicts returned are fresh copies; nothing the caller holds is shared with them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal

from boundary.errors import RequestError
from boundary.render.content_format import ContentFormat
from boundary.request.models import Tool

DEFAULT_TARGET = "vllm-0.33"
"""The target a render reproduces when none is named (README)."""

TARGET_NAMES = ("vllm-0.33", "transformers")

VLLM_MESSAGE_FIELDS = (
    "role",
    "content",
    "tool_calls",
    "reasoning",
    "reasoning_content",
    "tool_call_id",
    "name",
    "task",
)
"""The message fields vLLM 0.33.0's ``parse_chat_message_content`` hands on, in its order."""

TRANSFORMERS_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
"""transformers' ``_REASONING_FIELDS``: where reasoning is looked for, first not ``None`` wins."""

TransformersRule = Literal["alias_reasoning", "drop_none_fields"]
TRANSFORMERS_RULES: tuple[tuple[tuple[int, int, int], TransformersRule], ...] = (
    ((5, 21, 0), "alias_reasoning"),  # chat_template_utils._alias_reasoning_fields
    ((5, 24, 0), "drop_none_fields"),  # chat_template_utils._normalize_chat_messages
)
"""Message rules of ``apply_chat_template`` and the first transformers release with each."""


@dataclass(frozen=True, slots=True)
class RenderTarget:
    """A named target: ``library`` and ``version`` say whose behaviour; ``rules`` are the
    version-keyed transformers rules that apply (empty for vLLM, whose pin predates them)."""

    name: str
    library: Literal["vllm", "transformers"]
    version: tuple[int, ...]
    rules: frozenset[TransformersRule] = frozenset()

    @property
    def family_conventions(self) -> bool:
        """Whether the family's own facts (reasoning field, tool-call argument form, joined
        text parts) apply: they describe what a serving frontend hands the template."""
        return self.library == "vllm"


VLLM_0_33 = RenderTarget("vllm-0.33", "vllm", (0, 33, 0))
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def transformers_target(version: str) -> RenderTarget:
    """The ``transformers`` target for release ``version`` (``"5.24.0"``, ``"5.20"``)."""
    match = _VERSION.match(version)
    if match is None:
        raise RequestError(f"not a transformers version: {version!r}", location="target")
    numbers = tuple(int(part or 0) for part in match.groups())
    rules = frozenset(rule for first, rule in TRANSFORMERS_RULES if numbers >= first)
    return RenderTarget(f"transformers-{'.'.join(map(str, numbers))}", "transformers", numbers, rules)


def resolve_target(target: str | RenderTarget | None) -> RenderTarget:
    """The target named by ``target`` (``None``: ``DEFAULT_TARGET``); anything else is a
    ``RequestError`` at ``target`` naming the choices."""
    if isinstance(target, RenderTarget):
        return target
    name = DEFAULT_TARGET if target is None else target
    if name == VLLM_0_33.name:
        return VLLM_0_33
    if name == "transformers":
        try:
            return transformers_target(metadata.version("transformers"))
        except metadata.PackageNotFoundError:
            raise RequestError(
                "transformers is not installed; name its version instead, e.g. 'transformers-5.24'",
                location="target",
            ) from None
    if isinstance(name, str) and name.startswith("transformers-") and _VERSION.fullmatch(name[13:]):
        return transformers_target(name[13:])
    raise RequestError(
        f"unknown render target {name!r} (expected one of {', '.join(map(repr, TARGET_NAMES))} "
        "or 'transformers-X.Y')",
        location="target",
    )


# -- messages -----------------------------------------------------------------------------------
def vllm_message(
    data: Mapping[str, Any], reasoning_field: str, content_format: ContentFormat = "string"
) -> dict[str, Any]:
    """vLLM's message built from boundary's normalized one (``protocol.to_template_messages``,
    which already gives reasoning under both names, ``""`` for ``None`` content, no empty
    ``tool_calls``, arguments in the family's form): its fields, in its order, and its
    content for a template of ``content_format`` (``vllm_content``)."""
    out = {key: data[key] for key in VLLM_MESSAGE_FIELDS if key in data}
    if "content" in out:
        out["content"] = vllm_content(out["content"], content_format, data.get("role"))
    for key in ("reasoning", "reasoning_content"):
        if out.get(key) is None:
            out.pop(key, None)
    for key in ("name", "task"):
        if not isinstance(out.get(key), str):
            out.pop(key, None)
    if data.get("role") == "assistant":
        out.pop("tool_call_id", None)
        if "tool_calls" in out:
            out["tool_calls"] = [_vllm_call(call) for call in out["tool_calls"]]
        if reasoning_field not in out and data.get(reasoning_field) is not None:
            out[reasoning_field] = data[reasoning_field]  # the family's fact, on top of vLLM's names
    else:
        for key in ("tool_calls", "reasoning", "reasoning_content"):
            out.pop(key, None)
    if data.get("role") != "tool":
        out.pop("tool_call_id", None)
    if data.get("role") == "developer":
        out["tools"] = copy.deepcopy(data.get("tools"))
    return out


_TEXT_PARTS = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "thinking": "thinking",
}


def vllm_content(content: Any, content_format: ContentFormat, role: Any) -> Any:
    """A list of text parts as vLLM hands it on: for a ``"string"`` template the non-empty
    texts joined with newlines; for an ``"openai"`` one the parts kept, a tool message's
    all-``text`` parts joined (empty ones too). Anything else, and any list holding a media
    part (which vLLM loads and replaces by a placeholder), is passed on as it is."""
    if not isinstance(content, list):
        return content
    if not all(isinstance(p, Mapping) and p.get("type") in _TEXT_PARTS and "uuid" not in p for p in content):
        return content
    if content_format == "string":
        texts = [p.get(_TEXT_PARTS[p["type"]]) for p in content]
        return "\n".join(t for t in texts if t)
    if role == "tool" and all(p["type"] == "text" for p in content):
        return "\n".join(p.get("text", "") for p in content)
    return content


def _vllm_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call as vLLM's request model gives it: ``id``, ``function`` (``arguments``,
    ``name``, then other keys), ``type``, then other keys."""
    fn = call["function"]
    function = {"arguments": fn["arguments"], "name": fn["name"]}
    function.update((k, v) for k, v in fn.items() if k not in function)
    out: dict[str, Any] = {"id": call["id"]} if call.get("id") is not None else {}
    out.update(function=function, type=call.get("type", "function"))
    out.update((k, v) for k, v in call.items() if k not in ("id", "function", "type"))
    return out


def transformers_message(raw: Mapping[str, Any], target: RenderTarget) -> dict[str, Any]:
    """The message as ``target``'s ``apply_chat_template`` hands it to the template: a copy of
    what the client sent, with the version's rules applied."""
    message = copy.deepcopy(dict(raw))
    if "drop_none_fields" in target.rules:
        message = {key: value for key, value in message.items() if value is not None}
    if "alias_reasoning" in target.rules:
        found = (message[k] for k in TRANSFORMERS_REASONING_FIELDS if message.get(k) is not None)
        reasoning = next(found, None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


# -- tools --------------------------------------------------------------------------------------
def template_tools(
    target: RenderTarget, parsed: Sequence[Tool] | None, sent: Sequence[Any] | None
) -> list[dict[str, Any]] | None:
    """The tools the template receives: for vLLM its ``model_dump()`` of each validated tool
    (``parsed``), for transformers a copy of what the client sent (``sent``, as read)."""
    if parsed is None or sent is None:
        return None
    if target.library == "transformers":
        return [copy.deepcopy(dict(tool)) for tool in sent]
    return [_vllm_tool(tool) for tool in parsed]


def _vllm_tool(tool: Tool) -> dict[str, Any]:
    """``ChatCompletionToolsParam.model_dump()``: the tool-level ``defer_loading`` also fills
    the function's when that is unset; ``strict`` / ``defer_loading`` only when set."""
    fn = tool.function
    function: dict[str, Any] = {
        "name": fn.name,
        "description": fn.description,
        "parameters": copy.deepcopy(fn.parameters),
    }
    if fn.strict is not None:
        function["strict"] = fn.strict
    tool_defer = (tool.model_extra or {}).get("defer_loading")
    defer = (fn.model_extra or {}).get("defer_loading")
    if defer is None:
        defer = tool_defer
    if defer is not None:
        function["defer_loading"] = defer
    out: dict[str, Any] = {"type": "function", "function": function}
    if tool_defer is not None:
        out["defer_loading"] = tool_defer
    return out


__all__ = [
    "DEFAULT_TARGET",
    "TARGET_NAMES",
    "TRANSFORMERS_REASONING_FIELDS",
    "TRANSFORMERS_RULES",
    "VLLM_0_33",
    "VLLM_MESSAGE_FIELDS",
    "RenderTarget",
    "resolve_target",
    "template_tools",
    "transformers_message",
    "transformers_target",
    "vllm_message",
]
