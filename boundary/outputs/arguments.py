"""Tool-call arguments as text: JSON members with the exact text the model wrote for each
value, and XML parameter values converted the way serving frontends convert them.

A model writes arguments once; a template may write them again differently (``tojson``
spacing, Python ``True``). Keeping the written text lets those differences show.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from json.decoder import scanstring
from typing import Any, TypeVar

_DECODER = json.JSONDecoder()
WHITESPACE = " \t\n\r"  # what JSON allows between tokens
_Item = TypeVar("_Item")


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


def skip_whitespace(text: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not JSON whitespace."""
    while pos < len(text) and text[pos] in WHITESPACE:
        pos += 1
    return pos


def _value(text: str, pos: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise JSONTextError(exc.msg, exc.pos) from None


def _container(
    text: str, pos: int, brackets: str, read_item: Callable[[str, int], tuple[_Item, int]]
) -> tuple[list[_Item], int]:
    """Read the comma-separated items between ``brackets`` (``"{}"`` or ``"[]"``) starting at
    ``text[pos]`` (after whitespace), each with ``read_item``; and the position after the close."""
    opening, closing = brackets
    pos = skip_whitespace(text, pos)
    if pos >= len(text) or text[pos] != opening:
        raise JSONTextError(f"expected {opening!r}", pos)
    pos = skip_whitespace(text, pos + 1)
    items: list[_Item] = []
    if pos < len(text) and text[pos] == closing:
        return items, pos + 1
    while True:
        item, end = read_item(text, pos)
        items.append(item)
        pos = skip_whitespace(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = skip_whitespace(text, pos + 1)
            continue
        if pos < len(text) and text[pos] == closing:
            return items, pos + 1
        raise JSONTextError(f"expected ',' or {closing!r}", pos)


def _member(text: str, pos: int) -> tuple[Member, int]:
    if pos >= len(text) or text[pos] != '"':
        raise JSONTextError("expected a key", pos)
    try:
        key, pos = scanstring(text, pos + 1)
    except json.JSONDecodeError as exc:
        raise JSONTextError(exc.msg, exc.pos) from None
    pos = skip_whitespace(text, pos)
    if pos >= len(text) or text[pos] != ":":
        raise JSONTextError("expected ':'", pos)
    start = skip_whitespace(text, pos + 1)
    value, end = _value(text, start)
    return Member(key, value, start, end), end


def _item_span(text: str, pos: int) -> tuple[tuple[int, int], int]:
    _, end = _value(text, pos)
    return (pos, end), end


def object_members(text: str, pos: int = 0) -> tuple[list[Member], int]:
    """Read the JSON object starting at ``text[pos]`` (after whitespace): its members with
    their value spans, and the position after the closing brace."""
    return _container(text, pos, "{}", _member)


def array_items(text: str, pos: int = 0) -> tuple[list[tuple[int, int]], int]:
    """Read the JSON array starting at ``text[pos]``: each item's ``(start, end)`` and the
    position after the closing bracket."""
    return _container(text, pos, "[]", _item_span)


def arguments_object(text: str) -> dict[str, Any]:
    """``text`` as a JSON object (the whole text, whitespace around it allowed)."""
    members, end = object_members(text)
    if skip_whitespace(text, end) != len(text):
        raise JSONTextError("text after the object", skip_whitespace(text, end))
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
