"""Typed OpenAI-style chat requests, validated one message at a time.

Validation, normalization and rendering are separate stages: ``parse_messages`` /
``parse_tools`` turn untrusted input into models (or raise ``RequestError`` naming the
message index and field), and ``to_template_messages`` / ``to_template_tools`` turn models
into the plain dicts a chat template reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from boundary.errors import RequestError

ROLES = ("system", "developer", "user", "assistant", "tool")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextPart(_Model):
    """A text content part; the only part type a text chat template renders."""

    type: Literal["text"]
    text: str


def _content_shape(value: Any) -> Any:
    if value is not None and not isinstance(value, (str, list)):
        raise ValueError(f"expected a string or a list of text parts, got {type(value).__name__}")
    return value


Content = Annotated[str | list[TextPart], BeforeValidator(_content_shape)]


class FunctionCall(_Model):
    """``arguments`` is a JSON object, either as text (as the model wrote it) or already parsed."""

    name: str = Field(min_length=1)
    arguments: str | dict[str, Any]

    @field_validator("arguments")
    @classmethod
    def _arguments_are_a_json_object(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc.msg} at char {exc.pos})") from None
            if not isinstance(parsed, dict):
                raise ValueError(f"expected a JSON object, got {type(parsed).__name__}")
        return value

    def parsed_arguments(self) -> dict[str, Any]:
        if isinstance(self.arguments, dict):
            return dict(self.arguments)
        return json.loads(self.arguments)

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class ToolCall(_Model):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Model):
    role: Literal["system"]
    content: Content
    name: str | None = None


class DeveloperMessage(_Model):
    role: Literal["developer"]
    content: Content
    name: str | None = None


class UserMessage(_Model):
    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(_Model):
    role: Literal["assistant"]
    content: Content | None = None
    reasoning_content: str | None = Field(
        default=None, validation_alias=AliasChoices("reasoning_content", "reasoning")
    )
    tool_calls: list[ToolCall] | None = None
    name: str | None = None


class ToolMessage(_Model):
    role: Literal["tool"]
    content: Content
    tool_call_id: str = Field(min_length=1)
    name: str | None = None


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


class FunctionDefinition(_Model):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Model):
    type: Literal["function"] = "function"
    function: FunctionDefinition


_MESSAGE = TypeAdapter(Message)
_TOOL = TypeAdapter(Tool)


def _location(prefix: str, loc: Sequence[int | str]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


_BRANCH = re.compile(r"^(str|int|float|bool|none|[A-Z]\w*|\w+\[.*\])$")


def _first_error(prefix: str, exc: ValidationError, *, skip_tag: bool) -> RequestError:
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
    if err["type"] in ("string_type", "model_type", "dict_type", "list_type", "bool_type", "int_type"):
        message = f"{message}, got {type(err['input']).__name__}"
    return RequestError(message, location=_location(prefix, loc))


def parse_messages(
    messages: Sequence[Mapping[str, Any] | BaseModel],
    *,
    first_index: int = 0,
    call_ids: set[str] | None = None,
) -> list[Message]:
    """Validate a conversation. Raises ``RequestError`` at the first bad message.

    Beyond per-message shape: the conversation is non-empty and every tool message answers a
    tool call made by an earlier assistant message. To validate only the tail of a
    conversation whose head was validated before, pass the tail, the index of its first
    message and the tool-call ids the head made (``call_ids`` is updated in place).
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
        try:
            message = _MESSAGE.validate_python(dict(raw))
        except ValidationError as exc:
            raise _first_error(prefix, exc, skip_tag=True) from None
        if isinstance(message, AssistantMessage):
            call_ids.update(c.id for c in message.tool_calls or () if c.id)
        elif isinstance(message, ToolMessage) and message.tool_call_id not in call_ids:
            raise RequestError(
                f"{message.tool_call_id!r} does not answer any earlier tool call",
                location=f"{prefix}.tool_call_id",
            )
        parsed.append(message)
    return parsed


def parse_tools(tools: Sequence[Mapping[str, Any] | BaseModel] | None) -> list[Tool] | None:
    """Validate function tools; ``None`` and ``[]`` both mean no tools."""
    if tools is None:
        return None
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise RequestError(f"expected a list of tools, got {type(tools).__name__}", location="tools")
    parsed = []
    for i, raw in enumerate(tools):
        if isinstance(raw, BaseModel):
            raw = raw.model_dump(exclude_unset=True)
        try:
            parsed.append(_TOOL.validate_python(raw))
        except ValidationError as exc:
            raise _first_error(f"tools[{i}]", exc, skip_tag=False) from None
    return parsed


ArgumentsForm = Literal["object", "string"]


def to_template_messages(
    messages: Sequence[Message],
    *,
    reasoning_field: str = "reasoning_content",
    arguments: ArgumentsForm = "object",
) -> list[dict[str, Any]]:
    """Plain dicts for a chat template, keeping only the fields the caller set.

    A ``None`` content becomes ``""`` (as serving frontends pass it; several templates
    concatenate or search content without a None check). Tool-call arguments become a dict
    (``"object"``, what serving frontends pass) or the JSON text (``"string"``, echoing the
    model's own serialisation where a template accepts it). The reasoning field is renamed to
    what the family's template reads.
    """
    out = []
    for message in messages:
        data = message.model_dump(exclude_unset=True, by_alias=False)
        if data.get("content", "") is None:
            data["content"] = ""
        if isinstance(message, AssistantMessage):
            if "reasoning_content" in data and reasoning_field != "reasoning_content":
                data[reasoning_field] = data.pop("reasoning_content")
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
        out.append(data)
    return out


def call_ids_of(template_messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """The tool-call ids made by the assistant messages among ``template_messages``."""
    return {c["id"] for m in template_messages for c in m.get("tool_calls") or () if c.get("id")}


def to_template_tools(tools: Sequence[Tool] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    return [tool.model_dump(exclude_none=True) for tool in tools]


__all__ = [
    "AssistantMessage",
    "Content",
    "DeveloperMessage",
    "FunctionCall",
    "FunctionDefinition",
    "Message",
    "SystemMessage",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "call_ids_of",
    "parse_messages",
    "parse_tools",
    "to_template_messages",
    "to_template_tools",
]
