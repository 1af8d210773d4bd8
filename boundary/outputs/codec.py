"""A family's output format, and writing a turn the way the model emits it.

Where it sits: in outputs, after render and boundaries. ``format_output`` writes an assistant
message the way the model itself emits it after a prompt (its own reasoning framing,
tool-call syntax and stop token; tool-call arguments as written), so that any difference in
how the template later re-renders the turn shows up; the other direction is
``boundary.outputs.reading``. Which format applies is data: the family's
``tool_call_format``, ``reasoning_tags``, ``stop_tokens`` and ``output`` fields
(``templates/<family>/family.toml``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic import BaseModel, TypeAdapter, ValidationError

import boundary.outputs.harmony as harmony
from boundary.errors import RequestError, TemplateLoadError
from boundary.offsets import BoundaryStatus
from boundary.outputs.formats.base import CallContext, ToolCallSyntax
from boundary.outputs.formats.json_calls import (
    DeepSeekV3,
    HermesJson,
    KimiSections,
    MinimaxM1Json,
    MistralCalls,
    NemotronToolcall,
)
from boundary.outputs.formats.pythonic_calls import Lfm2Pythonic
from boundary.outputs.formats.xml_calls import MinimaxXml, Qwen3CoderXml
from boundary.outputs.model import (
    GeneratedOutput,
    WrittenCall,
)
from boundary.outputs.reasoning import ThinkTags
from boundary.renderer import HoldsRenderer, Renderer, renderer_of
from boundary.request.models import AssistantMessage
from boundary.request.validation import first_error
from boundary.shipped.spec import FamilySpec
from boundary.tokenize.rendering import Rendering

HARMONY = "harmony"
Backend = Literal["boundary", "vllm"]  # who reads generated turns: boundary's readers or vLLM's parsers
SYNTAXES: dict[str, ToolCallSyntax] = {
    s.name: s
    for s in (
        HermesJson(),
        NemotronToolcall(),
        KimiSections(),
        DeepSeekV3(),
        DeepSeekV3(name="deepseek_v3_1", between="", fenced=False),
        MistralCalls(),
        Qwen3CoderXml(),
        MinimaxXml(),
        MinimaxM1Json(),
        Lfm2Pythonic(),
    )
}


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """Everything needed to write or read one family variant's generated turns."""

    think: ThinkTags | None
    syntax: ToolCallSyntax | None
    harmony: bool
    stop_token: str
    stop_tokens: tuple[str, ...]
    before_stop: str
    before_tool_calls: str
    between_tool_calls: str
    after_tool_calls: str
    header_marker: str | None = None  # opens a message header (harmony's channel marker)
    reasoning_header: str | None = None  # opens an earlier turn's reasoning in history


_FORMATS: dict[tuple[int, str | None], tuple[FamilySpec, OutputFormat]] = {}


def _format(spec: FamilySpec, variant: str | None) -> OutputFormat:
    key = (id(spec), variant)
    if key not in _FORMATS:
        _FORMATS[key] = (spec, _build_format(spec, variant))  # the spec is kept, so its id stays unique
    return _FORMATS[key][1]


def _build_format(spec: FamilySpec, variant: str | None) -> OutputFormat:
    chosen = next((v for v in spec.variants if v.name == variant), None)
    out = (chosen.output if chosen and chosen.output else None) or spec.output
    name = (chosen.tool_call_format if chosen else None) or spec.tool_call_format
    if name is not None and name != HARMONY and name not in SYNTAXES:
        raise TemplateLoadError(
            f"unknown tool_call_format {name!r} (known: {', '.join(sorted([*SYNTAXES, HARMONY]))})",
            location=f"{spec.name}.tool_call_format",
        )
    stop_tokens = tuple(spec.stop_tokens) or tuple(t for t in (spec.special_tokens.get("eos_token"),) if t)
    stop = out.stop_token or (stop_tokens[0] if stop_tokens else "")
    syntax = SYNTAXES.get(name) if name else None
    think = (
        ThinkTags.of(spec.reasoning_tags, out.reasoning_open, out.reasoning_close)
        if spec.reasoning_tags
        else None
    )
    return OutputFormat(
        think=think,
        syntax=syntax,
        harmony=name == HARMONY,
        stop_token=stop,
        stop_tokens=tuple(sorted({*stop_tokens, stop} - {""}, key=len, reverse=True)),
        before_stop=out.before_stop,
        before_tool_calls=out.before_tool_calls
        if out.before_tool_calls is not None
        else getattr(syntax, "before", ""),
        between_tool_calls=(
            out.between_tool_calls if out.between_tool_calls is not None else getattr(syntax, "between", "")
        ),
        after_tool_calls=out.after_tool_calls
        if out.after_tool_calls is not None
        else getattr(syntax, "after", ""),
        header_marker=out.header_marker,
        reasoning_header=out.reasoning_header,
    )


