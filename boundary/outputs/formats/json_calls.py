"""Tool-call syntaxes whose arguments are a JSON object written inline.

Where it sits: among the tool-call syntaxes, above ``base`` and ``framed``; ``codec`` lists
them.

- hermes_json (Qwen3, Qwen3-Next, Granite 4.0):
  ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``
- nemotron_toolcall (Nemotron Nano v2): ``<TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL>``
- minimax_m1_json (MiniMax-M1): ``<tool_calls>\n{"name": ..., "arguments": {...}}\n...\n</tool_calls>``,
  one call object a line
- kimi_sections (Kimi): ``<|tool_calls_section_begin|>`` then per call
  ``<|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{...}<|tool_call_end|>``
- deepseek_v3: ``<｜tool▁calls▁begin｜>`` then per call
  ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>``
- deepseek_v3_1: per call ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``
- mistral: ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` per call.

Arguments are written exactly as given and read back as the exact text between the
syntax's delimiters (checked to be one JSON object). Kimi and Mistral arguments are then
typed by the tool's schema as vLLM's engine parsers type them (``typed_arguments``: the
text as written unless a value changes type).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from boundary.outputs.arguments import (
    WHITESPACE,
    JSONTextError,
    arguments_object,
    array_items,
    object_members,
    skip_whitespace,
    typed_arguments,
)
from boundary.outputs.formats.base import CallContext, CallsRead, ReadCall
from boundary.outputs.formats.framed import CallFrame, Framing, Section
from boundary.outputs.model import WrittenCall


def _object_span(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of the one JSON object in ``text[start:end]`` (whitespace around it allowed)."""
    a = skip_whitespace(text, start)
    _, b = object_members(text[:end], a)
    if text[b:end].strip(WHITESPACE):
        raise JSONTextError("text after the JSON object", b)
    return a, b


def _framed_object_call(
    block: str, frame: CallFrame, name: str, call_id: str | None, args_start: int, args_end: int
) -> ReadCall | str:
    """The call in ``frame`` whose arguments are the one JSON object in ``block[args_start:args_end]``."""
    try:
        a, b = _object_span(block, args_start, args_end)
    except JSONTextError as exc:
        return f"tool call {frame.index}: arguments are not a JSON object ({exc})"
    return ReadCall(name, block[a:b], call_id, frame.start, frame.end, a, b)


def _name_and_arguments(
    text: str, start: int, index: int, *, encoded: bool = False
) -> tuple[str, int, int, int] | str:
    """``{"name": ..., "arguments": {...}}`` at ``start``: name, arguments span, end; or a problem.
    ``encoded``: the arguments may also be a string holding a JSON object's text."""
    try:
        members, end = object_members(text, start)
    except JSONTextError as exc:
        return f"tool call {index}: not a JSON object ({exc})"
    by_key = {m.key: m for m in members}
    name = by_key.get("name")
    args = by_key.get("arguments", by_key.get("parameters"))
    if name is None or not isinstance(name.value, str) or not name.value:
        return f"tool call {index}: no function name"
    if args is not None and encoded and isinstance(args.value, str):
        try:
            arguments_object(args.value)
        except JSONTextError:
            return f"tool call {index}: arguments are not a JSON object"
        return name.value, args.start, args.end, end
    if args is None or not isinstance(args.value, dict):
        return f"tool call {index}: arguments are not a JSON object"
    return name.value, args.start, args.end, end


# Deliberately alike: every syntax here is one frozen dataclass of the same fields (``start``,
# ``before``, ``between``, ``after``, ``close``) and methods (``write``, ``read``), each spelled with
# its own model's texts, so a format reads whole in one place.
@dataclass(frozen=True, slots=True)
class HermesJson:
    name: str = "hermes_json"
    start: str = "<tool_call>"
    before: str = "\n"
    between: str = "\n"
    after: str = ""
    close: str = "</tool_call>"
    malformed_as_text: bool = True  # a block that does not parse is returned as content

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        return between.join(
            f'{self.start}\n{{"name": "{c.name}", "arguments": {c.arguments}}}\n{self.close}' for c in calls
        )

    def read(self, block: str, context: CallContext) -> CallsRead:
        return Framing(self.start, self.close).read(block, context, self._read_call)

    def _read_call(self, block: str, frame: CallFrame, context: CallContext) -> ReadCall | str:
        found = _name_and_arguments(block[: frame.close], frame.start + len(self.start), frame.index)
        if isinstance(found, str):
            return found
        name, a, b, end = found
        if skip_whitespace(block, end) != frame.close:
            return f"tool call {frame.index}: text after the JSON object"
        return ReadCall(name, block[a:b], None, frame.start, frame.end, a, b)


