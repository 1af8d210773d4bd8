"""Tool-call syntaxes that write each argument as an XML parameter.

Where it sits: among the tool-call syntaxes, above ``base`` and ``framed``; ``codec`` and
``horizon`` read them.

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

from boundary.outputs.arguments import JSONTextError, convert_parameter, parameter_texts, skip_whitespace
from boundary.outputs.formats.base import CallContext, CallsRead, ReadCall
from boundary.outputs.formats.framed import CallFrame, Framing
from boundary.outputs.model import WrittenCall

PARAMETERS = {  # one parameter: its name and the value text as written
    "qwen3_coder_xml": r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>",
    "minimax_xml": r'<parameter name="([^"]+)">(.*?)</parameter>',
}
WRITTEN_PARAMETER = {  # how each syntax writes one parameter
    "qwen3_coder_xml": "<parameter={key}>\n{value}\n</parameter>\n",
    "minimax_xml": '<parameter name="{key}">{value}</parameter>\n',
}
# One call: group 1 the function name, group 2 its parameters.
_QWEN3_CALL = re.compile(r"<tool_call>\s*<function=([^>\n]+)>\n?(.*?)</function>\s*</tool_call>", re.DOTALL)
_MINIMAX_CALL = re.compile(r'<invoke name="([^"]+)">\n?(.*?)</invoke>', re.DOTALL)


def written_parameters(syntax: str, arguments_text: str) -> list[tuple[str, str]]:
    """The parameters of one call's arguments region, each value's text exactly as written."""
    return [
        (m.group(1).strip(), m.group(2)) for m in re.finditer(PARAMETERS[syntax], arguments_text, re.DOTALL)
    ]


def _parameter_bodies(syntax: str, calls: Sequence[WrittenCall]) -> list[str]:
    """Each call's parameters as ``syntax`` writes them, in the order its arguments have them."""
    out = []
    for i, c in enumerate(calls):
        try:
            params = parameter_texts(c.arguments)
        except JSONTextError as exc:
            raise ValueError(f"tool_calls[{i}].function.arguments: not a JSON object ({exc})") from None
        out.append("".join(WRITTEN_PARAMETER[syntax].format(key=k, value=v) for k, v in params))
    return out


def _xml_call(syntax: str, m: re.Match[str], index: int, context: CallContext) -> ReadCall | str:
    """The call ``m`` matched (group 1 its name, group 2 its parameters), or a problem."""
    params, problem = _read_parameters(m.group(2), PARAMETERS[syntax])
    if problem:
        return f"tool call {index}: {problem}"
    name = m.group(1).strip()
    types = context.parameter_types.get(name, {})
    arguments = json.dumps({k: convert_parameter(v, types.get(k)) for k, v in params}, ensure_ascii=False)
    return ReadCall(name, arguments, None, m.start(), m.end(), m.start(2), m.end(2))


# Deliberately alike: each syntax is one frozen dataclass of the same fields and methods as the
# JSON syntaxes (``json_calls``), spelled with its own model's texts.
@dataclass(frozen=True, slots=True)
class Qwen3CoderXml:
    name: str = "qwen3_coder_xml"
    start: str = "<tool_call>"
    before: str = "\n\n"
    between: str = "\n"
    after: str = ""
    close: str = "</tool_call>"

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        return between.join(
            f"{self.start}\n<function={call.name}>\n{body}</function>\n{self.close}"
            for call, body in zip(calls, _parameter_bodies(self.name, calls), strict=True)
        )

    def read(self, block: str, context: CallContext) -> CallsRead:
        return Framing(self.start, self.close).read(block, context, self._read_call)

    def _read_call(self, block: str, frame: CallFrame, context: CallContext) -> ReadCall | str:
        # matched from the call's start, not cut at its first close: the pattern decides the call's end
        m = _QWEN3_CALL.match(block, frame.start)
        if m is None:
            return f"tool call {frame.index} is not <function=...> XML"
        return _xml_call(self.name, m, frame.index, context)


@dataclass(frozen=True, slots=True)
class MinimaxXml:
    name: str = "minimax_xml"
    start: str = "<minimax:tool_call>"
    before: str = "\n"
    between: str = ""
    after: str = ""
    close: str = "</minimax:tool_call>"

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        invokes = (
            f'<invoke name="{call.name}">\n{body}</invoke>\n'
            for call, body in zip(calls, _parameter_bodies(self.name, calls), strict=True)
        )
        return f"{self.start}\n{between.join(invokes)}{self.close}"

    def read(self, block: str, context: CallContext) -> CallsRead:
        close = block.find(self.close)
        if close < 0:
            return CallsRead([], 0, "the tool-call block is never closed", unclosed=True)
        calls: list[ReadCall] = []
        pos = len(self.start)
        while (at := skip_whitespace(block, pos)) < close:
            m = _MINIMAX_CALL.match(block, at)
            if m is None or m.end() > close:
                return CallsRead(calls, 0, f"tool call {len(calls)} is not <invoke name=...> XML")
            found = _xml_call(self.name, m, len(calls), context)
            if isinstance(found, str):
                return CallsRead(calls, 0, found)
            calls.append(found)
            pos = found.end
        return CallsRead(calls, close + len(self.close))


def _read_parameters(body: str, pattern: str) -> tuple[list[tuple[str, str]], str | None]:
    params: list[tuple[str, str]] = []
    pos = 0
    for m in re.finditer(pattern, body, re.DOTALL):
        if body[pos : m.start()].strip():
            return params, f"unexpected text between parameters: {body[pos : m.start()].strip()[:40]!r}"
        params.append((m.group(1).strip(), m.group(2)))
        pos = m.end()
    if body[pos:].strip():
        return params, f"unexpected text after the parameters: {body[pos:].strip()[:40]!r}"
    return params, None