def output_format(family: Renderer | HoldsRenderer | FamilySpec, variant: str | None = None) -> OutputFormat:
    """The output format of a family's ``variant`` (default: the family's default variant)."""
    spec = cast("FamilySpec", getattr(family, "spec", family))
    return _format(spec, variant or getattr(family, "default_variant", None) or spec.default_variant)


def generation_suffix(prompt: Rendering) -> str:
    """The generation-only text at the end of the prompt (what the model's turn starts with).

    From U_end when the rendering has it; otherwise the text after the last turn-ending
    control token is the best available guess of where the turn header starts.
    """
    if prompt.input_end.status is BoundaryStatus.FOUND and prompt.input_end.char is not None:
        return prompt.text[prompt.input_end.char :]
    return prompt.text[-64:]


# -- writing --------------------------------------------------------------------------------

_ASSISTANT = TypeAdapter(AssistantMessage)


def _assistant(message: Mapping[str, Any] | BaseModel) -> AssistantMessage:
    if isinstance(message, AssistantMessage):
        return message
    raw = message.model_dump(exclude_unset=True) if isinstance(message, BaseModel) else message
    if not isinstance(raw, Mapping):
        raise RequestError(
            f"expected an assistant message object, got {type(raw).__name__}", location="message"
        )
    if raw.get("role") != "assistant":
        raise RequestError(f"expected role 'assistant', got {raw.get('role')!r}", location="message.role")
    try:
        return _ASSISTANT.validate_python(dict(raw))
    except ValidationError as exc:
        raise first_error("message", exc, skip_tag=False) from None


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content)


def format_output(
    family: Renderer | HoldsRenderer,
    prompt: Rendering,
    message: Mapping[str, Any] | BaseModel,
    *,
    variant: str | None = None,
) -> GeneratedOutput:
    """What the model emitted after ``prompt`` to produce assistant ``message``.

    Reasoning is written only when the family has a reasoning format and the generation
    prompt has not closed the think block; tool-call arguments are written as given (the JSON
    text the model wrote, which is what the client received). Raises ``RequestError`` for a
    message the format cannot express (tool calls in a family without a tool-call format).
    """
    family = renderer_of(family)
    msg = _assistant(message)
    fmt = output_format(family, variant)
    content = _text(msg.content)
    calls = [WrittenCall(c.function.name, c.function.arguments_text(), c.id) for c in msg.tool_calls or ()]
    if calls and fmt.syntax is None and not fmt.harmony:
        raise RequestError(
            f"{family.spec.display_name} has no tool-call format", location="message.tool_calls"
        )
    if fmt.harmony:
        written = harmony.write(
            msg.reasoning_content, content, calls, prefilled=prompt.text.endswith(harmony.START)
        )
        body, stop = written.body, written.stop_token
    else:
        body = ""
        if fmt.think is not None:
            state, prefilled = fmt.think.prefill(generation_suffix(prompt))
            body = fmt.think.write(msg.reasoning_content, state, prefilled)
        body += content
        if calls:
            assert fmt.syntax is not None
            context = CallContext(prompt_text=prompt.text)
            body += (fmt.before_tool_calls if content else "") + fmt.syntax.write(
                calls, fmt.between_tool_calls, context
            )
            body += fmt.after_tool_calls
        else:
            body += fmt.before_stop
        stop = fmt.stop_token
    tok = family.tokenizer
    stop_id = tok.token_to_id(stop) if stop else None
    ids = tok.encode_ids(body) + ([stop_id] if stop_id is not None else tok.encode_ids(stop))
    return GeneratedOutput(body + stop, ids, stop or None, stop_id)
