"""Tool-call arguments as text: JSON members with the exact text the model wrote for each
value, and XML parameter values converted the way serving frontends convert them.

A model writes arguments once; a template may write them again differently (``tojson``
spacing, Python ``True``). Keeping the written text lets those differences show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.decoder import scanstring
from typing import Any

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


class JSONTextError(ValueError):
    """Text that is not the JSON the format requires; ``pos`` is where reading stopped."""

    def __init__(self, msg: str, pos: int) -> None:
        super().__init__(f"{msg} at char {pos}")
        self.pos = pos


@dataclass(frozen=True, slots=True)
class Member:
    """One ``"key": value`` of a JSON object; ``[start, end)`` is the value's text."""

    key: str
    value: Any
    start: int
    end: int


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _value(text: str, pos: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise JSONTextError(exc.msg, exc.pos) from None


def object_members(text: str, pos: int = 0) -> tuple[list[Member], int]:
    """Read the JSON object starting at ``text[pos]`` (after whitespace): its members with
    their value spans, and the position after the closing brace."""
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] != "{":
        raise JSONTextError("expected '{'", pos)
    pos = _skip(text, pos + 1)
    members: list[Member] = []
    if pos < len(text) and text[pos] == "}":
        return members, pos + 1
    while True:
        if pos >= len(text) or text[pos] != '"':
            raise JSONTextError("expected a key", pos)
        try:
            key, pos = scanstring(text, pos + 1)
        except json.JSONDecodeError as exc:
            raise JSONTextError(exc.msg, exc.pos) from None
        pos = _skip(text, pos)
        if pos >= len(text) or text[pos] != ":":
            raise JSONTextError("expected ':'", pos)
        start = _skip(text, pos + 1)
        value, end = _value(text, start)
        members.append(Member(key, value, start, end))
        pos = _skip(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)
            continue
        if pos < len(text) and text[pos] == "}":
            return members, pos + 1
        raise JSONTextError("expected ',' or '}'", pos)


def array_items(text: str, pos: int = 0) -> tuple[list[tuple[int, int]], int]:
    """Read the JSON array starting at ``text[pos]``: each item's ``(start, end)`` and the
    position after the closing bracket."""
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] != "[":
        raise JSONTextError("expected '['", pos)
    pos = _skip(text, pos + 1)
    items: list[tuple[int, int]] = []
    if pos < len(text) and text[pos] == "]":
        return items, pos + 1
    while True:
        _, end = _value(text, pos)
        items.append((pos, end))
        pos = _skip(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            return items, pos + 1
        raise JSONTextError("expected ',' or ']'", pos)


def arguments_object(text: str) -> dict[str, Any]:
    """``text`` as a JSON object (the whole text, whitespace around it allowed)."""
    members, end = object_members(text)
    if _skip(text, end) != len(text):
        raise JSONTextError("text after the object", _skip(text, end))
    return {m.key: m.value for m in members}


def parameter_texts(arguments: str) -> list[tuple[str, str]]:
    """The arguments object as XML-style parameters, in the written order: a string value
    as the string itself, any other value as its JSON text exactly as written."""
    members, _ = object_members(arguments)
    return [(m.key, m.value if isinstance(m.value, str) else arguments[m.start : m.end]) for m in members]


# -- XML parameter values -> JSON values ----------------------------------------------------


def parameter_types(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """``{function name: {parameter: JSON-schema type}}`` from OpenAI tool definitions."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            continue
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[fn["name"]] = {k: (v or {}).get("type") for k, v in props.items() if isinstance(v, Mapping)}
    return out


def convert_parameter(text: str, schema_type: Any) -> Any:
    """An XML parameter's text as the JSON value a frontend puts in ``arguments``.

    Typed by the tool's schema as vLLM's XML tool parsers type it; without a schema type the
    text stays a string.
    """
    if schema_type is None:
        return text
    kinds = schema_type if isinstance(schema_type, list) else [schema_type]
    kinds = [str(k).lower() for k in kinds]
    if text.lower() == "null" and ("null" in kinds or kinds != ["string"]):
        return None
    for kind in kinds:
        if kind in ("string", "str", "text"):
            return text
        if kind in ("integer", "int"):
            try:
                return int(text)
            except ValueError:
                continue
        if kind in ("number", "float"):
            try:
                number = float(text)
            except ValueError:
                continue
            return (
                int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
            )
        if kind in ("boolean", "bool"):
            if text.strip().lower() in ("true", "false"):
                return text.strip().lower() == "true"
            continue
        if kind in ("object", "array"):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                continue
    return text
