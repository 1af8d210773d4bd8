"""Typed OpenAI-style chat requests, validated one message at a time.

Where it sits: the first stage, request: what the render stage takes; it imports only
``errors``.

Validation, normalization and rendering are separate stages: ``parse_messages`` /
``parse_tools`` turn untrusted input into models (or raise ``RequestError`` naming the
message index and field), and ``to_template_messages`` / ``to_template_tools`` turn models
into the plain dicts a chat template reads.

Leniency: the fields clients send beyond the chat schema (what the OpenAI SDK echoes back:
``refusal``, ``annotations``, ``audio``, ``function_call``, ...; other frontends' fields such
as ``thinking``) and content parts of any ``type`` (``image_url``, ``input_audio``,
``file``, ...) are accepted and reach the template exactly as transformers passes them,
``None`` values included. ``strict=True`` refuses anything outside the OpenAI schema.
Typed errors remain for genuinely bad input: wrong types, tool-call arguments that are not
a JSON object, values nested deeper than ``MAX_NESTING`` levels, lone surrogates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from boundary.errors import RequestError

ROLES = ("system", "developer", "user", "assistant", "tool")

MAX_NESTING = 64
"""The deepest nesting (objects and arrays inside each other) a field value may have."""

# Content part types of the OpenAI chat schema and the fields each carries (``strict=True``).
PART_FIELDS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text"}),
    "image_url": frozenset({"type", "image_url"}),
    "input_audio": frozenset({"type", "input_audio"}),
    "file": frozenset({"type", "file"}),
    "refusal": frozenset({"type", "refusal"}),
}

REASONING_FIELDS = ("reasoning", "reasoning_content")
"""Where clients send an assistant turn's reasoning (vLLM reads both)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class TextPart(_Model):
    """A text content part; the only part type a text chat template renders as text."""

    type: Literal["text"]
    text: str


class ContentPart(_Model):
    """Any other content part (``image_url``, ``input_audio``, ``file``, ...), passed through."""

    type: str


def _part_kind(value: Any) -> str | None:
    if isinstance(value, Mapping):
        return "TextPart" if value.get("type") == "text" else "ContentPart"
    if isinstance(value, BaseModel):
        return "TextPart" if getattr(value, "type", None) == "text" else "ContentPart"
    return None


Part = Annotated[
    Annotated[TextPart, Tag("TextPart")] | Annotated[ContentPart, Tag("ContentPart")],
    Discriminator(_part_kind, custom_error_type="part_type", custom_error_message="expected an object"),
]


def _content_shape(value: Any) -> Any:
    if value is not None and not isinstance(value, (str, list)):
        raise ValueError(f"expected a string or a list of content parts, got {type(value).__name__}")
    return value


Content = Annotated[str | list[Part], BeforeValidator(_content_shape)]


class FunctionCall(_Model):
    """``arguments`` is a JSON object, either as text (as the model wrote it) or already
    parsed; ``""`` means no arguments (as vLLM reads it)."""

    name: str = Field(min_length=1)
    arguments: str | dict[str, Any]

    @field_validator("arguments")
    @classmethod
    def _arguments_are_a_json_object(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str) and value:
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc.msg} at char {exc.pos})") from None
            if not isinstance(parsed, dict):
                raise ValueError(f"expected a JSON object, got {type(parsed).__name__}")
            problem = _find_problem(parsed, "")
            if problem is not None:  # a JSON escape such as "\ud800" decodes to a lone surrogate
                raise ValueError(problem[1])
        return value

    def parsed_arguments(self) -> dict[str, Any]:
        if isinstance(self.arguments, dict):
            return dict(self.arguments)
        return json.loads(self.arguments) if self.arguments else {}

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class ToolCall(_Model):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class _Message(_Model):
    name: str | None = None


class SystemMessage(_Message):
    role: Literal["system"]
    content: Content


class DeveloperMessage(_Message):
    role: Literal["developer"]
    content: Content


class UserMessage(_Message):
    role: Literal["user"]
    content: Content


class AssistantMessage(_Message):
    """Besides the chat schema: the reasoning fields frontends use, and what the OpenAI SDK
    echoes back from a completion (``refusal``, ``annotations``, ``audio``, ``function_call``)."""

    role: Literal["assistant"]
    content: Content | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    thinking: str | None = None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: dict[str, Any] | None = None
    function_call: dict[str, Any] | None = None


class ToolMessage(_Message):
    role: Literal["tool"]
    content: Content
    tool_call_id: str = Field(min_length=1)


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


# -- request limits ---------------------------------------------------------------------------
_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _lone_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None  # isascii() is O(1)


def _surrogate_problem(text: str) -> str:
    found = _SURROGATE.search(text)
    where = f" (U+{ord(found.group()):04X} at char {found.start()})" if found else ""
    return f"contains a lone surrogate{where}; text must be valid Unicode"


_CONTAINERS = (dict, list, tuple, Mapping)

