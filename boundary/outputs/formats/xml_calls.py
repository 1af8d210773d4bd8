"""Tool-call syntaxes that write each argument as an XML parameter.

qwen3_coder_xml (Qwen3.5, Qwen3.6, Nemotron 3)::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

minimax_xml (MiniMax-M2)::

    <minimax:tool_call>
    <invoke name="NAME">
    <parameter name="KEY">VALUE</parameter>
    </invoke>
    </minimax:tool_call>

A string value is written as the string itself, any other value as its JSON text as the
model wrote it. Read back, values are typed by the tool's schema (as vLLM's parsers do)
and ``arguments`` is their ``json.dumps``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from boundary.outputs.arguments import JSONTextError, convert_parameter, parameter_texts
from boundary.outputs.formats.base import CallContext, CallsRead, ReadCall
from boundary.outputs.model import WrittenCall

_WS = " \t\n\r"
PARAMETERS = {  # one parameter: its name and the value text as written
    "qwen3_coder_xml": r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>",
    "minimax_xml": r'<parameter name="([^"]+)">(.*?)</parameter>',
}


def written_parameters(syntax: str, arguments_text: str) -> list[tuple[str, str]]:
    """The parameters of one call's arguments region, each value's text exactly as written."""
    return [
        (m.group(1).strip(), m.group(2)) for m in re.finditer(PARAMETERS[syntax], arguments_text, re.DOTALL)
    ]


def _params(calls: Sequence[WrittenCall]) -> list[list[tuple[str, str]]]:
    out = []
    for i, c in enumerate(calls):
        try:
            out.append(parameter_texts(c.arguments))
        except JSONTextError as exc:
            raise ValueError(f"tool_calls[{i}].function.arguments: not a JSON object ({exc})") from None
    return out


def _arguments(name: str, params: list[tuple[str, str]], context: CallContext) -> str:
    types = context.parameter_types.get(name, {})
    return json.dumps({k: convert_parameter(v, types.get(k)) for k, v in params}, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Qwen3CoderXml:
    name: str = "qwen3_coder_xml"
    start: str = "<tool_call>"
    before: str = "\n\n"
    between: str = "\n"
    after: str = ""
    close: str = "</tool_call>"

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        blocks = []
        for call, params in zip(calls, _params(calls), strict=True):
            body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
            blocks.append(f"{self.start}\n<function={call.name}>\n{body}</function>\n{self.close}")
        return between.join(blocks)

    def read(self, block: str, context: CallContext) -> CallsRead:
        calls: list[ReadCall] = []
        pos = 0
        pattern = re.compile(
            r"<tool_call>\s*<function=([^>\n]+)>\n?(.*?)</function>\s*</tool_call>", re.DOTALL
        )
        while (at := _skip(block, pos)) < len(block):
            if not block.startswith(self.start, at):
                return CallsRead(
                    calls, pos, f"unexpected text after tool call {len(calls) - 1}: {block[at : at + 40]!r}"
                )
            m = pattern.match(block, at)
            if m is None:
                problem = "is never closed" if self.close not in block[at:] else "is not <function=...> XML"
                return CallsRead(
                    calls, pos, f"tool call {len(calls)} {problem}", unclosed=self.close not in block[at:]
                )
            params, problem = _read_parameters(m.group(2), PARAMETERS[self.name])
            if problem:
                return CallsRead(calls, pos, f"tool call {len(calls)}: {problem}")
            name = m.group(1).strip()
            calls.append(
                ReadCall(name, _arguments(name, params, context), None, at, m.end(), m.start(2), m.end(2))
            )
            pos = m.end()
        return CallsRead(calls, pos)


@dataclass(frozen=True, slots=True)
class MinimaxXml:
    name: str = "minimax_xml"
    start: str = "<minimax:tool_call>"
    before: str = "\n"
    between: str = ""
    after: str = ""
    close: str = "</minimax:tool_call>"

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        invokes = []
        for call, params in zip(calls, _params(calls), strict=True):
            body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params)
            invokes.append(f'<invoke name="{call.name}">\n{body}</invoke>\n')
        return f"{self.start}\n{between.join(invokes)}{self.close}"

    def read(self, block: str, context: CallContext) -> CallsRead:
        close = block.find(self.close)
        if close < 0:
            return CallsRead([], 0, "the tool-call block is never closed", unclosed=True)
        calls: list[ReadCall] = []
        pos = len(self.start)
        invoke = re.compile(r'<invoke name="([^"]+)">\n?(.*?)</invoke>', re.DOTALL)
        while (at := _skip(block, pos)) < close:
            m = invoke.match(block, at)
            if m is None or m.end() > close:
                return CallsRead(calls, 0, f"tool call {len(calls)} is not <invoke name=...> XML")
            params, problem = _read_parameters(m.group(2), PARAMETERS[self.name])
            if problem:
                return CallsRead(calls, 0, f"tool call {len(calls)}: {problem}")
            name = m.group(1).strip()
            calls.append(
                ReadCall(name, _arguments(name, params, context), None, at, m.end(), m.start(2), m.end(2))
            )
            pos = m.end()
        return CallsRead(calls, close + len(self.close))


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _read_parameters(body: str, pattern: str) -> tuple[list[tuple[str, str]], str | None]:
    params = []
    pos = 0
    for m in re.finditer(pattern, body, re.DOTALL):
        if body[pos : m.start()].strip():
            return params, f"unexpected text between parameters: {body[pos : m.start()].strip()[:40]!r}"
        params.append((m.group(1).strip(), m.group(2)))
        pos = m.end()
    if body[pos:].strip():
        return params, f"unexpected text after the parameters: {body[pos:].strip()[:40]!r}"
    return params, None
