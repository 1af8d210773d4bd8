"""Request limits: how deep a field value may nest, and no lone surrogates anywhere.

Where it sits: the request stage, under ``boundary.request.validation``: checked on each raw message
and tool before it is validated into a model (and on tool-call arguments, template kwargs);
it imports only ``errors``. Every check is iterative or linear-time, so no input can exhaust
the stack or the clock before it is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from boundary.errors import RequestError

MAX_NESTING = 64
"""The deepest nesting (objects and arrays inside each other) a field value may have."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _lone_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None  # isascii() is O(1)


def _surrogate_problem(text: str) -> str:
    found = _SURROGATE.search(text)
    where = f" (U+{ord(found.group()):04X} at char {found.start()})" if found else ""
    return f"contains a lone surrogate{where}; text must be valid Unicode"


_CONTAINERS = (dict, list, tuple, Mapping)

Path = str | tuple[Any, Any, bool]
"""A location, written out only when a problem is found: a field name, or (parent path, key,
whether the parent is a mapping) for ``parent.key`` / ``parent[key]``."""


def _path(where: Path) -> str:
    parts: list[str] = []
    while isinstance(where, tuple):
        where, key, is_map = where
        parts.append(f".{key}" if is_map else f"[{key}]")
    return where + "".join(reversed(parts))


def find_problem(value: Any, location: Path, *, limit: int = MAX_NESTING) -> tuple[str, str] | None:
    """The first (location, message) in ``value``: nesting deeper than ``limit`` containers
    (located at ``location``, the field) or a lone surrogate in a string or key (located at
    its own path). Iterative, so no input can exhaust the stack."""
    if isinstance(value, str):
        return (_path(location), _surrogate_problem(value)) if _lone_surrogate(value) else None
    if not isinstance(value, _CONTAINERS):
        return None
    stack: list[tuple[Any, Path, int]] = [(value, location, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth >= limit:
            return _path(location), f"nested deeper than {limit} levels"
        is_map = isinstance(item, (dict, Mapping))
        for key, child in item.items() if is_map else enumerate(item):
            if is_map and isinstance(key, str) and not key.isascii() and _lone_surrogate(key):
                return _path(where), f"a key {_surrogate_problem(key)}"
            if isinstance(child, str):
                if not child.isascii() and _lone_surrogate(child):
                    return _path((where, key, is_map)), _surrogate_problem(child)
            elif isinstance(child, _CONTAINERS):
                stack.append((child, (where, key, is_map), depth + 1))
    return None


def json_text_nesting(text: str) -> int:
    """How deep objects and arrays nest in the JSON ``text`` (0 for a scalar); linear time,
    no parsing, so it is safe to ask before ``json.loads``."""
    if text.count("{") + text.count("[") == 0:
        return 0
    depth = deepest = 0
    for bracket in _BRACKET.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def check_value(value: Any, location: Path, *, limit: int = MAX_NESTING) -> None:
    """Raise ``RequestError`` if ``value`` nests deeper than ``limit`` levels or holds a lone
    surrogate; ``location`` names the field."""
    problem = find_problem(value, location, limit=limit)
    if problem is not None:
        raise RequestError(problem[1], location=problem[0])


def _check_key(key: Any, location: Path) -> None:
    if isinstance(key, str) and not key.isascii() and _lone_surrogate(key):
        raise RequestError(f"a key {_surrogate_problem(key)}", location=_path(location))


def check_object(obj: Any, location: Path, nested: str | None = None) -> None:
    """Each field of ``obj`` within the limits; the fields of ``obj[nested]`` one by one,
    and a JSON-text ``arguments`` by its text's nesting."""
    if not isinstance(obj, (dict, Mapping)):
        check_value(obj, location)
        return
    for key, value in obj.items():
        if not (type(key) is str and key.isascii()):  # the common key, checked inline
            _check_key(key, location)
        if key == nested and isinstance(value, (dict, Mapping)):
            check_object(value, (location, key, True))
        elif key == "arguments" and isinstance(value, str):
            check_value(value, (location, key, True))
            if value.count("{") + value.count("[") > MAX_NESTING and json_text_nesting(value) > MAX_NESTING:
                raise RequestError(
                    f"nested deeper than {MAX_NESTING} levels", location=_path((location, key, True))
                )
        elif not isinstance(value, (int, float, bool, type(None))):
            check_value(value, (location, key, True))


def check_message_limits(raw: Mapping[str, Any], location: str) -> None:
    """The request limits on one raw message: every field nests at most ``MAX_NESTING``
    levels (each content part, tool call field and tool-call ``arguments`` counted on its
    own) and no string or key holds a lone surrogate."""
    for key, value in raw.items():
        if not (type(key) is str and key.isascii()):  # the common key, checked inline
            _check_key(key, location)
        if isinstance(value, str):
            if not value.isascii() and _lone_surrogate(value):
                raise RequestError(_surrogate_problem(value), location=f"{location}.{key}")
        elif key == "tool_calls" and isinstance(value, list):
            for j, call in enumerate(value):
                check_object(call, ((location, key, True), j, False), nested="function")
        elif key == "content" and isinstance(value, list):
            for j, part in enumerate(value):
                check_value(part, ((location, key, True), j, False))
        elif value is not None:
            check_value(value, (location, key, True))


__all__ = [
    "MAX_NESTING",
    "check_message_limits",
    "check_object",
    "check_value",
    "find_problem",
    "json_text_nesting",
]
