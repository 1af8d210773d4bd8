"""The typed models of an OpenAI-style chat request: messages, content parts, tool calls, tools.

Where it sits: the request stage, under ``boundary.request.validation``, which validates raw
input into these models and turns them into template dicts; it imports only ``limits``
(tool-call arguments are held to the request limits as they are validated).

Leniency lives here: every model keeps fields beyond the chat schema (``extra="allow"``)
and content parts of any ``type``; ``PART_FIELDS`` is what ``strict=True`` holds them to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, field_validator

from boundary.request.limits import find_problem

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
            problem = find_problem(parsed, "")
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


__all__ = [
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
]
