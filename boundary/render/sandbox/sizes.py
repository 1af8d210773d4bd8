"""Sizes of what an operation would build, measured without building it: ``repr`` /
``str`` / ``json.dumps`` / ``pprint`` output of a value (``Measure``), and the helpers the
estimates share.

Where it sits: inside the render stage's sandbox, under the estimates: ``environment``,
``filters``, ``formatting`` and the estimates measure with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from jinja2.runtime import Undefined
from jinja2.utils import Namespace

from boundary.errors import RenderLimitExceeded
from boundary.render.sandbox.limits import CHUNK, OPAQUE


class Over(Exception):
    """A measurement passed its cap (internal to ``Measure``)."""


def _str_repr_size(s: str) -> int:
    """``len(repr(s))``, exactly for short strings; a bound (quotes may be escaped either way)
    for long ones, measured chunk by chunk so the repr is never built whole."""
    if len(s) <= CHUNK:
        return len(repr(s))
    if s.isascii() and s.isprintable():
        return len(s) + 2 + s.count("\\") + (s.count("'") if '"' in s else 0)
    return (
        2
        + s.count("'")
        + s.count('"')
        + sum(len(repr(s[i : i + CHUNK])) - 2 for i in range(0, len(s), CHUNK))
    )


def _json_str_size(s: str, ensure_ascii: bool) -> int:
    """``len(json.dumps(s, ensure_ascii=...))``, exactly, chunk by chunk for long strings."""
    encode = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    if len(s) <= CHUNK:
        return len(encode(s))
    return 2 + sum(len(encode(s[i : i + CHUNK])) - 2 for i in range(0, len(s), CHUNK))


def escaped_size(s: str) -> int:
    """``len(markupsafe.escape(s))`` for a plain string."""
    return len(s) + 4 * (s.count("&") + s.count('"') + s.count("'")) + 3 * (s.count("<") + s.count(">"))


VIEWS: tuple[type[Any], ...] = (type({}.keys()), type({}.values()), type({}.items()))


class Measure:
    """Sizes of ``str()``, ``repr()``, ``json.dumps`` and ``pprint`` output of a value, counted
    without building it.

    Invariants: a value shared in several places counts as often as it prints, while each
    container is walked once (sizes are memoized by identity, and the value measured keeps
    every container alive); a recursive reference counts as ``[...]``; measuring stops with
    ``Over`` once a size passes ``cap``; ``nodes`` is the number of items walked."""

    __slots__ = ("cap", "int_bits", "memo", "nodes", "open", "pprint")

    def __init__(self, cap: int, int_bits: int, pprint: bool = False) -> None:
        self.cap = cap
        self.int_bits = int_bits
        self.pprint = pprint
        self.memo: dict[Any, Any] = {}
        self.open: set[int] = set()
        self.nodes = 0

    def digits(self, x: int) -> int:
        """Characters of ``str(x)``; an integer too large to print at all is refused."""
        bits = x.bit_length()
        if bits > 16 * self.int_bits:
            raise RenderLimitExceeded(
                f"printing an integer of {bits:,} bits, over 16 * max_int_bits={self.int_bits:,}",
                location="template",
            )
        return (bits * 1233 >> 12) + 2  # log10(2) ~ 1233 / 4096, plus sign and rounding

    def text(self, x: Any) -> int:
        """``len(str(x))``."""
        if isinstance(x, str):
            return len(x)
        if type(x) is int:
            return self.digits(x)
        if isinstance(x, Undefined):
            return 0
        return self.stats(x)[0]

    def stats(self, x: Any) -> tuple[int, int, int, int, int]:
        """For ``repr(x)``: its size; and what bounds ``pprint``'s line breaks and indents:
        the items printed, the nesting depth, the longest dict key's repr and (when measuring
        for ``pprint``) how many pieces its strings may be broken into."""
        if type(x) is str:
            breaks = 2 * runs(WHITESPACE_RUN, x, ASCII_SPACES) + 2 if self.pprint else 0
            return _str_repr_size(x), 0, 0, 0, breaks
        if isinstance(x, bool) or x is None:
            return 5, 0, 0, 0, 0
        if isinstance(x, int):
            return self.digits(x), 0, 0, 0, 0
        if isinstance(x, float):
            return 24, 0, 0, 0, 0
        if isinstance(x, Undefined):
            return 9, 0, 0, 0, 0
        if isinstance(x, str):  # Markup('...')
            return len(type(x).__name__) + 2 + _str_repr_size(str(x)), 0, 0, 0, 0
        if isinstance(x, (bytes, bytearray)):
            return 4 * len(x) + 14, 0, 0, 0, len(x) // 4 + 1
        items: Iterable[Any]
        if isinstance(x, dict):
            prefix, items, mapping = 2, x.items(), True
        elif isinstance(x, Namespace):
            attrs = object.__getattribute__(x, "_Namespace__attrs")
            prefix, items, mapping = 14, attrs.items(), True
        elif isinstance(x, (list, tuple)):
            prefix, items, mapping = 3, x, False
        elif isinstance(x, (set, frozenset)):
            prefix, items, mapping = 13, x, False
        elif isinstance(x, VIEWS):
            prefix, items, mapping = len(type(x).__name__) + 4, x, False
        else:
            return OPAQUE, 0, 0, 0, 0
        key = id(x)
        known: tuple[int, int, int, int, int] | None = self.memo.get(key)
        if known is not None:
            return known
        if key in self.open:
            return 5, 0, 0, 0, 0
        result = self._container_stats(key, prefix, items, mapping)
        self.memo[key] = result
        return result

    def _container_stats(
        self, key: int, prefix: int, items: Iterable[Any], mapping: bool
    ) -> tuple[int, int, int, int, int]:
        """``stats`` of a container (``key`` its id) printed as ``prefix`` plus ``items``."""
        self.open.add(key)
        try:
            size, elements, depth, longest, breaks = prefix, 0, 0, 0, 0
            count = 0
            for item in items:
                count += 1
                if mapping:
                    k, item = item
                    ks = self.stats(k)[0]
                    size += ks + 2
                    longest = max(longest, ks)
                s, e, d, lk, b = self.stats(item)
                size += s + 2
                elements += e + 1
                depth = max(depth, d)
                longest = max(longest, lk)
                breaks += b
                if size > self.cap:
                    raise Over
            self.nodes += count
        finally:
            self.open.discard(key)
        return size, elements, depth + 1, longest, breaks

    def json(
        self, x: Any, indent: int | None, item_sep: int, key_sep: int, ascii: bool, depth: int = 0
    ) -> int:
        """``len(json.dumps(x, ...))`` with ``indent`` (its length) and the separators' lengths;
        0 for what ``json.dumps`` refuses (it raises there itself)."""
        if isinstance(x, str):
            return _json_str_size(x, ascii)
        if x is None or isinstance(x, bool):
            return 5
        if isinstance(x, int):
            return self.digits(x)
        if isinstance(x, float):
            return 24
        if isinstance(x, (list, tuple)):
            mapping = False
        elif isinstance(x, dict):
            mapping = True
        else:
            return 0
        n = len(x)
        if not n:
            return 2
        key = id(x) if indent is None else (id(x), depth)  # indents depend on the depth
        known_size: int | None = self.memo.get(key)
        if known_size is not None:
            return known_size
        size = 2 + (n - 1) * item_sep
        if indent is not None:
            size += n + 1 + indent * (n * (depth + 1) + depth)
        for item in x.items() if mapping else x:
            if mapping:
                k, item = item
                size += self.json_key(k, ascii) + key_sep
            size += self.json(item, indent, item_sep, key_sep, ascii, depth + 1)
            if size > self.cap:
                raise Over
        self.nodes += n
        self.memo[key] = size
        return size

    def json_key(self, k: Any, ascii: bool) -> int:
        if isinstance(k, str):
            return _json_str_size(k, ascii)
        if k is None or isinstance(k, bool):
            return 7
        if isinstance(k, int):
            return self.digits(k) + 2
        if isinstance(k, float):
            return 26
        return 0


def param(args: list[Any], kwargs: dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    """A parameter as Python would bind it from a valid call (an invalid call fails in the
    operation itself, which then builds nothing)."""
    return args[index] if len(args) > index else kwargs.get(name, default)


def set_param(args: list[Any], kwargs: dict[str, Any], index: int, name: str, value: Any) -> None:
    if len(args) > index:
        args[index] = value
    else:
        kwargs[name] = value


def length_or_none(value: Any) -> int | None:
    try:
        return len(value)
    except TypeError:
        return None


def is_int(value: Any) -> bool:
    return isinstance(value, int)


_DIGIT_RUN = re.compile(r"\d+")
WHITESPACE_RUN = re.compile(r"\s+")
TITLE_SEPARATOR_RUN = re.compile(r"[-\s({\[<]+")  # jinja2's do_title splits on these
LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines


ASCII_SPACES = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"


def runs(pattern: re.Pattern[str], s: str, ascii_chars: str) -> int:
    """At least the number of times ``pattern`` matches in ``s`` (a run of the characters it
    matches): for an ASCII string, how many of ``ascii_chars`` it holds."""
    if s.isascii():
        return sum(s.count(c) for c in ascii_chars)
    return pattern.subn("", s)[1]


def digit_sum(spec: str, cap: int) -> int:
    """The sum of the numbers written in ``spec`` (a format spec: its width and precision)."""
    total = 0
    for run in _DIGIT_RUN.findall(spec):
        if len(run) > 18:
            return cap + 1
        total += int(run)
    return total


def line_count(s: str) -> int:
    return runs(LINE_BREAK, s, "\n\r\x0b\x0c\x1c\x1d\x1e") + 1


_QUICK_ITEMS = 64


def json_quick(x: Any, level: int = 1) -> tuple[int, int, int] | None:
    """For a small tree of plain JSON values (at most ``_QUICK_ITEMS`` items in all): its item
    count, the characters of its strings and keys, and its depth; None for anything else.
    (A JSON string takes at most 6 characters a character, 12 with ``ensure_ascii``.)"""
    kind = type(x)
    if kind is str:
        return 0, len(x), 0
    if kind is dict:
        pairs: Iterable[tuple[Any, Any]] = x.items()
    elif kind is list or kind is tuple:
        pairs = ((None, v) for v in x)
    elif (kind is int and x.bit_length() <= 64) or x is None or kind is bool or kind is float:
        return 0, 0, 0
    else:
        return None
    items, chars, depth = len(x), 0, level
    if items > _QUICK_ITEMS:
        return None
    for k, v in pairs:
        if k is not None and type(k) is not str:
            if type(k) is int and k.bit_length() > 64:
                return None
        elif k is not None:
            chars += len(k)
        kind = type(v)
        if kind is str:
            chars += len(v)
        elif kind is dict or kind is list or kind is tuple:
            sub = json_quick(v, level + 1)
            if sub is None:
                return None
            items += sub[0]
            chars += sub[1]
            depth = max(depth, sub[2])
            if items > _QUICK_ITEMS:
                return None
        elif not ((kind is int and v.bit_length() <= 64) or v is None or kind is bool or kind is float):
            return None
    return items, chars, depth


def too_deep() -> RenderLimitExceeded:
    return RenderLimitExceeded("a value is nested too deeply to measure", location="template")


def repr_size_of(measure: Measure) -> Callable[[Any], int]:
    return lambda value: measure.stats(value)[0]
