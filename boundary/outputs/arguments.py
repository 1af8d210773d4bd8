"""Tool-call arguments as text: JSON members with the exact text the model wrote for each
value, and XML parameter values converted the way serving frontends convert them.

A model writes arguments once; a template may write them again differently (``tojson``
spacing, Python ``True``). Keeping the written text lets those differences show.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]  # not in typeshed
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
    opening, closing = brackets[0], brackets[1]
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


# -- values typed by the tool's schema (vLLM's rules) ---------------------------------------


def parameter_types(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """``{function name: {parameter: its JSON schema}}`` from OpenAI tool definitions (the
    ``properties`` of each function's parameters; the first definition of a name wins, as
    vLLM's ``find_tool_properties`` finds it)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or fn["name"] in out:
            continue
        params = fn.get("parameters") or {}
        props = params.get("properties") if isinstance(params, Mapping) else None
        out[fn["name"]] = dict(props) if isinstance(props, Mapping) else {}
    return out


def schema_types(schema: Any) -> list[str]:
    """Every type a JSON schema allows: ``type`` (a string or a list), the types of ``enum``
    values, and those of ``anyOf`` / ``oneOf`` / ``allOf`` choices; ``["string"]`` when it
    names none. The same set as vLLM's ``extract_types_from_schema``."""
    if not isinstance(schema, Mapping):
        return ["string"]
    types: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        types.add(kind)
    elif isinstance(kind, list):
        types.update(t for t in kind if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for value in enum:
            types.add(_json_type(value))
    for choice_field in ("anyOf", "oneOf", "allOf"):
        choices = schema.get(choice_field)
        if isinstance(choices, list):
            for choice in choices:
                types.update(schema_types(choice))
    return sorted(types) if types else ["string"]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


_TYPE_ALIASES = {
    **dict.fromkeys(("str", "text", "varchar", "char", "enum"), "string"),
    **dict.fromkeys(
        ("int", "int32", "int64", "uint", "uint32", "uint64", "long", "short", "unsigned"), "integer"
    ),
    **dict.fromkeys(("float", "float32", "float64", "double"), "number"),
    "bool": "boolean",
    "dict": "object",
    **dict.fromkeys(("arr", "list", "sequence"), "array"),
}
# tried in this order, whatever order the schema lists its types in
_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in ``value`` (``json.dumps`` would write invalid JSON)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def coerce_text(text: str, types: Sequence[str]) -> Any:
    """A value written as text, as the JSON value of the first of ``types`` it reads as.

    Types are tried null, integer, number, boolean, object, array, string (aliases such as
    ``int`` / ``float`` / ``bool`` count as theirs); without a match the text is read as
    JSON, and kept as text when it is not JSON or not finite. Numbers keep their exact
    value (``int`` for integral text), booleans accept ``1`` / ``0``. vLLM's
    ``coerce_to_schema_type``, rule for rule.
    """
    wanted = {_TYPE_ALIASES.get(k, k) for k in (t.strip().lower() for t in types)}
    for kind in _PRIORITY:
        if kind not in wanted:
            continue
        if kind == "null":
            if text.lower() == "null":
                return None
        elif kind == "string":
            return text
        elif kind == "integer":
            try:
                return int(text)
            except ValueError:
                pass
        elif kind == "number":
            try:
                return int(text)
            except ValueError:
                pass
            try:
                number = float(text)
            except ValueError:
                continue
            if math.isfinite(number):
                return number if number != int(number) else int(number)
        elif kind == "boolean":
            word = text.lower().strip()
            if word in ("true", "1"):
                return True
            if word in ("false", "0"):
                return False
        else:  # object, array: any JSON value
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if _finite(value):
                return value
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if _finite(value) else text


def convert_parameter(text: str, schema: Any) -> Any:
    """An XML parameter's text as the JSON value a frontend puts in ``arguments``: typed by
    the parameter's schema (a string without one)."""
    if not isinstance(schema, Mapping):
        return text
    return coerce_text(text, schema_types(schema))


def coerce_value(value: Any, schema: Mapping[str, Any]) -> tuple[Any, bool]:
    """A JSON argument value typed by its schema, and whether that changed it: strings are
    coerced, objects and arrays recursed into where the schema has ``properties`` /
    ``items``, other values re-read from their JSON text (vLLM's ``_coerce_value``)."""
    if isinstance(value, str):
        coerced = coerce_text(value, schema_types(schema))
        return (coerced, True) if coerced is not value else (value, False)
    if isinstance(value, dict):
        props = schema.get("properties")
        return (value, coerce_members(value, props)) if isinstance(props, Mapping) else (value, False)
    if isinstance(value, list):
        items = schema.get("items")
        changed = False
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                coerced, item_changed = coerce_value(item, items)
                if item_changed:
                    value[i], changed = coerced, True
        return value, changed
    coerced = coerce_text(json.dumps(value, ensure_ascii=False), schema_types(schema))
    if type(coerced) is not type(value) or coerced != value:
        return coerced, True
    return value, False


def coerce_members(args: dict[str, Any], properties: Mapping[str, Any]) -> bool:
    """Type every member of ``args`` that has a schema in ``properties``, in place; whether
    any changed."""
    changed = False
    for key, value in args.items():
        schema = properties.get(key)
        if isinstance(schema, Mapping):
            coerced, value_changed = coerce_value(value, schema)
            if value_changed:
                args[key], changed = coerced, True
    return changed


def typed_arguments(text: str, properties: Mapping[str, Any] | None) -> str:
    """A call's JSON arguments typed by its tool's ``properties``: the text as written when
    nothing changes (or it is not an object), else the typed object's ``json.dumps``."""
    if not properties:
        return text
    try:
        args = json.loads(text)
    except ValueError:
        return text
    if not isinstance(args, dict) or not coerce_members(args, properties):
        return text
    return json.dumps(args, ensure_ascii=False)
