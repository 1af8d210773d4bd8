"""The Jinja environment chat templates run in.

Templates are untrusted code. They run in jinja2's ``ImmutableSandboxedEnvironment`` with
exactly the globals and filters transformers gives them (``raise_exception``,
``strftime_now``, a non-escaping ``tojson``, loop controls, ``trim_blocks`` /
``lstrip_blocks``), so the text is byte-for-byte what ``apply_chat_template`` renders.

On top of the sandbox (which refuses ``__class__``, ``__globals__``, other unsafe attributes
and mutation of inputs — here with an error at the first unsafe access, where jinja2 alone
would render an empty string — and gives templates no file, import or OS access; include /
import / extends are refused when compiling) every render runs under ``RenderLimits``.
Running past one raises ``RenderLimitExceeded`` — never ``MemoryError``, ``RecursionError``
or a hang:

- ``max_string_chars``: what one operation may build, **estimated from its arguments before
  it runs**: ``+``, ``~``, ``*``, ``%`` (field widths and precisions, ``*`` ones too), every
  builtin filter, the ``str`` / ``bytes`` / ``int`` / ``list`` / ``dict`` methods,
  ``str.format`` / ``format_map`` (widths and precisions, nested ``{:{}}`` ones too),
  ``dict()``, ``namespace()``, ``lipsum()``, ``strftime_now()``, the output of a macro,
  ``caller()``, ``{% set %}`` or ``{% filter %}`` block, and the text of ``{{ value }}``,
  ``string``, ``~``, ``join``, ``tojson`` or ``pprint`` of a container (a value shared in
  several places counts as often as it prints). Sizes are characters; a list or tuple slot
  counts as 8, a dict entry as 32 and a fresh object as 64, so a size is close to bytes;
- ``max_total_chars``: those sizes summed over the render (results under 256 one by one
  excepted), so what a template keeps from one loop step to the next adds up to no more;
- ``max_loop_steps``: ``{% for %}`` iterations; and, counted apart, the items filters work
  through in Python (``map``, ``select``, ``sort``, ``unique``, ``groupby``, ``wordwrap``
  chunks, ``lipsum`` words, the values ``tojson`` / ``pprint`` / ``{{ }}`` walk ...);
- ``max_int_bits``: integers built by ``+``, ``*``, ``**``, ``round``, ``int`` and
  ``int.from_bytes``; ``*``, ``**``, ``//`` and ``%`` refuse larger operands, and printing
  refuses integers over 16 times it;
- ``max_output_chars``: size of the rendered text;
- ``max_seconds``: wall time, read at every 16th loop step, every 16th call, every 64 items a
  lazy filter draws and every ~1M characters built. Every operation between two readings is
  bounded by the sizes above, so a render overruns its deadline by no more than they take.

What is not checked one by one is bounded otherwise: a slice ``x[a:b]`` is never larger than
``x`` (``checked_slice`` counts it, once the instrumentation routes slices through it); ``-``
on integers adds at most a bit; list, tuple and dict displays hold what the template spells
out. Each runs once per loop step or call at most, so a render keeps at most
``max_loop_steps`` times what one of them builds that way. Inside ``{% autoescape true %}``
jinja2 escapes what it prints, up to 5 times the size measured.
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import datetime
from functools import update_wrapper
from types import BuiltinMethodType, FunctionType, MethodType
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.filters import make_attrgetter, make_multi_attrgetter
from jinja2.runtime import Macro, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter
from jinja2.utils import Namespace, generate_lorem_ipsum
from markupsafe import Markup

from boundary.errors import RenderLimitExceeded


@dataclass(frozen=True, slots=True)
class RenderLimits:
    """Per-render resource limits; see the module docstring for what each bounds."""

    max_seconds: float = 10.0
    max_loop_steps: int = 2_000_000
    max_output_chars: int = 64 * 1024 * 1024
    max_string_chars: int = 16 * 1024 * 1024
    max_total_chars: int = 256 * 1024 * 1024
    max_int_bits: int = 4096


DEFAULT_LIMITS = RenderLimits()


class TemplateRaised(jinja2.exceptions.TemplateError):
    """Raised by the template's own ``raise_exception(message)``."""


def raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    # Like transformers: no HTML escaping, and the json.dumps options exposed.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def fixed_clock(now: datetime) -> Callable[[str], str]:
    """A ``strftime_now`` that always reads ``now``, for reproducible date-stamped prompts."""

    def strftime_fixed(format: str) -> str:
        return now.strftime(format)

    return strftime_fixed


class GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` as transformers defines it: a call block whose
    body renders unchanged (so its scoping is transformers'). The instrumentation brackets the
    body with marks when it prints to direct output (``boundary.instrumentation``)."""

    tags = {"generation"}  # noqa: RUF012 (jinja2's attribute)

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @staticmethod
    def _generation_support(caller: Any) -> str:
        body: str = caller()
        return body


_DICT_ATTRIBUTES = frozenset(dir(dict))

# -- sizes -----------------------------------------------------------------------------------
# A size is in characters; containers and fresh objects are weighted so that a size is close
# to the bytes it takes (see the module docstring).
_SLOT = 8  # a list or tuple slot
_ENTRY = 32  # a dict entry
_OBJECT = 64  # a fresh object's header
_SMALL = 256  # results smaller than this are checked but not counted one by one (Sandbox.check)
_OPAQUE = 256  # str() of an object that is neither a container nor a scalar (a macro, a loop)
_CHUNK = 1 << 16  # long strings are measured in chunks this long
_SEQUENCES = (str, bytes, bytearray, list, tuple)
_PLAIN_OWNERS = frozenset({str, bytes, bytearray, int, list, tuple, dict})  # see Sandbox.call

Estimate = tuple[int, int, int]
"""What an operation would do: (size of the largest object it builds, size of all it builds,
Python-level steps it takes)."""

_NOTHING: Estimate = (0, 0, 0)

_WORK_PER_CLOCK = 1 << 20  # the clock is read after this much built
_PULSE_PER_CALL = 64  # calls and filter steps count towards a clock reading every 1024
_PULSE_PER_CLOCK = 1024


class Deadline:
    """One render's counters against its ``RenderLimits``: loop steps, what its checked
    operations built, and the clock.

    Invariant: a counter past its limit raises ``RenderLimitExceeded`` from the method that
    moved it; the clock is read at every 16th ``tick``, every 16th ``call``, every 1024
    filter steps and every ``_WORK_PER_CLOCK`` characters built."""

    __slots__ = ("_deadline", "_limits", "_next_reading", "_pulse", "_room", "_steps")

    def __init__(self, limits: RenderLimits) -> None:
        self._limits = limits
        self._steps = 0
        self._room = limits.max_total_chars  # what the render may still build
        self._next_reading = max(self._room - _WORK_PER_CLOCK, 0)
        self._pulse = 0
        self._deadline = time.monotonic() + limits.max_seconds

    def tick(self) -> str:
        """One ``{% for %}`` iteration."""
        self._steps += 1
        if self._steps > self._limits.max_loop_steps:
            raise RenderLimitExceeded(
                f"more than max_loop_steps={self._limits.max_loop_steps:,} loop iterations",
                location="template",
            )
        if not self._steps & 0xF:
            self.check_time()
        return ""

    def charge(self, size: int, steps: int = 0) -> None:
        """An operation that built ``size`` (see ``_SLOT``) in ``steps`` Python-level steps."""
        room = self._room - size - _OBJECT
        self._room = room
        if room < self._next_reading:
            if room < 0:
                raise RenderLimitExceeded(
                    f"the render built more than max_total_chars={self._limits.max_total_chars:,} in all",
                    location="template",
                )
            self._next_reading = max(room - _WORK_PER_CLOCK, 0)
            self.check_time()
        if steps:
            self.step(steps)

    def step(self, steps: int) -> None:
        """Items a filter works through in Python (counted apart from ``tick``'s)."""
        self._steps += steps
        if self._steps > self._limits.max_loop_steps:
            raise RenderLimitExceeded(
                f"filters iterated over more than max_loop_steps={self._limits.max_loop_steps:,} items",
                location="template",
            )
        self._pulse += steps
        if self._pulse >= _PULSE_PER_CLOCK:
            self._pulse = 0
            self.check_time()

    def call(self) -> None:
        """One call from template code (a macro, ``caller()``, a method, a global)."""
        self._pulse += _PULSE_PER_CALL
        if self._pulse >= _PULSE_PER_CLOCK:
            self._pulse = 0
            self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise RenderLimitExceeded(
                f"render ran longer than max_seconds={self._limits.max_seconds}", location="template"
            )


_ACTIVE: ContextVar[Deadline | None] = ContextVar("boundary_active_deadline", default=None)


def active_deadline() -> Deadline | None:
    """The ``Deadline`` of the sandboxed render running in this context, if one is."""
    return _ACTIVE.get()


def _release(token: Token[Deadline | None]) -> None:
    with contextlib.suppress(ValueError):  # a render abandoned and closed from another context
        _ACTIVE.reset(token)


class LimitedTemplate(jinja2.Template):
    """A sandbox template: each render (``generate``, ``render``) counts against a fresh
    ``Deadline``, which the sandbox's checks find through ``active_deadline``."""

    def generate(self, *args: Any, **kwargs: Any) -> Iterator[str]:
        # jinja2's own generate (sync), with the Deadline set around it rather than a generator
        # wrapped around jinja2's, which would cost a frame switch per chunk.
        if self.environment.is_async:
            yield from super().generate(*args, **kwargs)
            return
        ctx = self.new_context(dict(*args, **kwargs))
        token = _ACTIVE.set(Deadline(getattr(self.environment, "limits", DEFAULT_LIMITS)))
        try:
            yield from self.root_render_func(ctx)
        except Exception:
            yield self.environment.handle_exception()
        finally:
            _release(token)

    def render(self, *args: Any, **kwargs: Any) -> str:
        token = _ACTIVE.set(Deadline(getattr(self.environment, "limits", DEFAULT_LIMITS)))
        try:
            return super().render(*args, **kwargs)
        finally:
            _release(token)


class _Over(Exception):
    """A measurement passed its cap (internal to ``_Measure``)."""


def _str_repr_size(s: str) -> int:
    """``len(repr(s))``, exactly for short strings; a bound (quotes may be escaped either way)
    for long ones, measured chunk by chunk so the repr is never built whole."""
    if len(s) <= _CHUNK:
        return len(repr(s))
    if s.isascii() and s.isprintable():
        return len(s) + 2 + s.count("\\") + (s.count("'") if '"' in s else 0)
    return (
        2
        + s.count("'")
        + s.count('"')
        + sum(len(repr(s[i : i + _CHUNK])) - 2 for i in range(0, len(s), _CHUNK))
    )


def _json_str_size(s: str, ensure_ascii: bool) -> int:
    """``len(json.dumps(s, ensure_ascii=...))``, exactly, chunk by chunk for long strings."""
    encode = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    if len(s) <= _CHUNK:
        return len(encode(s))
    return 2 + sum(len(encode(s[i : i + _CHUNK])) - 2 for i in range(0, len(s), _CHUNK))


def _escaped_size(s: str) -> int:
    """``len(markupsafe.escape(s))`` for a plain string."""
    return len(s) + 4 * (s.count("&") + s.count('"') + s.count("'")) + 3 * (s.count("<") + s.count(">"))


_VIEWS: tuple[type[Any], ...] = (type({}.keys()), type({}.values()), type({}.items()))


class _Measure:
    """Sizes of ``str()``, ``repr()``, ``json.dumps`` and ``pprint`` output of a value, counted
    without building it.

    Invariants: a value shared in several places counts as often as it prints, while each
    container is walked once (sizes are memoized by identity, and the value measured keeps
    every container alive); a recursive reference counts as ``[...]``; measuring stops with
    ``_Over`` once a size passes ``cap``; ``nodes`` is the number of items walked."""

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
            breaks = 2 * _runs(_WHITESPACE_RUN, x, _ASCII_SPACES) + 2 if self.pprint else 0
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
        elif isinstance(x, _VIEWS):
            prefix, items, mapping = len(type(x).__name__) + 4, x, False
        else:
            return _OPAQUE, 0, 0, 0, 0
        key = id(x)
        known: tuple[int, int, int, int, int] | None = self.memo.get(key)
        if known is not None:
            return known
        if key in self.open:
            return 5, 0, 0, 0, 0
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
                    raise _Over
            self.nodes += count
        finally:
            self.open.discard(key)
        result = (size, elements, depth + 1, longest, breaks)
        self.memo[key] = result
        return result

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
        known: int | None = self.memo.get(key)
        if known is not None:
            return known
        size = 2 + (n - 1) * item_sep
        if indent is not None:
            size += n + 1 + indent * (n * (depth + 1) + depth)
        for item in x.items() if mapping else x:
            if mapping:
                k, item = item
                size += self.json_key(k, ascii) + key_sep
            size += self.json(item, indent, item_sep, key_sep, ascii, depth + 1)
            if size > self.cap:
                raise _Over
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


def _arg(args: list[Any], kwargs: dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    """A parameter as Python would bind it from a valid call (an invalid call fails in the
    operation itself, which then builds nothing)."""
    return args[index] if len(args) > index else kwargs.get(name, default)


def _set_arg(args: list[Any], kwargs: dict[str, Any], index: int, name: str, value: Any) -> None:
    if len(args) > index:
        args[index] = value
    else:
        kwargs[name] = value


def _length(value: Any) -> int | None:
    try:
        return len(value)
    except TypeError:
        return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int)


_DIGIT_RUN = re.compile(r"\d+")
_WHITESPACE_RUN = re.compile(r"\s+")
_TITLE_SEPARATOR_RUN = re.compile(r"[-\s({\[<]+")  # jinja2's do_title splits on these
_LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines


_ASCII_SPACES = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"


def _runs(pattern: re.Pattern[str], s: str, ascii_chars: str) -> int:
    """At least the number of times ``pattern`` matches in ``s`` (a run of the characters it
    matches): for an ASCII string, how many of ``ascii_chars`` it holds."""
    if s.isascii():
        return sum(s.count(c) for c in ascii_chars)
    return pattern.subn("", s)[1]


def _digit_sum(spec: str, cap: int) -> int:
    """The sum of the numbers written in ``spec`` (a format spec: its width and precision)."""
    total = 0
    for run in _DIGIT_RUN.findall(spec):
        if len(run) > 18:
            return cap + 1
        total += int(run)
    return total


# -- filter and method estimates --------------------------------------------------------------
# Each takes (sandbox, args, kwargs), args[0] being the filter's value or the method's object,
# may replace an argument by an equivalent one it had to build to measure it (a generator's
# items as a list), and returns an Estimate. None of them builds what it measures.


def _est_copy(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = env.text(args[0])
    return n, n, 0


def _est_string(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    return _NOTHING if isinstance(args[0], str) else _est_copy(env, args, kwargs)


def _est_case(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    n = len(value) if isinstance(value, (bytes, bytearray)) else env.text(value)
    if not isinstance(value, (bytes, bytearray)) and not (isinstance(value, str) and value.isascii()):
        n *= 3  # a character's case mapping is at most three characters ('ΐ'.upper())
    return n, n, 0


def _est_title_filter(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = _est_case(env, args, kwargs)[0]
    value = args[0]
    words = (
        2 * _runs(_TITLE_SEPARATOR_RUN, value, _ASCII_SPACES + "-({[<") + 1 if isinstance(value, str) else n
    )
    return n, 2 * n + words * _OBJECT, words


def _est_center(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = env.text(args[0])
    width = _arg(args, kwargs, 1, "width", 80)
    size = max(n, width) if _is_int(width) else n
    return size, size, 0


def _est_escape(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    n = _escaped_size(value) if isinstance(value, str) else 5 * env.text(value)
    return n, n, 0


def _est_format_filter(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    fmt = args[0]
    if not isinstance(fmt, str):
        n = env.text(fmt)
        if n > env.limits.max_string_chars:
            return n, n, 0
        args[0] = fmt = str(fmt)  # what do_format's soft_str makes of it
    size, fields = env.percent_size(fmt, kwargs or tuple(args[1:]))
    return size, size, fields


def _line_count(s: str) -> int:
    return _runs(_LINE_BREAK, s, "\n\r\x0b\x0c\x1c\x1d\x1e") + 1


def _est_indent(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    s = args[0]
    if not isinstance(s, str):
        return _NOTHING  # do_indent fails on anything else
    width = _arg(args, kwargs, 1, "width", 4)
    w = len(width) if isinstance(width, str) else max(width, 0) if _is_int(width) else 0
    n = len(s)
    lines = n + 1
    if w * lines > _SMALL:
        lines = _line_count(s)  # the lines of s + "\n", which do_indent indents
    size = n + 1 + lines * (w + 1)
    return size, 2 * size, lines


def _est_join_filter(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = env.materialized(args[0])
    if not isinstance(value, (list, tuple)):
        try:
            value = list(value)
        except TypeError:
            return _NOTHING
    attribute = _arg(args, kwargs, 2, "attribute")
    if attribute is not None:  # join the attribute values, as do_join would
        getter = make_attrgetter(env, attribute)
        value = [getter(item) for item in value]
        _set_arg(args, kwargs, 2, "attribute", None)
    args[0] = value
    d = _arg(args, kwargs, 1, "d", "")
    size = env.text(d) * max(len(value) - 1, 0)
    markup = isinstance(d, Markup)
    cap = env.limits.max_string_chars
    for item in value:
        if type(item) is str:
            size += len(item)
        else:
            markup = markup or isinstance(item, Markup)
            size += env.text(item)
        if size > cap:
            break
    if markup:  # under autoescape the other items are escaped
        size *= 5
    return size, size, len(value)


def _est_list(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = _length(value)
    if n is None:
        return _NOTHING
    size = n * _SLOT
    fresh = 0
    if isinstance(value, str) and not value.isascii():
        fresh = n * _OBJECT  # characters past latin-1 become objects of their own
    elif isinstance(value, _VIEWS[2]):
        fresh = n * (_OBJECT + 2 * _SLOT)  # (key, value) tuples
    return size, size + fresh, 0


def _est_replace(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    texts = []
    for index, name in ((0, "s"), (1, "old"), (2, "new")):
        value: object = _arg(args, kwargs, index, name, _NOTHING)
        if value is _NOTHING:
            return _NOTHING  # do_replace fails on the missing argument
        if not isinstance(value, str):
            n = env.text(value)
            if n > env.limits.max_string_chars:
                return n, n, 0
            value = str(value)  # do_replace makes the same string of it
            _set_arg(args, kwargs, index, name, value)
        texts.append(value)
    s, old, new = texts
    occurrences = len(s) + 1 if not old else s.count(old)
    count = _arg(args, kwargs, 3, "count")
    if _is_int(count) and count >= 0:
        occurrences = min(occurrences, count)
    size = len(s) + occurrences * max(len(new) - len(old), 0)
    if any(isinstance(t, Markup) for t in texts):
        size = 5 * (len(s) + occurrences * len(new))
    return size, size, 0


def _est_reverse(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    if isinstance(value, str):
        return len(value), len(value), 0
    return _NOTHING  # a reverse iterator; an iterator's items come back as a list, counted after


def _est_batch(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = _length(value) or 0
    linecount = _arg(args, kwargs, 1, "linecount")
    fill = _arg(args, kwargs, 2, "fill_with")
    lines = linecount if _is_int(linecount) else n
    pad = max(lines, 0) if fill is not None else 0
    batches = n // lines + 1 if lines > 0 else 2
    size = (min(n, max(lines, 0)) + pad) * _SLOT
    return size, (n + pad) * _SLOT + batches * _OBJECT, n


def _est_slice(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = _length(value) or 0
    slices = _arg(args, kwargs, 1, "slices")
    k = slices if _is_int(slices) and slices > 0 else 1
    return (n // k + 2) * _SLOT, n * _SLOT + k * (_OBJECT + _SLOT), n + k


def _est_sort(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = _length(value) or 0
    keys = 0
    if not _arg(args, kwargs, 2, "case_sensitive", False):
        keys = env.key_chars(value, _arg(args, kwargs, 3, "attribute"), multi=True)
    return n * _SLOT, n * _SLOT + keys, n


def _est_unique(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = _length(value) or 0
    keys = 0
    if not _arg(args, kwargs, 1, "case_sensitive", False):
        keys = env.key_chars(value, _arg(args, kwargs, 2, "attribute"))
    return n * _SLOT, 4 * n * _SLOT + keys, n


def _est_min_max(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = _length(value) or 0
    keys = 0
    if not _arg(args, kwargs, 1, "case_sensitive", False):
        keys = env.key_chars(value, _arg(args, kwargs, 2, "attribute"))
    return 0, keys, n


def _est_groupby(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = _length(value) or 0
    keys = 0
    attribute = _arg(args, kwargs, 1, "attribute")
    if not _arg(args, kwargs, 3, "case_sensitive", False):
        keys = env.key_chars(value, attribute, default=_arg(args, kwargs, 2, "default"))
    return n * _SLOT, 3 * n * _SLOT + n * _OBJECT + keys, 2 * n


def _est_dictsort(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    if not isinstance(value, Mapping):
        return _NOTHING
    n = len(value)
    keys = 0
    if not _arg(args, kwargs, 1, "case_sensitive", False):
        position = 1 if _arg(args, kwargs, 2, "by", "key") == "value" else 0
        for pair in value.items():
            if isinstance(pair[position], str):
                keys += len(pair[position]) + _OBJECT
    return n * _SLOT, n * (_SLOT + _OBJECT + 2 * _SLOT) + keys, n


def _est_sum(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    items = env.materialized(args[0])
    attribute = _arg(args, kwargs, 1, "attribute")
    if attribute is not None and isinstance(items, Iterable):  # sum the attribute values, as do_sum would
        getter = make_attrgetter(env, attribute)
        items = [getter(item) for item in items]
        _set_arg(args, kwargs, 1, "attribute", None)
    args[0] = items
    n = _length(items) or 0
    start = _arg(args, kwargs, 2, "start", 0)
    if not isinstance(start, _SEQUENCES):
        return 0, 0, n
    # sequence concatenation: each partial sum is built anew
    weight = _SLOT if isinstance(start, (list, tuple)) else 1
    running = built = len(start)
    for item in items:
        if isinstance(item, _SEQUENCES):
            running += len(item)
        built += running
    return running * weight, built * weight, n


def _est_tojson(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    indent = _arg(args, kwargs, 2, "indent")
    separators = _arg(args, kwargs, 3, "separators")
    if indent is None:
        width = None
    elif isinstance(indent, str):
        width = len(indent)
    elif _is_int(indent):
        width = max(indent, 0)
    else:
        return _NOTHING  # json.dumps refuses it
    if separators is None:
        item_sep, key_sep = ("," if width is not None else ", "), ": "
    else:
        try:
            item_sep, key_sep = separators
        except (TypeError, ValueError):
            return _NOTHING
        if not (isinstance(item_sep, str) and isinstance(key_sep, str)):
            return _NOTHING
    ascii = bool(_arg(args, kwargs, 1, "ensure_ascii", False))
    quick = _json_quick(args[0])
    if quick is not None:  # a small tree: a bound from its shape is enough
        items, chars, depth = quick
        per_item = 48 + len(item_sep) + len(key_sep) + (0 if width is None else 2 + width * (depth + 1))
        bound = (12 if ascii else 6) * chars + (items + 1) * per_item
        if bound < _CHUNK:
            return bound, bound, 0
    measure = env.measure()
    size = env.measured(measure, measure.json, args[0], width, len(item_sep), len(key_sep), ascii)
    return size, size, measure.nodes


_QUICK_ITEMS = 64


def _json_quick(x: Any, level: int = 1) -> tuple[int, int, int] | None:
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
            sub = _json_quick(v, level + 1)
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


def _est_pprint(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    cap = env.limits.max_string_chars
    measure = _Measure(cap, env.limits.max_int_bits, pprint=True)
    try:
        size, elements, depth, longest, breaks = measure.stats(args[0])
    except _Over:
        return cap + 1, cap + 1, measure.nodes
    except RecursionError:
        raise _too_deep() from None
    # pprint breaks lines between items and between the pieces of long strings (each piece
    # quoted), and indents a line by at most its depth times the longest key's repr and
    # brackets; it re-measures each level's repr, hence the steps
    lines = elements + breaks + 1
    total = size + 2 * breaks + lines * (3 + depth * (longest + 4))
    return total, total, elements * (depth + 1) + measure.nodes


def _est_striptags(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    if not isinstance(value, str):
        n = env.text(value)
        if n > env.limits.max_string_chars or hasattr(value, "__html__"):
            return n, n * 3, 0
        args[0] = value = str(value)  # what do_striptags makes of it
    n = len(value)
    tags = value.count("<")
    # markupsafe removes one comment or tag at a time, rebuilding the string each time
    return n, n * (tags + 3), tags


def _est_truncate(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    size = env.text(args[0]) + env.text(_arg(args, kwargs, 4, "end", "..."))
    return size, 2 * size, 0


def _url_size(env: Sandbox, value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return 3 * len(value)
    n = env.text(value)
    return 3 * n if isinstance(value, str) and value.isascii() else 12 * n  # %XX per UTF-8 byte


def _est_urlencode(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    if isinstance(value, str) or not isinstance(value, Iterable):
        n = _url_size(env, value)
        return n, n, 0
    value = args[0] = env.materialized(value)
    size = 0
    for pair in value.items() if isinstance(value, dict) else value:
        k, v = pair
        size += _url_size(env, k) + _url_size(env, v) + 2
    n = _length(value) or 0
    return size, size + n * _OBJECT, n


def _est_urlize(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    n = env.text(value)
    words = _runs(_WHITESPACE_RUN, value, _ASCII_SPACES) + 1 if isinstance(value, str) else n // 2 + 1
    per_link = 96 + env.text(_arg(args, kwargs, 3, "target")) + env.text(_arg(args, kwargs, 4, "rel"))
    size = 10 * n + words * per_link  # the text escaped, each link's URL twice, the attributes
    return size, size + words * _OBJECT, words


def _est_wordcount(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    n = env.text(value)
    words = n // 2 + 1  # a word and the character after it
    return words * _SLOT, n + words * (_SLOT + _OBJECT), 0


def _est_wordwrap(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    s = args[0]
    if not isinstance(s, str):
        return _NOTHING  # do_wordwrap fails on anything else
    n = len(s)
    wrapstring = _arg(args, kwargs, 3, "wrapstring")
    joint = env.text(env.newline_sequence if wrapstring is None else wrapstring)
    paragraphs = _line_count(s)
    lines = n + paragraphs  # every line but an empty paragraph's holds a character
    width = _arg(args, kwargs, 1, "width", 79)
    chunks = (
        2 * _runs(_WHITESPACE_RUN, s, _ASCII_SPACES)
        + s.count("-")
        + n // max(width if _is_int(width) else 1, 1)
        + 2
    )
    size = n + lines * joint
    return size, 2 * size + chunks * _OBJECT, chunks + paragraphs


def _est_xmlattr(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    d = args[0]
    if not isinstance(d, Mapping):
        return _NOTHING
    size = 1
    for k, v in d.items():
        if v is not None and not isinstance(v, Undefined):
            size += 5 * (env.text(k) + env.text(v)) + 4
    return size, size + len(d) * _OBJECT, len(d)


def _est_round(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    precision = _arg(args, kwargs, 1, "precision", 0)
    method = _arg(args, kwargs, 2, "method", "common")
    if _is_int(precision):
        # round(int, -p) and the floor / ceil methods compute 10 ** p
        p = -precision if method == "common" else precision
        if (method != "common" or isinstance(value, int)) and p > 0:
            env.check_int_bits("round", p * 10 // 3 + 1)
    return _NOTHING


def _est_lipsum(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = _arg(args, kwargs, 0, "n", 5)
    most = max(_arg(args, kwargs, 2, "min", 20), _arg(args, kwargs, 3, "max", 100))
    if not (_is_int(n) and _is_int(most)):
        return _NOTHING
    words = max(n, 0) * max(most, 0)
    size = words * 16 + max(n, 0) * 16  # a word is at most 14 characters and a separator
    return size, size + words * _OBJECT, words


def _est_strftime(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    fmt = _arg(args, kwargs, 0, "format")
    if not isinstance(fmt, str):
        return _NOTHING
    # %c is the longest directive (24 characters for 2); a directive may name a field width
    size = 16 * len(fmt) + _digit_sum(fmt, env.limits.max_string_chars) + 64
    return size, size, 0


def _est_dict(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = len(kwargs)
    for index, value in enumerate(args):
        value = args[index] = env.materialized(value)
        n += _length(value) or 0
    return n * _ENTRY, n * _ENTRY, 0


# -- methods -----------------------------------------------------------------------------------


def _est_pad(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)):
        return _NOTHING
    width = _arg(args, kwargs, 1, "width", 0)
    size = max(len(owner), width) if _is_int(width) else len(owner)
    return size, size, 0


def _est_expandtabs(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)):
        return _NOTHING
    tabsize = _arg(args, kwargs, 1, "tabsize", 8)
    tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
    size = len(owner) + tabs * (max(tabsize, 0) if _is_int(tabsize) else 0)
    return size, size, 0


def _est_join_method(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)) or len(args) < 2:
        return _NOTHING
    items = env.materialized(args[1])
    if not isinstance(items, (list, tuple)):
        try:
            items = list(items)
        except TypeError:
            return _NOTHING
    args[1] = items
    size = len(owner) * max(len(items) - 1, 0)
    escape = 5 if isinstance(owner, Markup) else 1
    for item in items:
        if isinstance(item, (str, bytes, bytearray)):
            size += len(item) if isinstance(item, Markup) else escape * len(item)
        elif escape > 1:
            size += 5 * env.text(item)
    return size, size, len(items)


def _est_replace_method(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)) or len(args) < 3:
        return _NOTHING
    old, new = args[1], args[2]
    escape = 5 if isinstance(owner, Markup) else 1
    if isinstance(owner, str):
        if escape > 1:
            old, new = str(old), str(new)
        if not (isinstance(old, str) and isinstance(new, str)):
            return _NOTHING
    elif not (isinstance(old, (bytes, bytearray)) and isinstance(new, (bytes, bytearray))):
        return _NOTHING
    occurrences = len(owner) + 1 if not old else owner.count(old)
    count = _arg(args, kwargs, 3, "count", -1)
    if _is_int(count) and count >= 0:
        occurrences = min(occurrences, count)
    size = len(owner) + occurrences * max(escape * len(new) - len(old), 0)
    return size, size, 0


def _est_translate(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, str) or len(args) < 2:
        return (len(owner), len(owner), 0) if isinstance(owner, (bytes, bytearray)) else _NOTHING
    table = args[1]
    values = (
        table.values() if isinstance(table, Mapping) else table if isinstance(table, (list, tuple)) else ()
    )
    longest = 1
    for v in values:
        if isinstance(v, str):
            longest = max(longest, len(v))
    size = len(owner) * longest * (5 if isinstance(owner, Markup) else 1)
    return size, size, 0


def _est_encode(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, str):
        return _NOTHING
    encoding = _arg(args, kwargs, 1, "encoding", "utf-8")
    plain = isinstance(encoding, str) and encoding.lower().replace("_", "-") in ("utf-8", "utf8")
    # UTF-8 takes at most 4 bytes a character; escaping codecs and error handlers at most 10
    size = (
        4 * len(owner) if plain and _arg(args, kwargs, 2, "errors", "strict") == "strict" else 10 * len(owner)
    )
    return size + 16, size + 16, 0


def _est_decode(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (bytes, bytearray)):
        return _NOTHING
    size = 2 * len(owner) + 16
    return size, size, 0


def _est_split(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)):
        return _NOTHING
    n = len(owner)
    sep = _arg(args, kwargs, 1, "sep")
    if isinstance(sep, (str, bytes, bytearray)) and sep:
        pieces = owner.count(sep) + 1  # type: ignore[arg-type]  # str and bytes mixed: TypeError, as split
    elif isinstance(owner, str) and n > _CHUNK:
        pieces = _runs(_WHITESPACE_RUN, owner, _ASCII_SPACES) + 1
    else:
        pieces = n // 2 + 1
    return pieces * _SLOT, n + pieces * (_SLOT + _OBJECT), 0


def _est_splitlines(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)):
        return _NOTHING
    n = len(owner)
    pieces = _line_count(owner) if isinstance(owner, str) else n + 1
    return pieces * _SLOT, n + pieces * (_SLOT + _OBJECT), 0


def _est_partition(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    n = len(owner) if isinstance(owner, (str, bytes, bytearray)) else 0
    return n, n + 3 * _OBJECT, 0


def _est_strip(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    n = len(owner) if isinstance(owner, (str, bytes, bytearray)) else 0
    return n, n, 0


def _est_hex(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (bytes, bytearray)):
        return _NOTHING
    sep = _arg(args, kwargs, 1, "sep", "")
    size = len(owner) * (2 + (len(sep) if isinstance(sep, (str, bytes)) else 0))
    return size, size, 0


def _est_to_bytes(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    length = _arg(args, kwargs, 1, "length", 1)
    size = max(length, 0) if _is_int(length) else 0
    return size, size, 0


def _est_from_bytes(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    data = _arg(args, kwargs, 1, "bytes")
    n = _length(data) or 0
    env.check_int_bits("int.from_bytes", 8 * n)
    return n, n, 0


def _est_container_copy(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    n = _length(owner) or 0
    size = n * (_ENTRY if isinstance(owner, Mapping) else _SLOT)
    return size, size, 0


def _est_fromkeys(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    if len(args) < 2:
        return _NOTHING
    keys = args[1] = env.materialized(args[1])
    size = (_length(keys) or 0) * _ENTRY
    return size, size, 0


def _est_markup_escape(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    if len(args) < 2:
        return _NOTHING
    return _est_escape(env, args[1:], kwargs)


_METHOD_ESTIMATES: dict[str, Callable[[Any, list[Any], dict[str, Any]], Estimate]] = {
    **dict.fromkeys(("capitalize", "casefold", "lower", "upper", "swapcase", "title"), _est_case),
    **dict.fromkeys(("center", "ljust", "rjust", "zfill"), _est_pad),
    **dict.fromkeys(("strip", "lstrip", "rstrip", "removeprefix", "removesuffix", "unescape"), _est_strip),
    **dict.fromkeys(("split", "rsplit"), _est_split),
    **dict.fromkeys(("partition", "rpartition"), _est_partition),
    "expandtabs": _est_expandtabs,
    "join": _est_join_method,
    "replace": _est_replace_method,
    "translate": _est_translate,
    "encode": _est_encode,
    "decode": _est_decode,
    "splitlines": _est_splitlines,
    "hex": _est_hex,
    "to_bytes": _est_to_bytes,
    "from_bytes": _est_from_bytes,
    "copy": _est_container_copy,
    "fromkeys": _est_fromkeys,
    "striptags": _est_striptags,
    "escape": _est_markup_escape,
}
_METHOD_OWNERS = (str, bytes, bytearray, int, list, tuple, dict, set, frozenset, type)

# How each builtin filter is checked: its estimate, and how its input is prepared.
# "collect": an input without a length (a generator from another filter) is drawn into a list
# first, counted as it is drawn; "step": the input is passed through an iterator that counts
# a step per item (the filter's per-item work is the template's). Filters not listed build
# nothing (length, first, default, attr, items ...).
_FILTER_CHECKS: dict[str, tuple[Callable[[Any, list[Any], dict[str, Any]], Estimate], str]] = {
    **dict.fromkeys(("upper", "lower", "capitalize"), (_est_case, "")),
    **dict.fromkeys(("trim", "safe"), (_est_copy, "")),
    **dict.fromkeys(("escape", "e", "forceescape"), (_est_escape, "")),
    **dict.fromkeys(("max", "min"), (_est_min_max, "")),
    **dict.fromkeys(("map", "select", "reject", "selectattr", "rejectattr"), (lambda *_: _NOTHING, "step")),
    "string": (_est_string, ""),
    "title": (_est_title_filter, ""),
    "center": (_est_center, ""),
    "format": (_est_format_filter, ""),
    "indent": (_est_indent, ""),
    "join": (_est_join_filter, ""),
    "list": (_est_list, ""),
    "replace": (_est_replace, ""),
    "reverse": (_est_reverse, "after"),
    "batch": (_est_batch, ""),
    "slice": (_est_slice, ""),
    "sort": (_est_sort, ""),
    "unique": (_est_unique, ""),
    "groupby": (_est_groupby, ""),
    "dictsort": (_est_dictsort, ""),
    "sum": (_est_sum, ""),
    "pprint": (_est_pprint, ""),
    "striptags": (_est_striptags, ""),
    "truncate": (_est_truncate, ""),
    "urlencode": (_est_urlencode, ""),
    "urlize": (_est_urlize, ""),
    "wordcount": (_est_wordcount, ""),
    "wordwrap": (_est_wordwrap, ""),
    "xmlattr": (_est_xmlattr, ""),
    "round": (_est_round, ""),
    "int": (lambda *_: _NOTHING, "after"),
}


# For these filters a plain string's estimate is its length times this (3: case mappings,
# exact for ASCII), checked without the general path.
_PER_CHAR: dict[str, int] = {"trim": 1, "safe": 1, "string": 0, "upper": 3, "lower": 3, "capitalize": 3}


def _too_deep() -> RenderLimitExceeded:
    return RenderLimitExceeded("a value is nested too deeply to measure", location="template")


class _SizedFormatterMixin:
    """``str.format`` that refuses a result over ``max_string_chars`` before building it: each
    field counts the numbers in its (resolved) spec — width, precision — and its value's size,
    and the fields of one call add up."""

    _env: Sandbox
    _escape_factor = 1
    _total = 0

    def vformat(self, format_string: str, args: Any, kwargs: Any) -> str:
        self._total = len(format_string)
        return super().vformat(format_string, args, kwargs)  # type: ignore[misc, no-any-return]

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion is not None:
            env = self._env
            measure = env.measure()
            size = env.measured(measure, measure.text if conversion == "s" else _repr_size_of(measure), value)
            env.check("str.format", size if conversion != "a" else 10 * size, size, measure.nodes)
        return super().convert_field(value, conversion)  # type: ignore[misc]

    def format_field(self, value: Any, format_spec: str) -> Any:
        env = self._env
        cap = env.limits.max_string_chars
        spec = _digit_sum(format_spec, cap) if isinstance(format_spec, str) else 0
        if isinstance(value, str):
            base = len(value)
        elif isinstance(value, bool) or value is None:
            base = 5
        elif isinstance(value, int):
            env.check_int_bits("str.format", value.bit_length())
            base = 2 * value.bit_length() + 8  # binary digits with '_' grouping, sign, prefix
        elif isinstance(value, float):
            base = 440  # 309 integer digits with ',' grouping, sign, exponent
        else:
            base = env.text(value)
        size = (spec + base + 8) * self._escape_factor
        self._total += size
        env.check("str.format", self._total, size, 1)
        return super().format_field(value, format_spec)  # type: ignore[misc]


def _repr_size_of(measure: _Measure) -> Callable[[Any], int]:
    return lambda value: measure.stats(value)[0]


class _SizedFormatter(_SizedFormatterMixin, SandboxedFormatter):  # type: ignore[misc]  # _env: a Sandbox
    pass


class _SizedEscapeFormatter(_SizedFormatterMixin, SandboxedEscapeFormatter):  # type: ignore[misc]
    _escape_factor = 5


class Sandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment plus the ``RenderLimits`` checks.

    Invariant: every operation a template can run that builds a string, list, dict or large
    integer in proportion to its arguments is checked against ``max_string_chars`` (and
    counted against the render's ``Deadline``) before it builds anything, so the rendered
    text of every template that stays within the limits is exactly jinja2's."""

    intercepted_binops = frozenset({"*", "**", "%", "//"})  # "+" and "~": the instrumentation
    template_class = LimitedTemplate

    def __init__(self, limits: RenderLimits = DEFAULT_LIMITS) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[GenerationTag, jinja2.ext.loopcontrols],
        )
        self.limits = limits
        self._cap = limits.max_string_chars
        self._small_int_bits = min(8 * _SMALL, limits.max_int_bits - 1)  # ints checked from here on
        self._small_int = 1 << self._small_int_bits
        self._safe_attributes: dict[tuple[type, str], bool] = {}
        for name, (estimate, mode) in _FILTER_CHECKS.items():
            self.filters[name] = self._checked_filter(name, self.filters[name], estimate, mode)
        self.filters["tojson"] = self._checked_tojson()
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        self.finalize = self._checked_output()
        self.concat = self._checked_concat_output()  # type: ignore[method-assign]
        # what calls of the globals build, by the callee (a function's code, for closures)
        self._call_estimates: dict[int, Callable[[Any, list[Any], dict[str, Any]], Estimate]] = {
            id(dict): _est_dict,
            id(Namespace): _est_dict,
            id(generate_lorem_ipsum.__code__): _est_lipsum,
            id(strftime_now.__code__): _est_strftime,
            id(_FIXED_CLOCK_CODE): _est_strftime,
        }

    # -- the checks ----------------------------------------------------------------------------
    def _too_big(self, what: str, size: int) -> RenderLimitExceeded:
        return RenderLimitExceeded(
            f"{what} would build a size of {size:,}, over max_string_chars={self.limits.max_string_chars:,}",
            location="template",
        )

    def check(self, what: str, size: int, built: int = 0, steps: int = 0) -> None:
        """Refuse an operation whose largest result (``size``) is over ``max_string_chars``;
        count all it builds and its steps against the render's ``Deadline`` (results under
        ``_SMALL`` one by one are bounded by the steps and calls that run them instead)."""
        if size > self._cap:
            raise self._too_big(what, size)
        if built >= _SMALL or steps:
            deadline = _ACTIVE.get()
            if deadline is not None:
                deadline.charge(built, steps)
            elif steps > self.limits.max_loop_steps:
                raise RenderLimitExceeded(
                    f"{what} would iterate over {steps:,} items, "
                    f"over max_loop_steps={self.limits.max_loop_steps:,}",
                    location="template",
                )

    def check_int_bits(self, what: str, bits: int) -> None:
        """Refuse an integer of more than ``max_int_bits`` bits."""
        if bits > self.limits.max_int_bits:
            raise RenderLimitExceeded(
                f"{what} would build an integer of {bits:,} bits, "
                f"over max_int_bits={self.limits.max_int_bits:,}",
                location="template",
            )
        if bits > 8 * _SMALL:
            self.check(what, bits // 8, bits // 8)

    def measure(self) -> _Measure:
        return _Measure(self.limits.max_string_chars, self.limits.max_int_bits)

    def measured(self, measure: _Measure, how: Callable[..., int], *args: Any) -> int:
        """``how(*args)`` (a ``_Measure`` method), or just over ``max_string_chars`` when the
        measure passed it."""
        try:
            return how(*args)
        except _Over:
            return self.limits.max_string_chars + 1
        except RecursionError:
            raise _too_deep() from None

    def text(self, value: Any) -> int:
        """``len(str(value))``, measured without building it."""
        if isinstance(value, str):
            return len(value)
        if type(value) is int:
            return len(str(value)) if value.bit_length() < 64 else self.measure().digits(value)
        if value is None or isinstance(value, (bool, float, Undefined)):
            return 24
        measure = self.measure()
        size = self.measured(measure, measure.text, value)
        if measure.nodes:
            self.check("str()", 0, 0, measure.nodes)
        return size

    def materialized(self, value: Any) -> Any:
        """``value``; or, when it is an iterator without a length (a generator from another
        filter), the list of what it yields, counted while it is drawn."""
        if isinstance(value, (str, list, tuple, dict, Undefined)) or _length(value) is not None:
            return value
        try:
            items = iter(value)
        except TypeError:
            return value
        out: list[Any] = []
        limit = self.limits.max_string_chars // _SLOT
        for item in items:
            out.append(item)
            if not len(out) & 0x3FF:
                if len(out) > limit:
                    raise self._too_big("drawing an iterator", len(out) * _SLOT)
                self.check("drawing an iterator", 0, 0x400 * _SLOT, 0x400)
        return out

    def stepped(self, value: Any) -> Any:
        """``value``, or for a long or unsized one an iterator over it that counts a step per
        item, so that a filter's per-item work stays under the clock."""
        n = _length(value)
        if n is not None and n <= _SMALL:
            if n:
                self.check("iteration", 0, 0, n)
            return value
        if n is None and not isinstance(value, Iterable):
            return value
        return self._stepping(value)

    def _stepping(self, value: Iterable[Any]) -> Iterator[Any]:
        count = 0
        for item in value:
            yield item
            count += 1
            if count == 64:
                count = 0
                self.check("iteration", 0, 0, 64)
                deadline = _ACTIVE.get()
                if deadline is not None:
                    deadline.check_time()

    def key_chars(self, items: Any, attribute: Any, multi: bool = False, default: Any = None) -> int:
        """What case-insensitive sorting or grouping of ``items`` copies: the sizes of their
        string keys (the items, or their ``attribute`` values)."""
        if not isinstance(items, Iterable):
            return 0
        if attribute is None:
            getter = None
        elif multi:
            getter = make_multi_attrgetter(self, attribute)
        else:
            getter = make_attrgetter(self, attribute, default=default)
        total = 0
        for item in items:
            keys = item if getter is None else getter(item)
            for key in keys if multi and getter is not None else (keys,):
                if isinstance(key, str):
                    total += len(key) + _OBJECT
        return total

    def percent_size(self, fmt: str | bytes | bytearray, values: Any) -> tuple[int, int]:
        """An upper bound on ``len(fmt % values)`` and the number of fields: each field's
        width, precision (``*`` ones read from the values) and value size."""
        text = fmt.decode("latin-1") if isinstance(fmt, (bytes, bytearray)) else str(fmt)
        escape = 5 if isinstance(fmt, Markup) else 1
        positional = values if isinstance(values, tuple) else (values,)
        mapping = (
            values if hasattr(type(values), "__getitem__") and not isinstance(values, (tuple, str)) else None
        )
        cap = self.limits.max_string_chars
        total, fields, argi, i, n = len(text), 0, 0, 0, len(text)

        def number(start: int) -> tuple[int, int]:
            end = start
            while end < n and "0" <= text[end] <= "9":
                end += 1
            digits = text[start:end]
            return (int(digits) if len(digits) <= 18 else cap + 1) if digits else 0, end

        while total <= cap:
            i = text.find("%", i)
            if i < 0 or i + 1 >= n:
                break
            start = i
            i += 1
            key = None
            if text[i] == "(":
                depth, j = 1, i + 1
                while j < n and depth:
                    depth += {"(": 1, ")": -1}.get(text[j], 0)
                    j += 1
                if depth:
                    break
                key, i = text[i + 1 : j - 1], j
            while i < n and text[i] in "-+ #0":
                i += 1
            if i < n and text[i] == "*":
                width = positional[argi] if argi < len(positional) else 0
                argi, i = argi + 1, i + 1
            else:
                width, i = number(i)
            precision = None
            if i < n and text[i] == ".":
                i += 1
                if i < n and text[i] == "*":
                    precision = positional[argi] if argi < len(positional) else 0
                    argi, i = argi + 1, i + 1
                else:
                    precision, i = number(i)
            if i < n and text[i] in "hlL":
                i += 1
            if i >= n:
                break
            conversion = text[i]
            i += 1
            total -= i - start  # the field's spec is replaced by what it formats
            if conversion == "%":
                total += 1
                continue
            fields += 1
            try:
                value = mapping[key] if key is not None and mapping is not None else positional[argi]
            except Exception:  # the formatting fails at this field itself, having built the rest
                break
            if key is None:
                argi += 1
            base = self._percent_field(conversion, value, precision if _is_int(precision) else None)
            total += max(abs(width) if _is_int(width) else 0, escape * base)
        return total, fields

    def _percent_field(self, conversion: str, value: Any, precision: int | None) -> int:
        if conversion in "sra":
            if conversion == "s":
                n = self.text(value)
            else:
                measure = self.measure()
                n = self.measured(measure, _repr_size_of(measure), value) * (10 if conversion == "a" else 1)
            return min(n, precision) if precision is not None and precision >= 0 else n
        if conversion in "diuoxX":
            if isinstance(value, int):
                bits = value.bit_length()
                self.check_int_bits(f"'%{conversion}'", bits)
            else:
                bits = 1030  # int() of a float
            return max(bits, precision or 0) + 4
        if conversion in "eEfFgG":
            return (precision if precision is not None else 6) + 330
        return 2

    # -- operators -----------------------------------------------------------------------------
    def _checked_add(self, left: Any, right: Any) -> Any:
        """``left + right``, refusing a string, list or tuple over ``max_string_chars`` and an
        integer over ``max_int_bits`` before it is built (the instrumentation routes ``+``
        here)."""
        if type(left) is str and type(right) is str:
            size = len(left) + len(right)
            if size >= _SMALL:
                self.check("'+'", size, size)
            return left + right
        if type(left) is int:
            small = self._small_int
            if type(right) is int and not (-small < left < small and -small < right < small):
                self.check_int_bits("'+'", max(left.bit_length(), right.bit_length()) + 1)
            return left + right
        if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
            if isinstance(left, Markup) != isinstance(right, Markup) and isinstance(right, str):
                size = (
                    (len(left) + 5 * len(right)) if isinstance(left, Markup) else (5 * len(left) + len(right))
                )
            else:
                size = len(left) + len(right)
                if isinstance(left, (list, tuple)):
                    size *= _SLOT
            self.check("'+'", size, size)
        return left + right

    def checked_concat(self, parts: tuple[Any, ...]) -> str:
        """``~``: ``"".join(map(str, parts))`` (jinja2's ``str_join``), refused before it is
        built when over ``max_string_chars`` (the instrumentation routes ``~`` here)."""
        size = 0
        for part in parts:
            size += len(part) if type(part) is str else self.text(part)
        if size >= _SMALL:
            self.check("'~'", size, size)
        return "".join(map(str, parts))

    def checked_slice(self, value: Any, start: Any = None, stop: Any = None, step: Any = None) -> Any:
        """``value[start:stop:step]``, counted against the render's limits (for the
        instrumentation to route slices through)."""
        key = slice(start, stop, step)
        if isinstance(value, _SEQUENCES):
            try:
                n = len(range(*key.indices(len(value))))
            except (TypeError, ValueError):
                n = 0
            size = n * _SLOT if isinstance(value, (list, tuple)) else n
            self.check("a slice", size, size)
        return value[key]

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        if operator_ == "*":
            if isinstance(left, int) and isinstance(right, int):
                bits = left.bit_length() + right.bit_length()
                if bits > self._small_int_bits:
                    self.check_int_bits("'*'", bits)
            else:
                seq, times = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
                if isinstance(seq, _SEQUENCES) and isinstance(times, int) and times > 0:
                    size = len(seq) * times * (_SLOT if isinstance(seq, (list, tuple)) else 1)
                    self.check("'*'", size, size)
            return operator.mul(left, right)
        if operator_ == "%":
            if isinstance(left, (str, bytes, bytearray)):
                size, fields = self.percent_size(left, right)
                self.check("'%'", size, size, fields)
            elif isinstance(left, int) and isinstance(right, int):
                self.check_int_bits("'%'", max(left.bit_length(), right.bit_length()))
            return operator.mod(left, right)
        if operator_ == "//":
            if isinstance(left, int) and isinstance(right, int):
                self.check_int_bits("'//'", max(left.bit_length(), right.bit_length()))
            return operator.floordiv(left, right)
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            self.check_int_bits("'**'", int(right * math.log2(abs(left))) + 1)
        return operator.pow(left, right)

    # -- filters, output, calls ----------------------------------------------------------------
    def _checked_filter(
        self,
        name: str,
        f: Callable[..., Any],
        estimate: Callable[[Any, list[Any], dict[str, Any]], Estimate],
        mode: str,
    ) -> Callable[..., Any]:
        """``f`` behind its estimate; the wrapper takes what ``f`` takes (context, eval
        context or environment first, when ``f`` does)."""
        pass_arg = getattr(f, "jinja_pass_arg", None)
        check = self.check
        what = f"the {name} filter"
        # what the filter builds from a plain string: its length times this (None: estimate)
        per_char = _PER_CHAR.get(name)

        def slow(lead: tuple[Any, ...], args: list[Any], kwargs: dict[str, Any]) -> Any:
            if mode == "step":
                args[0] = self.stepped(args[0])
            size, built, steps = estimate(self, args, kwargs)
            check(what, size, built, steps)
            result = f(*lead, *args, **kwargs)
            if mode == "after":
                self._check_result(what, result)
            return result

        if pass_arg is None and per_char == 0:  # string: a string is its own text

            def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
                if type(value) is str and not args and not kwargs:
                    return value  # what soft_str returns for it
                return slow((), [value, *args], kwargs)

        elif pass_arg is None and per_char is not None:

            def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
                if type(value) is str:
                    n = len(value)
                    if n >= _SMALL:
                        n *= per_char if per_char < 3 or not value.isascii() else 1
                        check(what, n, n)
                    return f(value, *args, **kwargs) if args or kwargs else f(value)
                return slow((), [value, *args], kwargs)

        elif pass_arg is None:

            def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
                return slow((), [value, *args], kwargs)

        else:

            def checked(first: Any, value: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                return slow((first,), [value, *args], kwargs)

            checked.jinja_pass_arg = pass_arg  # type: ignore[attr-defined]
        return update_wrapper(checked, f)

    def _checked_tojson(self) -> Callable[..., str]:
        """transformers' ``tojson`` behind its estimate (the filter chat templates call most,
        so its common call — a string or a small tree, default options — takes a short path)."""
        check = self.check

        def checked_tojson(
            x: Any,
            ensure_ascii: bool = False,
            indent: int | None = None,
            separators: Any = None,
            sort_keys: bool = False,
        ) -> str:
            quick = _json_quick(x) if indent is None and separators is None else None
            size = _CHUNK
            if quick is not None:  # the common call: a bound from the tree's shape
                size = (12 if ensure_ascii else 6) * quick[1] + (quick[0] + 1) * 52
                if size >= _SMALL:
                    check("the tojson filter", size, size)
            if size >= _CHUNK:
                size, built, steps = _est_tojson(self, [x, ensure_ascii, indent, separators], {})
                check("the tojson filter", size, built, steps)
            return tojson(x, ensure_ascii, indent, separators, sort_keys)

        return update_wrapper(checked_tojson, tojson)

    def _check_result(self, what: str, result: Any) -> None:
        """For the few filters whose result is only as large as an input already counted
        (``int``, ``reverse`` of an iterator): count it once built."""
        if type(result) is int:
            self.check_int_bits(what, result.bit_length())
        elif type(result) is list:
            self.check(what, len(result) * _SLOT, len(result) * _SLOT)

    def _checked_output(self) -> Callable[[Any], Any]:
        """``finalize``: the text of ``{{ value }}`` is measured before jinja2 builds it (a
        plain function, as it runs for every output)."""
        text, check = self.text, self.check

        def finalize(value: Any) -> Any:
            if type(value) is not str:
                size = text(value)
                check("printing a value", size, size)
            return value

        return finalize

    def _checked_concat_output(self) -> Callable[[Iterable[str]], str]:
        """``concat``: the output of a macro, ``caller()`` or block (a list of strings), or of a
        whole render (a generator), joined after its size is checked (a plain function, as it
        runs for every macro call)."""
        check, join, cap = self.check, "".join, self.limits.max_output_chars

        def concat(parts: Iterable[str]) -> str:
            if type(parts) is list:
                size = sum(map(len, parts))
                if size >= _SMALL:
                    check("a block's output", size, size)
                return join(parts)
            out: list[str] = []
            size = 0
            for part in parts:
                size += len(part)
                if size > cap:
                    raise RenderLimitExceeded(f"output passed max_output_chars={cap:,}", location="template")
                out.append(part)
            return join(out)

        return concat

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """jinja2's sandboxed ``str.format`` / ``format_map``, with the sizes checked."""
        if not isinstance(value, (MethodType, BuiltinMethodType)) or value.__name__ not in (
            "format",
            "format_map",
        ):
            return None
        f_self: Any = value.__self__
        if not isinstance(f_self, str):
            return None
        str_type: type[str] = type(f_self)
        is_format_map = value.__name__ == "format_map"
        formatter: SandboxedFormatter
        if isinstance(f_self, Markup):
            formatter = _SizedEscapeFormatter(self, escape=f_self.escape)
        else:
            formatter = _SizedFormatter(self)
        vformat = formatter.vformat

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs:
                    raise TypeError("format_map() takes no keyword arguments")
                if len(args) != 1:
                    raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
                kwargs = args[0]
                args = ()
            return str_type(vformat(f_self, args, kwargs))

        return update_wrapper(wrapper, value)

    def getattr(self, obj: Any, attribute: str) -> Any:
        # Fast path for the dicts templates read most (messages, tool calls): a key that is
        # not also a dict attribute resolves to the item, exactly as the general path would
        # after its failed attribute lookup.
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        try:
            value = getattr(obj, attribute)
        except AttributeError:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return self.undefined(obj=obj, name=attribute)
        fmt = self.wrap_str_format(value)
        if fmt is not None:
            return fmt
        # jinja2's safety verdict depends only on the object's type and the attribute name
        # (never on the value), so it is computed once per pair.
        key = (type(obj), attribute)
        safe = self._safe_attributes.get(key)
        if safe is None:
            safe = self._safe_attributes[key] = self.is_safe_attribute(obj, attribute, value)
        return value if safe else self.unsafe_undefined(obj, attribute)

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        # jinja2 returns an Undefined that renders as "" until used further; a template that
        # reaches for an unsafe attribute is refused outright instead.
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe"
        )

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = _ACTIVE.get()
        if deadline is not None:
            deadline.call()
        kind = type(__obj)
        if kind is Macro:
            # The template's own macros are always safe, and take no context argument: this is
            # what the general path ends up doing for them.
            kwargs.pop("_block_vars", None)
            kwargs.pop("_loop_vars", None)
            return __obj(*args, **kwargs)
        if kind is BuiltinMethodType or kind is MethodType:
            if __obj.__name__ in ("format", "format_map"):  # however it was reached
                wrapped = __self.wrap_str_format(__obj)
                if wrapped is not None:
                    kwargs.pop("_block_vars", None)
                    kwargs.pop("_loop_vars", None)
                    return wrapped(*args, **kwargs)
            estimate = _METHOD_ESTIMATES.get(__obj.__name__)
            owner = __obj.__self__
            if estimate is not None and isinstance(owner, _METHOD_OWNERS):
                subject = [owner, *args]
                size, built, steps = estimate(__self, subject, kwargs)
                __self.check(f"{__obj.__name__}()", size, built, steps)
                args = tuple(subject[1:])
            if kind is BuiltinMethodType and type(owner) in _PLAIN_OWNERS:
                # A builtin method of a plain value is always safely callable and takes no
                # context: this is what the general path ends up doing for it.
                kwargs.pop("_block_vars", None)
                kwargs.pop("_loop_vars", None)
                try:
                    return __obj(*args, **kwargs)
                except StopIteration:
                    return __self.undefined(
                        "value was undefined because a callable raised a StopIteration exception"
                    )
        elif (__obj is Namespace or __obj is dict) and not args and len(kwargs) < _SMALL // _ENTRY:
            pass  # namespace(a=..., b=...): a few entries
        else:
            estimate = __self._call_estimates.get(id(__obj.__code__ if kind is FunctionType else __obj))
            if estimate is not None:
                subject = list(args)
                size, built, steps = estimate(__self, subject, kwargs)
                __self.check(f"{getattr(__obj, '__name__', 'a call')}()", size, built, steps)
                args = tuple(subject)
        return super().call(__context, __obj, *args, **kwargs)


_FIXED_CLOCK_CODE = fixed_clock(datetime(2000, 1, 1)).__code__