Path = str | tuple[Any, Any, bool]
"""A location, written out only when a problem is found: a field name, or (parent path, key,
whether the parent is a mapping) for ``parent.key`` / ``parent[key]``."""


def _path(where: Path) -> str:
    parts: list[str] = []
    while isinstance(where, tuple):
        where, key, is_map = where
        parts.append(f".{key}" if is_map else f"[{key}]")
    return where + "".join(reversed(parts))


def _find_problem(value: Any, location: Path, *, limit: int = MAX_NESTING) -> tuple[str, str] | None:
    """The first (location, message) in ``value``: nesting deeper than ``limit`` containers
    (located at ``location``, the field) or a lone surrogate in a string or key (located at
    its own path). Iterative, so no input can exhaust the stack."""
    if isinstance(value, str):
        return (_path(location), _surrogate_problem(value)) if _lone_surrogate(value) else None
    if not isinstance(value, _CONTAINERS):
        return None
    stack: list[tuple[Any, Path, int]] = [(value, location, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth >= limit:
            return _path(location), f"nested deeper than {limit} levels"
        is_map = isinstance(item, (dict, Mapping))
        for key, child in item.items() if is_map else enumerate(item):
            if is_map and isinstance(key, str) and not key.isascii() and _lone_surrogate(key):
                return _path(where), f"a key {_surrogate_problem(key)}"
            if isinstance(child, str):
                if not child.isascii() and _lone_surrogate(child):
                    return _path((where, key, is_map)), _surrogate_problem(child)
            elif isinstance(child, _CONTAINERS):
                stack.append((child, (where, key, is_map), depth + 1))
    return None


def json_text_nesting(text: str) -> int:
    """How deep objects and arrays nest in the JSON ``text`` (0 for a scalar); linear time,
    no parsing, so it is safe to ask before ``json.loads``."""
    if text.count("{") + text.count("[") == 0:
        return 0
    depth = deepest = 0
    for bracket in _BRACKET.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def check_value(value: Any, location: Path, *, limit: int = MAX_NESTING) -> None:
    """Raise ``RequestError`` if ``value`` nests deeper than ``limit`` levels or holds a lone
    surrogate; ``location`` names the field."""
    problem = _find_problem(value, location, limit=limit)
    if problem is not None:
        raise RequestError(problem[1], location=problem[0])


def _check_key(key: Any, location: Path) -> None:
    if isinstance(key, str) and not key.isascii() and _lone_surrogate(key):
        raise RequestError(f"a key {_surrogate_problem(key)}", location=_path(location))


def _check_object(obj: Any, location: Path, nested: str | None = None) -> None:
    """Each field of ``obj`` within the limits; the fields of ``obj[nested]`` one by one,
    and a JSON-text ``arguments`` by its text's nesting."""
    if not isinstance(obj, (dict, Mapping)):
        check_value(obj, location)
        return
    for key, value in obj.items():
        if not (type(key) is str and key.isascii()):  # the common key, checked inline
            _check_key(key, location)
        if key == nested and isinstance(value, (dict, Mapping)):
            _check_object(value, (location, key, True))
        elif key == "arguments" and isinstance(value, str):
            check_value(value, (location, key, True))
            if value.count("{") + value.count("[") > MAX_NESTING and json_text_nesting(value) > MAX_NESTING:
                raise RequestError(
                    f"nested deeper than {MAX_NESTING} levels", location=_path((location, key, True))
                )
        elif not isinstance(value, (int, float, bool, type(None))):
            check_value(value, (location, key, True))


def check_message_limits(raw: Mapping[str, Any], location: str) -> None:
    """The request limits on one raw message: every field nests at most ``MAX_NESTING``
    levels (each content part, tool call field and tool-call ``arguments`` counted on its
    own) and no string or key holds a lone surrogate."""
    for key, value in raw.items():
        if not (type(key) is str and key.isascii()):  # the common key, checked inline
            _check_key(key, location)
        if isinstance(value, str):
            if not value.isascii() and _lone_surrogate(value):
                raise RequestError(_surrogate_problem(value), location=f"{location}.{key}")
        elif key == "tool_calls" and isinstance(value, list):
            for j, call in enumerate(value):
                _check_object(call, ((location, key, True), j, False), nested="function")
        elif key == "content" and isinstance(value, list):
            for j, part in enumerate(value):
                check_value(part, ((location, key, True), j, False))
        elif value is not None:
            check_value(value, (location, key, True))


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
        _check_object(raw, f"tools[{i}]", nested="function")
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


def to_template_tools(tools: Sequence[Tool] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    return [tool.model_dump(exclude_none=True) for tool in tools]


__all__ = [
    "MAX_NESTING",
    "PART_FIELDS",
    "REASONING_FIELDS",
    "AssistantMessage",
    "Content",
    "ContentPart",
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
    "check_message_limits",
    "check_value",
    "json_text_nesting",
    "parse_messages",
    "parse_tools",
    "to_template_messages",
    "to_template_tools",
]
