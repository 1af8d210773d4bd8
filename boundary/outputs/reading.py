"""Reading generated text or ids back into the assistant message a frontend appends.

Where it sits: in outputs, after render and boundaries — ``parse_output`` takes the prompt's
``Rendering`` and the generated ids; the round trip, the horizon and the audit read its
``ParsedOutput``. Which format applies is ``boundary.outputs.codec.output_format`` (data from
the family's spec); the message is the one the family's vLLM parser pair returns
(``engine_rules``, or vLLM itself through ``vllm_backend``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

import boundary.outputs.engine_rules as engine_rules
import boundary.outputs.harmony as harmony
from boundary.outputs.arguments import parameter_types
from boundary.outputs.codec import Backend, OutputFormat, generation_suffix, output_format
from boundary.outputs.formats.base import CallContext, ReadCall, ToolCallSyntax
from boundary.outputs.formats.json_calls import (
    KimiSections,
)
from boundary.outputs.model import (
    GeneratedOutput,
    OutputStatus,
    ParsedOutput,
    Region,
    RegionKind,
)
from boundary.outputs.reasoning import Prefill
from boundary.outputs.vllm_backend import engine_read, parser_names
from boundary.renderer import HoldsRenderer, Renderer, renderer_of
from boundary.request.models import Tool
from boundary.tokenize.rendering import Rendering


def parse_output(
    family: Renderer | HoldsRenderer,
    generated: str | Sequence[int] | GeneratedOutput,
    prompt: Rendering,
    *,
    tools: Sequence[Mapping[str, Any] | Tool] | None = None,
    variant: str | None = None,
    backend: Backend | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> ParsedOutput:
    """Read generated text (or committed token ids) back into an assistant message.

    Never raises on bad output: a truncated or malformed turn comes back with its status
    and ``problem``, and with whatever parts could be read. The message is the one the
    family's vLLM parser pair returns (``engine_rules``), for a request declaring ``tools``
    (they type arguments; ``[]``: a request without tools, whose calls the engine does not
    return; None: not known, calls are read untyped).
    ``backend`` (default: the family's ``output.parser_backend``) chooses the reader:
    boundary's own, or ``"vllm"``, vLLM's parsers themselves (``template_kwargs`` reach them
    as the request's ``chat_template_kwargs``). With ``"vllm"`` the message is exactly
    vLLM's; status, problem and regions stay boundary's reading of the text.
    """
    family = renderer_of(family)
    if isinstance(generated, GeneratedOutput):
        text, ids = generated.text, list(generated.token_ids)
    elif isinstance(generated, str):
        text, ids = generated, []
    else:
        ids = list(generated)
        text = family.tokenizer.decode(ids)
    tool_dicts = [t.model_dump() if isinstance(t, BaseModel) else dict(t) for t in tools or ()]
    ours = _parse_own(family, text, prompt, tool_dicts, variant)
    if (backend or _backend(family, variant)) == "vllm":
        return _with_engine_message(family, ours, ids, prompt, tool_dicts, variant, template_kwargs)
    declared = None if tools is None else tool_dicts
    return _with_engine_rules(family, ours, prompt, declared, variant, template_kwargs)


def _backend(family: Renderer, variant: str | None) -> Backend:
    spec = family.spec
    chosen = next((v for v in spec.variants if v.name == (variant or family.default_variant)), None)
    out = chosen.output if chosen is not None and chosen.output is not None else spec.output
    return out.parser_backend


def _with_engine_rules(
    family: Renderer,
    ours: ParsedOutput,
    prompt: Rendering,
    tools: list[dict[str, Any]] | None,
    variant: str | None,
    template_kwargs: Mapping[str, Any] | None,
) -> ParsedOutput:
    """``ours`` with the message vLLM's parser pair named by the family returns for its text
    (read by ``engine_rules``, without vLLM); unchanged for families that name none.
    ``template_kwargs`` None means not known: where the reasoning parser depends on them
    (DeepSeek-V3.1's ``thinking``), those that rendered the prompt are taken
    (``Rendering.template_kwargs``), and where the prompt did not record them the prompt's
    generation suffix tells."""
    tool, reasoning = parser_names(family, variant or family.default_variant)
    if output_format(family, variant).harmony or not engine_rules.supported(tool, reasoning):
        return ours
    body = ours.text[: len(ours.text) - len(ours.stop_token or "")]
    fmt = output_format(family, variant)
    if template_kwargs is None:
        template_kwargs = prompt.template_kwargs
    if template_kwargs is None and reasoning == "deepseek_v3" and fmt.think is not None:
        # not known: a prompt that opens <think> was rendered with thinking on
        opened = fmt.think.prefill(generation_suffix(prompt))[0] is Prefill.OPEN
        template_kwargs = {"thinking": True} if opened else None
    read = engine_rules.engine_message(
        tool,
        reasoning,
        body,
        prompt_text=prompt.text,
        tools=tools,
        template_kwargs=template_kwargs,
        special_tokens=tuple(family.tokenizer.special_tokens_map.values()),
    )
    calls = [
        (name, _as_written(ours, i, name, arguments), cid)
        for i, (name, arguments, cid) in enumerate(read.calls)
    ]
    return replace(ours, message=_engine_message_dict(read.reasoning, read.content, calls, ours.text))


def _as_written(ours: ParsedOutput, index: int, name: str, arguments: str) -> str:
    """The engine's arguments of call ``index``, as the model wrote them when boundary read the
    same call with the same JSON value (vLLM's hermes parser re-serializes them; a client
    sending arguments back as a string sends the model's text, ``ClientHabits``)."""
    if index >= len(ours.tool_calls) or ours.tool_calls[index]["function"]["name"] != name:
        return arguments
    written = ours.tool_calls[index]["function"]["arguments"]
    try:
        same = _canonical(written) == _canonical(arguments)  # 1, 1.0 and true stay apart
    except ValueError:
        return arguments
    return written if same else arguments


def _canonical(arguments: str) -> str:
    return json.dumps(json.loads(arguments), ensure_ascii=False)


def _engine_message_dict(
    reasoning: str | None,
    content: str | None,
    calls: Sequence[tuple[str, str, str | None]],
    text: str,
) -> dict[str, Any]:
    """The assistant message a client builds from the engine's reading of ``text``."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id or f"call_{digest}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for i, (name, arguments, call_id) in enumerate(calls)
        ]
    return message


def _with_engine_message(
    family: Renderer,
    ours: ParsedOutput,
    ids: list[int],
    prompt: Rendering,
    tools: list[dict[str, Any]],
    variant: str | None,
    template_kwargs: Mapping[str, Any] | None,
) -> ParsedOutput:
    fmt = output_format(family, variant)
    body = ours.text[: len(ours.text) - len(ours.stop_token or "")]
    stop_id = family.tokenizer.token_to_id(ours.stop_token) if ours.stop_token else None
    generated = ids[:-1] if ids and stop_id is not None and ids[-1] == stop_id else ids
    read = engine_read(
        family,
        body,
        generated_ids=generated,
        prompt_ids=prompt.token_ids,
        tools=tools,
        variant=variant or family.default_variant,
        template_kwargs=prompt.template_kwargs if template_kwargs is None else template_kwargs,
        history_tool_calls=prompt.text.count(KimiSections().call_open),
        harmony=fmt.harmony,
    )
    message = _engine_message_dict(read.reasoning, read.content, read.calls, ours.text)
    return replace(ours, message=message, backend="vllm")


def _parse_own(
    family: Renderer, text: str, prompt: Rendering, tools: list[dict[str, Any]], variant: str | None
) -> ParsedOutput:
    fmt = output_format(family, variant)
    types = parameter_types(tools)
    context = CallContext(prompt_text=prompt.text, parameter_types=types)
    if fmt.harmony:
        return _parse_harmony(text, prompt)
    stop = next((s for s in fmt.stop_tokens if text.endswith(s)), None)
    body = text[: len(text) - len(stop)] if stop else text
    regions: list[Region] = []
    reasoning: str | None = None
    start = 0
    problem: str | None = None
    unclosed = False
    prefill = ""
    if fmt.think is not None:
        state, prefill = fmt.think.prefill(generation_suffix(prompt))
        read = fmt.think.read(body, state, prefill)
        reasoning, start, problem = read.reasoning or None, read.content_start, read.problem
        unclosed = problem is not None
        if start:
            regions.append(Region(RegionKind.REASONING, 0, start))
    calls: list[ReadCall] = []
    calls_at = body.find(fmt.syntax.start, start) if fmt.syntax is not None and problem is None else -1
    if calls_at >= 0:
        block = _read_calls(fmt, body, start, calls_at, context)
        calls, problem, unclosed, content_end = block.calls, block.problem, block.unclosed, block.content_end
        regions += block.regions
    else:
        content_end = len(body)
        if fmt.before_stop and body.endswith(fmt.before_stop, start):
            content_end -= len(fmt.before_stop)
    if calls_at >= 0 and not calls and problem is not None and not unclosed and _as_text(fmt.syntax):
        content_end = len(body)  # a malformed block reads as text, as the engine's parser returns it
    content = body[start:content_end] if problem is None or calls_at >= 0 else body[start:]
    if content:
        regions.append(Region(RegionKind.CONTENT, start, start + len(content)))
    if stop:
        regions.append(Region(RegionKind.STOP, len(body), len(text)))
    message = _message(content, reasoning, calls, text)
    return ParsedOutput(
        _status(stop, problem, unclosed),
        message,
        text,
        stop,
        tuple(sorted(regions, key=_order)),
        _problem(stop, problem),
        prefill,
    )


@dataclass(frozen=True, slots=True)
class _CallBlock:
    """The tool-call block of a turn as read: its calls (shifted to the body), where the
    content before it ends, the call and argument regions, and what went wrong."""

    calls: list[ReadCall]
    content_end: int
    regions: list[Region]
    problem: str | None
    unclosed: bool


def _read_calls(fmt: OutputFormat, body: str, start: int, calls_at: int, context: CallContext) -> _CallBlock:
    assert fmt.syntax is not None
    content_end = calls_at
    if fmt.before_tool_calls and body.endswith(fmt.before_tool_calls, start, calls_at):
        content_end -= len(fmt.before_tool_calls)
    got = fmt.syntax.read(body[calls_at:], context)
    calls = [_shift(c, calls_at) for c in got.calls]
    problem = got.problem
    tail = body[calls_at + got.end :]
    if problem is None and tail.strip():
        problem = f"text after the tool calls: {tail.strip()[:40]!r}"
    regions = []
    for i, c in enumerate(calls):
        regions += [
            Region(RegionKind.TOOL_CALL, c.start, c.end, i),
            Region(RegionKind.ARGUMENTS, c.args_start, c.args_end, i),
        ]
    return _CallBlock(calls, content_end, regions, problem, got.unclosed)


def _as_text(syntax: ToolCallSyntax | None) -> bool:
    """Whether the engine's parser for ``syntax`` returns a malformed tool-call block as
    content (vLLM's hermes parser, NVIDIA's nemotron_json) rather than dropping it."""
    return bool(getattr(syntax, "malformed_as_text", False))


def _parse_harmony(text: str, prompt: Rendering) -> ParsedOutput:
    prefilled = prompt.text.endswith(harmony.START)
    got = harmony.read(text, prefilled=prefilled)
    message = _message(got.content or "", got.reasoning, got.calls, text)
    return ParsedOutput(
        _status(got.stop_token, got.problem, got.unclosed),
        message,
        text,
        got.stop_token,
        tuple(sorted(got.regions, key=_order)),
        _problem(got.stop_token, got.problem),
        harmony.START if prefilled else "",
    )


def _shift(call: ReadCall, by: int) -> ReadCall:
    return ReadCall(
        call.name,
        call.arguments,
        call.call_id,
        call.start + by,
        call.end + by,
        call.args_start + by,
        call.args_end + by,
    )


def _order(region: Region) -> tuple[int, int]:
    return region.start, -region.end


def _status(stop: str | None, problem: str | None, unclosed: bool) -> OutputStatus:
    if problem is not None and not (unclosed and stop is None):
        return OutputStatus.MALFORMED
    return OutputStatus.COMPLETE if stop is not None and problem is None else OutputStatus.TRUNCATED


def _problem(stop: str | None, problem: str | None) -> str | None:
    if stop is None:
        return (
            f"no stop token: the turn was cut off ({problem})"
            if problem
            else "no stop token: the turn was cut off"
        )
    return problem


def _message(content: str, reasoning: str | None, calls: list[ReadCall], text: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        message["tool_calls"] = [
            {
                "id": c.call_id or f"call_{digest}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for i, c in enumerate(calls)
        ]
    return message
