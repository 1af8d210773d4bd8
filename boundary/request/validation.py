"""Typed OpenAI-style chat requests, validated one message at a time.

Where it sits: the first stage, request: what the render stage takes; it imports only
``errors`` and its siblings ``models`` (the typed models) and ``limits`` (nesting and
surrogate checks on raw input).

Validation, normalization and rendering are separate stages: ``parse_messages`` /
``parse_tools`` turn untrusted input into models (or raise ``RequestError`` naming the
message index and field), and ``to_template_messages`` turns models into the plain dicts a chat
template reads (``boundary.render.target`` decides how tools reach it).

Leniency: the fields clients send beyond the chat schema (what the OpenAI SDK echoes back:
``refusal``, ``annotations``, ``audio``, ``function_call``, ...; other frontends' fields such
as ``thinking``) and content parts of any ``type`` (``image_url``, ``input_audio``,
``file``, ...) are accepted and reach the template exactly as transformers passes them,
``None`` values included. ``strict=True`` refuses anything outside the OpenAI schema.
Typed errors remain for genuinely bad input: wrong types, tool-call arguments that are not
a JSON object, values nested deeper than ``MAX_NESTING`` levels, lone surrogates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter, ValidationError

from boundary.errors import RequestError
from boundary.request.limits import (
    check_message_limits,
    check_object,
)
from boundary.request.models import (
    PART_FIELDS,
    REASONING_FIELDS,
    AssistantMessage,
    ContentPart,
    Message,
    TextPart,
    Tool,
    ToolMessage,
)

ROLES = ("system", "developer", "user", "assistant", "tool")

_MESSAGE = TypeAdapter(Message)
_TOOL = TypeAdapter(Tool)


# -- validation -------------------------------------------------------------------------------
def _location(prefix: str, loc: Sequence[int | str]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


_BRANCH = re.compile(r"^(str|int|float|bool|none|[A-Z]\w*|\w+\[.*\])$")


def first_error(prefix: str, exc: ValidationError, *, skip_tag: bool) -> RequestError:
    """The most specific error, located as the user wrote the request (union branch labels
    such as ``str`` or ``list[TextPart]`` dropped)."""
    errors = exc.errors(include_url=False)
    err = max(errors, key=lambda e: len(e["loc"]))
    loc = [part for part in err["loc"] if not (isinstance(part, str) and _BRANCH.match(part))]
    if skip_tag and loc and loc[0] in ROLES:
        loc = loc[1:]  # a discriminated union puts the tag first; the path the user wrote has no tag
    message = err["msg"]
    if err["type"] == "union_tag_invalid":
        found = err.get("input", {}).get("role") if isinstance(err.get("input"), dict) else None
        loc, message = ["role"], f"unknown role {found!r} (expected one of {', '.join(ROLES)})"
    elif err["type"] == "union_tag_not_found":
        loc, message = ["role"], "missing"
    elif err["type"] == "extra_forbidden":
        message = "unexpected field"
    elif message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if err["type"] in (
        "string_type",
        "model_type",
        "dict_type",
        "list_type",
        "bool_type",
        "int_type",
        "part_type",
    ):
        message = f"{message}, got {type(err['input']).__name__}"
    return RequestError(message, location=_location(prefix, loc))


def _unexpected(model: BaseModel, location: str) -> RequestError | None:
    """``strict``: the first field or content part type outside the OpenAI chat schema."""
    if isinstance(model, (TextPart, ContentPart)):
        fields = PART_FIELDS.get(model.type)
        if fields is None:
            known = ", ".join(PART_FIELDS)
            return RequestError(
                f"unknown content part type {model.type!r} (expected one of {known})",
                location=f"{location}.type",
            )
        extra = [key for key in model.model_extra or () if key not in fields]
    else:
        extra = list(model.model_extra or ())
    if extra:
        return RequestError("unexpected field", location=f"{location}.{extra[0]}")
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            found = _unexpected(value, f"{location}.{name}")
        elif isinstance(value, list):
            found = next(
                (
                    err
                    for i, item in enumerate(value)
                    if isinstance(item, BaseModel) and (err := _unexpected(item, f"{location}.{name}[{i}]"))
                ),
                None,
            )
        else:
            found = None
        if found is not None:
            return found
    return None


def parse_messages(
    messages: Sequence[Mapping[str, Any] | BaseModel],
    *,
    first_index: int = 0,
    call_ids: set[str] | None = None,
    strict: bool = False,
) -> list[Message]:
    """Validate a conversation. Raises ``RequestError`` at the first bad message.

    Beyond per-message shape: the conversation is non-empty, every tool message answers a
    tool call made by an earlier assistant message, and the request limits hold
    (``check_message_limits``). Fields outside the chat schema pass unless ``strict``. To
    validate only the tail of a conversation whose head was validated before, pass the tail,
    the index of its first message and the tool-call ids the head made (``call_ids`` is
    updated in place).
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise RequestError(f"expected a list of messages, got {type(messages).__name__}", location="messages")
    if not messages and not first_index:
        raise RequestError("empty conversation", location="messages")
    parsed: list[Message] = []
    call_ids = set() if call_ids is None else call_ids
    for i, raw in enumerate(messages, start=first_index):
        prefix = f"messages[{i}]"
        if isinstance(raw, BaseModel):
            raw = raw.model_dump(exclude_unset=True)
        if not isinstance(raw, Mapping):
            raise RequestError(f"expected an object, got {type(raw).__name__}", location=prefix)
        check_message_limits(raw, prefix)
        try:
            message = _MESSAGE.validate_python(dict(raw))
        except ValidationError as exc:
            raise first_error(prefix, exc, skip_tag=True) from None
        if strict and (unexpected := _unexpected(message, prefix)) is not None:
            raise unexpected
        if isinstance(message, AssistantMessage):
            call_ids.update(c.id for c in message.tool_calls or () if c.id)
        elif isinstance(message, ToolMessage) and message.tool_call_id not in call_ids:
            raise RequestError(
                f"{message.tool_call_id!r} does not answer any earlier tool call",
                location=f"{prefix}.tool_call_id",
            )
        parsed.append(message)
    return parsed


