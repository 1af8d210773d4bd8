"""``%`` and ``str.format`` with their results' sizes checked before they are built.

Where it sits: inside the render stage's sandbox: mixed into ``environment``'s ``Sandbox``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import update_wrapper
from types import BuiltinMethodType, MethodType
from typing import TYPE_CHECKING, Any

from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter
from markupsafe import Markup

from boundary.render.sandbox.base import SandboxBase
from boundary.render.sandbox.sizes import digit_sum, is_int, repr_size_of

if TYPE_CHECKING:
    from boundary.render.sandbox.base import SandboxBase as Sandbox


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
            size = env.measured(measure, measure.text if conversion == "s" else repr_size_of(measure), value)
            env.check("str.format", size if conversion != "a" else 10 * size, size, measure.nodes)
        return super().convert_field(value, conversion)  # type: ignore[misc]

    def format_field(self, value: Any, format_spec: str) -> Any:
        env = self._env
        cap = env.limits.max_string_chars
        spec = digit_sum(format_spec, cap) if isinstance(format_spec, str) else 0
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


class SizedFormatter(_SizedFormatterMixin, SandboxedFormatter):  # type: ignore[misc]  # _env: a Sandbox
    pass


class SizedEscapeFormatter(_SizedFormatterMixin, SandboxedEscapeFormatter):  # type: ignore[misc]
    _escape_factor = 5


class FormattingMixin(SandboxBase):
    """The sandbox's ``%`` size bound and sized ``str.format``."""

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
        total, fields, argi, i = len(text), 0, 0, 0
        while total <= cap:
            i = text.find("%", i)
            if i < 0 or i + 1 >= len(text):
                break
            field = _percent_spec(text, i + 1, positional, argi, cap)
            if field is None:
                break
            total -= field.end - i  # the field's spec is replaced by what it formats
            i, argi = field.end, field.argi
            if field.conversion == "%":
                total += 1
                continue
            fields += 1
            try:
                key = field.key
                value = mapping[key] if key is not None and mapping is not None else positional[argi]
            except Exception:  # the formatting fails at this field itself, having built the rest
                break
            if key is None:
                argi += 1
            precision = field.precision if is_int(field.precision) else None
            base = self._percent_field(field.conversion, value, precision)
            total += max(abs(field.width) if is_int(field.width) else 0, escape * base)
        return total, fields

    def _percent_field(self, conversion: str, value: Any, precision: int | None) -> int:
        if conversion in "sra":
            if conversion == "s":
                n = self.text(value)
            else:
                measure = self.measure()
                n = self.measured(measure, repr_size_of(measure), value) * (10 if conversion == "a" else 1)
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
            formatter = SizedEscapeFormatter(self, escape=f_self.escape)
        else:
            formatter = SizedFormatter(self)
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


@dataclass(frozen=True, slots=True)
class _PercentSpec:
    """One ``%`` field's spec: mapping key, width and precision (as written or read from the
    values for ``*``), conversion character, where the spec ends and the next positional
    value's index."""

    key: str | None
    width: Any
    precision: Any
    conversion: str
    end: int
    argi: int


def _percent_spec(text: str, i: int, positional: tuple[Any, ...], argi: int, cap: int) -> _PercentSpec | None:
    """The field spec starting at ``text[i]`` (just after its ``%``); None if it is cut short."""
    n = len(text)

    def number(start: int) -> tuple[int, int]:
        end = start
        while end < n and "0" <= text[end] <= "9":
            end += 1
        digits = text[start:end]
        return (int(digits) if len(digits) <= 18 else cap + 1) if digits else 0, end

    key = None
    if text[i] == "(":
        depth, j = 1, i + 1
        while j < n and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        if depth:
            return None
        key, i = text[i + 1 : j - 1], j
    while i < n and text[i] in "-+ #0":
        i += 1
    if i < n and text[i] == "*":
        width: Any = positional[argi] if argi < len(positional) else 0
        argi, i = argi + 1, i + 1
    else:
        width, i = number(i)
    precision: Any = None
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
        return None
    return _PercentSpec(key, width, precision, text[i], i + 1, argi)
