"""Tool calls written as a Python list of calls with keyword arguments.

Where it sits: among the tool-call syntaxes, above ``base``; ``codec`` lists it and
``horizon`` asks it how the template writes arguments back.

lfm2_pythonic (LFM2 / LFM2.5)::

    <|tool_call_start|>[get_weather(city="Oslo", days=2)]<|tool_call_end|>

Written: each argument as ``key=value``, a string as its JSON string literal (double quotes,
valid Python), ``true`` / ``false`` / ``null`` as ``True`` / ``False`` / ``None``, any other
value as Python literal text. Read: the list is parsed as Python (``ast``), every argument
must be a literal, and ``arguments`` is the ``json.dumps`` of the keyword values (as vLLM's
``lfm2`` parser returns them). Invariant: call and argument spans are exact character spans
of the block; the list's brackets belong to its first and last call.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from boundary.outputs.arguments import JSONTextError, arguments_object
from boundary.outputs.formats.base import CallContext, CallsRead, ReadCall
from boundary.outputs.model import WrittenCall


def python_literal(value: Any) -> str:
    """``value`` (a JSON value) as Python literal text: strings double-quoted."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def template_arguments(arguments: dict[str, Any]) -> str:
    """The arguments as LFM2.5's template writes them back (``format_arg_value``): a string in
    single quotes, unescaped; an object with ``tojson``; anything else with Jinja's ``string``
    filter (Python ``str()``)."""
    parts = []
    for key, value in arguments.items():
        if isinstance(value, str):
            text = f"'{value}'"
        elif isinstance(value, dict):
            text = json.dumps(value, ensure_ascii=False)
        else:
            text = str(value)
        parts.append(f"{key}={text}")
    return ", ".join(parts)


LFM2_PYTHONIC = "lfm2_pythonic"


@dataclass(frozen=True, slots=True)
class Lfm2Pythonic:
    name: str = LFM2_PYTHONIC
    start: str = "<|tool_call_start|>"
    before: str = ""
    between: str = ", "
    after: str = ""
    close: str = "<|tool_call_end|>"

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str:
        items = between.join(f"{c.name}({self._keywords(c.arguments)})" for c in calls)
        return f"{self.start}[{items}]{self.close}"

    @staticmethod
    def _keywords(arguments: str) -> str:
        try:
            values = arguments_object(arguments)
        except JSONTextError:
            return arguments  # not an object: written as given, and read back as broken
        return ", ".join(f"{k}={python_literal(v)}" for k, v in values.items())

    def read(self, block: str, context: CallContext) -> CallsRead:
        close = block.find(self.close)
        if close < 0:
            return CallsRead([], 0, "the tool-call list is never closed", unclosed=True)
        source = block[len(self.start) : close]
        try:
            tree = ast.parse(source.strip(), mode="eval").body
        except SyntaxError as exc:
            return CallsRead([], 0, f"the tool-call list is not Python ({exc.msg})")
        if not isinstance(tree, ast.List):
            return CallsRead([], 0, "the tool calls are not a Python list")
        offset = len(self.start) + (len(source) - len(source.lstrip()))
        stripped = source.strip()
        calls: list[ReadCall] = []
        at = 0
        for i, node in enumerate(tree.elts):
            found = self._read_call(stripped, node, i)
            if isinstance(found, str):
                return CallsRead(calls, 0, found)
            name, arguments, text, args_text = found
            start = stripped.index(text, at)
            args_start = start + text.index("(") + 1
            at = start + len(text)
            if i == 0:  # the list's "[" frames the first call, its "]" the last
                start = stripped.rfind("[", 0, start)
            if i == len(tree.elts) - 1:
                at = stripped.index("]", at) + 1
            calls.append(
                ReadCall(
                    name,
                    arguments,
                    None,
                    offset + start,
                    offset + at,
                    offset + args_start,
                    offset + args_start + len(args_text),
                )
            )
        return CallsRead(calls, close + len(self.close))

    @staticmethod
    def _read_call(source: str, node: ast.expr, index: int) -> tuple[str, str, str, str] | str:
        """A call's name, JSON arguments, its source text and its arguments' source text."""
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            return f"tool call {index}: not a call with keyword arguments"
        values: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                return f"tool call {index}: ** arguments"
            try:
                values[keyword.arg] = ast.literal_eval(keyword.value)
            except (ValueError, SyntaxError):
                return f"tool call {index}: argument {keyword.arg!r} is not a literal"
        text = ast.get_source_segment(source, node) or ""
        inner = text[text.index("(") + 1 : text.rindex(")")]
        try:
            arguments = json.dumps(values, ensure_ascii=False)
        except (TypeError, ValueError):
            return f"tool call {index}: an argument is not a JSON value"
        return node.func.id, arguments, text, inner