@dataclass(frozen=True, slots=True)
class NemotronToolcall:
    name: str = "nemotron_toolcall"
    start: str = "<TOOLCALL>"
    before: str = "\n\n"
    between: str = ", "
    after: str = ""
    close: str = "</TOOLCALL>"
    malformed_as_text: bool = True  # a block that does not parse is returned as content

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        items = between.join(f'{{"name": "{c.name}", "arguments": {c.arguments}}}' for c in calls)
        return f"{self.start}[{items}]{self.close}"

    def read(self, block: str, context: CallContext) -> CallsRead:
        """A JSON array of calls, or one bare call object; ``arguments`` an object or the
        JSON text of one (as NVIDIA's ``nemotron_json`` parser accepts them)."""
        close = block.find(self.close)
        if close < 0:
            return CallsRead([], 0, "the tool-call list is never closed", unclosed=True)
        first = skip_whitespace(block, len(self.start))
        try:
            if block.startswith("{", first):
                _, end = object_members(block[:close], first)
                items = [(first, end)]
            else:
                items, end = array_items(block[:close], len(self.start))
        except JSONTextError as exc:
            return CallsRead([], 0, f"the tool-call list is not a JSON array ({exc})")
        if skip_whitespace(block, end) != close:
            return CallsRead([], 0, "text after the tool-call list")
        calls: list[ReadCall] = []
        for i, (a, b) in enumerate(items):
            found = _name_and_arguments(block[:b], a, i, encoded=True)
            if isinstance(found, str):
                return CallsRead(calls, 0, found)
            name, args_a, args_b, _ = found
            arguments = block[args_a:args_b]
            if arguments.startswith('"'):
                arguments = json.loads(arguments)  # arguments written as the JSON text of an object
            calls.append(ReadCall(name, arguments, None, a, b, args_a, args_b))
        return CallsRead(calls, close + len(self.close))


@dataclass(frozen=True, slots=True)
class MinimaxM1Json:
    """One ``<tool_calls>`` section of call objects, one a line (the format MiniMax-M1's chat
    template asks for and re-renders). Invariant: every call's arguments are the exact text
    of one JSON object between its ``"arguments":`` and the call object's closing brace."""

    name: str = "minimax_m1_json"
    start: str = "<tool_calls>"
    before: str = "\n"
    between: str = "\n"
    after: str = ""
    close: str = "</tool_calls>"

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        items = between.join(f'{{"name": "{c.name}", "arguments": {c.arguments}}}' for c in calls)
        return f"{self.start}\n{items}\n{self.close}"

    def read(self, block: str, context: CallContext) -> CallsRead:
        close = block.find(self.close)
        if close < 0:
            return CallsRead([], 0, "the tool-call section is never closed", unclosed=True)
        calls: list[ReadCall] = []
        at = skip_whitespace(block, len(self.start))
        while at < close:
            found = _name_and_arguments(block[:close], at, len(calls))
            if isinstance(found, str):
                return CallsRead(calls, 0, found)
            name, a, b, end = found
            calls.append(ReadCall(name, block[a:b], None, at, end, a, b))
            at = skip_whitespace(block, end)
        if not calls:
            return CallsRead([], 0, "the tool-call section holds no call")
        return CallsRead(calls, close + len(self.close))


_KIMI_ID = re.compile(r"^functions\.(?P<name>.+):(?P<n>\d+)$")


@dataclass(frozen=True, slots=True)
class KimiSections:
    name: str = "kimi_sections"
    start: str = "<|tool_calls_section_begin|>"
    before: str = ""
    between: str = ""
    after: str = ""
    close: str = "<|tool_calls_section_end|>"
    call_open: str = "<|tool_call_begin|>"
    args_open: str = "<|tool_call_argument_begin|>"
    call_close: str = "<|tool_call_end|>"

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        first = context.prompt_text.count(self.call_open)  # Kimi numbers calls across the conversation
        parts = []
        for i, c in enumerate(calls):
            call_id = (
                c.call_id if c.call_id and _KIMI_ID.match(c.call_id) else f"functions.{c.name}:{first + i}"
            )
            parts.append(f"{self.call_open}{call_id}{self.args_open}{c.arguments}{self.call_close}")
        return self.start + between.join(parts) + self.close

    def read(self, block: str, context: CallContext) -> CallsRead:
        section = Section(self.start, self.close, "section")
        framing = Framing(self.call_open, self.call_close, self.args_open, section)
        return framing.read(block, context, self._read_call)

    def _read_call(self, block: str, frame: CallFrame, context: CallContext) -> ReadCall | str:
        call_id = block[frame.start + len(self.call_open) : frame.sep].strip()
        m = _KIMI_ID.match(call_id)
        name = m.group("name") if m else call_id.split(":")[0].removeprefix("functions.")
        found = _framed_object_call(block, frame, name, call_id, frame.sep + len(self.args_open), frame.close)
        return _typed(found, context)