PLAIN_ROLES = frozenset({"system", "user", "assistant"})
"""The roles of a plain message (``plain_message``)."""


def plain_message(raw: object) -> tuple[str, str] | None:
    """``(role, content)`` of a message validation cannot refuse once its limits hold, and
    whose template dict for a serving frontend (``vllm_message`` of ``to_template_messages``)
    is ``{"role": role, "content": content}``: an exact ``dict`` with exactly the keys
    ``role`` (one of ``PLAIN_ROLES``) and ``content``, both exact ``str``. None for any
    other message (it goes through the models)."""
    if type(raw) is not dict or len(raw) != 2:
        return None
    role, content = raw.get("role"), raw.get("content")
    if type(role) is not str or type(content) is not str or role not in PLAIN_ROLES:
        return None
    return role, content


def parse_messages_or_plain(
    messages: Sequence[Mapping[str, Any] | BaseModel],
    *,
    first_index: int = 0,
    call_ids: set[str] | None = None,
    strict: bool = False,
) -> list[Message | tuple[str, str]]:
    """``parse_messages`` with each plain message (``plain_message``) given as its
    ``(role, content)`` instead of a model: the same checks, errors and order (a plain
    message's request limits are checked where ``parse_messages`` checks them)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        return list(parse_messages(messages, first_index=first_index, call_ids=call_ids, strict=strict))
    call_ids = set() if call_ids is None else call_ids
    parsed: list[Message | tuple[str, str]] = []
    for i, raw in enumerate(messages, start=first_index):
        plain = plain_message(raw)
        if plain is None:
            parsed += parse_messages([raw], first_index=i, call_ids=call_ids, strict=strict)
        else:
            check_message_limits(raw, f"messages[{i}]")  # type: ignore[arg-type]  # a dict
            parsed.append(plain)
    return parsed


def parse_tools(
    tools: Sequence[Mapping[str, Any] | BaseModel] | None, *, strict: bool = False
) -> list[Tool] | None:
    """Validate function tools; ``None`` and ``[]`` both mean no tools. Each field of a tool
    (its ``parameters`` schema as a whole) nests at most ``MAX_NESTING`` levels."""
    if tools is None:
        return None
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise RequestError(f"expected a list of tools, got {type(tools).__name__}", location="tools")
    parsed = []
    for i, raw in enumerate(tools):
        if isinstance(raw, BaseModel):
            raw = raw.model_dump(exclude_unset=True)
        check_object(raw, f"tools[{i}]", nested="function")
        try:
            tool = _TOOL.validate_python(raw)
        except ValidationError as exc:
            raise first_error(f"tools[{i}]", exc, skip_tag=False) from None
        if strict and (unexpected := _unexpected(tool, f"tools[{i}]")) is not None:
            raise unexpected
        parsed.append(tool)
    return parsed


# -- normalization ----------------------------------------------------------------------------
ArgumentsForm = Literal["object", "string"]


def to_template_messages(
    messages: Sequence[Message],
    *,
    reasoning_field: str = "reasoning_content",
    arguments: ArgumentsForm = "object",
) -> list[dict[str, Any]]:
    """Plain dicts for a chat template: every field the caller set, under its own name and
    with its own value (``None`` included, unknown fields and content parts too), as
    transformers' ``apply_chat_template`` passes a message. Four serving-frontend
    conventions (vLLM's) apply on top:

    - a ``None`` content becomes ``""`` (several templates concatenate or search content
      without a None check);
    - ``tool_calls`` that is ``None`` or empty is left out (the plain assistant path);
    - tool-call arguments become a dict (``"object"``, what vLLM passes) or the JSON text
      (``"string"``, the model's own serialisation, for templates that print it as is);
    - reasoning sent as ``reasoning`` or ``reasoning_content`` is given under both names
      (``reasoning`` wins when both are set) and under ``reasoning_field``, the name the
      family's template reads, unless the caller set that field itself.
    """
    out = []
    for message in messages:
        data = message.model_dump(exclude_unset=True)
        if data.get("content", "") is None:
            data["content"] = ""
        if isinstance(message, AssistantMessage):
            reasoning = message.reasoning if message.reasoning is not None else message.reasoning_content
            if reasoning is not None:
                for field in REASONING_FIELDS:
                    data[field] = reasoning
                if data.get(reasoning_field) is None:
                    data[reasoning_field] = reasoning
            if message.tool_calls:
                calls = []
                for call, call_data in zip(message.tool_calls, data["tool_calls"], strict=True):
                    fn = dict(call_data["function"])
                    fn["arguments"] = (
                        call.function.parsed_arguments()
                        if arguments == "object"
                        else call.function.arguments_text()
                    )
                    calls.append({**call_data, "type": "function", "function": fn})
                data["tool_calls"] = calls
            else:
                data.pop("tool_calls", None)
        out.append(data)
    return out


def call_ids_of(template_messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """The tool-call ids made by the assistant messages among ``template_messages``."""
    return {c["id"] for m in template_messages for c in m.get("tool_calls") or () if c.get("id")}