@dataclass(frozen=True, slots=True)
class DeepSeekV3:
    """V3 writes the call type and a fenced JSON block; V3.1 the name and bare JSON."""

    name: str = "deepseek_v3"
    start: str = "<｜tool▁calls▁begin｜>"
    before: str = ""
    between: str = "\n"
    after: str = ""
    close: str = "<｜tool▁calls▁end｜>"
    call_open: str = "<｜tool▁call▁begin｜>"
    sep: str = "<｜tool▁sep｜>"
    call_close: str = "<｜tool▁call▁end｜>"
    fenced: bool = True

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        if self.fenced:
            parts = [
                f"{self.call_open}function{self.sep}{c.name}\n```json\n{c.arguments}\n```{self.call_close}"
                for c in calls
            ]
        else:
            parts = [f"{self.call_open}{c.name}{self.sep}{c.arguments}{self.call_close}" for c in calls]
        return self.start + between.join(parts) + self.close

    def read(self, block: str, context: CallContext) -> CallsRead:
        section = Section(self.start, self.close, "list")
        framing = Framing(self.call_open, self.call_close, self.sep, section)
        return framing.read(block, context, self._read_call)

    def _read_call(self, block: str, frame: CallFrame, context: CallContext) -> ReadCall | str:
        head_end = frame.sep + len(self.sep)
        if not self.fenced:
            name = block[frame.start + len(self.call_open) : frame.sep].strip()
            return _framed_object_call(block, frame, name, None, head_end, frame.close)
        newline = block.find("\n", head_end, frame.close)
        name = block[head_end : newline if newline >= 0 else frame.close].strip()
        body = block[newline + 1 if newline >= 0 else frame.close : frame.close]
        fence = re.fullmatch(r"\s*```(?:json)?\n?(.*?)\n?```\s*", body, re.DOTALL)
        if newline < 0 or fence is None:
            return f"tool call {frame.index}: arguments are not in a ```json block"
        return _framed_object_call(
            block, frame, name, None, newline + 1 + fence.start(1), newline + 1 + fence.end(1)
        )


def _typed(call: ReadCall | str, context: CallContext) -> ReadCall:
    """``call`` with its arguments typed by its tool's schema (a problem passes through)."""
    if isinstance(call, str):
        return call  # type: ignore[return-value]
    arguments = typed_arguments(call.arguments, context.parameter_types.get(call.name))
    return call if arguments == call.arguments else replace(call, arguments=arguments)


_MISTRAL_ID = re.compile(r"^[A-Za-z0-9]{9}$")


@dataclass(frozen=True, slots=True)
class MistralCalls:
    name: str = "mistral"
    start: str = "[TOOL_CALLS]"
    before: str = ""
    between: str = ""
    after: str = ""

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        return between.join(
            f"{self.start}{c.name}[CALL_ID]{_mistral_id(c, i)}[ARGS]{c.arguments}"
            for i, c in enumerate(calls)
        )

    def read(self, block: str, context: CallContext) -> CallsRead:
        calls: list[ReadCall] = []
        starts = [m.start() for m in re.finditer(re.escape(self.start), block)]
        for i, at in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(block)
            args_at = block.find("[ARGS]", at, end)
            if args_at < 0:
                return CallsRead(calls, at, f"tool call {i} has no [ARGS]", unclosed=True)
            head = block[at + len(self.start) : args_at]
            name, _, call_id = head.partition("[CALL_ID]")
            try:
                a, b = _object_span(block, args_at + len("[ARGS]"), len(block[:end].rstrip(WHITESPACE)))
            except JSONTextError as exc:
                # the JSON runs to the end of the turn: it may just be cut off
                cut = i + 1 == len(starts) and exc.pos >= len(block.rstrip(WHITESPACE))
                problem = f"tool call {i}: arguments are not a JSON object ({exc})"
                return CallsRead(calls, at, problem, unclosed=cut)
            call = ReadCall(name.strip(), block[a:b], call_id.strip() or None, at, b, a, b)
            calls.append(_typed(call, context))
        return CallsRead(calls, calls[-1].end if calls else 0)


def _mistral_id(call: WrittenCall, index: int) -> str:
    """The call's id when it is one Mistral accepts (9 alphanumerics), else a stable one."""
    if call.call_id and _MISTRAL_ID.match(call.call_id):
        return call.call_id
    return hashlib.sha256(f"{index}:{call.name}:{call.arguments}".encode()).hexdigest()[:9]
