"""Operators that build in proportion to their operands, size-checked before they run.

Where it sits: inside the render stage's sandbox: mixed into ``environment``'s ``Sandbox``.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from markupsafe import Markup

from boundary.render.sandbox.base import SandboxBase
from boundary.render.sandbox.limits import ACTIVE_DEADLINE, SEQUENCES, SLOT, SMALL


class OperatorsMixin(SandboxBase):
    """``+``, ``~``, slices (the instrumentation routes them here), ``*``, ``%``, ``//``, ``**``."""

    # -- operators -----------------------------------------------------------------------------
    def _checked_add(self, left: Any, right: Any) -> Any:
        """``left + right``, refusing a string, list or tuple over ``max_string_chars`` and an
        integer over ``max_int_bits`` before it is built (the instrumentation routes ``+``
        here)."""
        if type(left) is str and type(right) is str:  # the common case, checked inline
            size = len(left) + len(right)
            if size >= SMALL:  # below it nothing is checked: the common case stays inline
                self._charge_concatenation(size)
            return left + right
        if type(left) is int:
            small = self._small_int
            if type(right) is int and not (-small < left < small and -small < right < small):
                self.check_int_bits("'+'", max(left.bit_length(), right.bit_length()) + 1)
            return left + right
        if isinstance(left, SEQUENCES) and isinstance(right, SEQUENCES):
            if isinstance(left, Markup) != isinstance(right, Markup) and isinstance(right, str):
                size = (
                    (len(left) + 5 * len(right)) if isinstance(left, Markup) else (5 * len(left) + len(right))
                )
            else:
                size = len(left) + len(right)
                if isinstance(left, (list, tuple)):
                    size *= SLOT
            self.check("'+'", size, size)
        return left + right

    def checked_adds(self, left: Any, *rights: Any) -> Any:
        """``left + r1 + r2 + ...`` (the instrumentation routes chains of ``+`` here): plain
        strings joined at once, anything else added pairwise as ``_checked_add`` does."""
        size = len(left) if type(left) is str else -1
        for right in rights if size >= 0 else ():
            if type(right) is not str:
                size = -1
                break
            size += len(right)
        if size >= 0:
            if size >= SMALL:
                self._charge_concatenation(size)
            return left + "".join(rights)
        for right in rights:
            left = self._checked_add(left, right)
        return left

    def _charge_concatenation(self, size: int) -> None:
        """A string ``+`` of ``size`` chars: refused over the cap, else charged to the deadline."""
        if size > self._cap:
            raise self._too_big("'+'", size)
        deadline = ACTIVE_DEADLINE.get()
        if deadline is not None:
            deadline.charge(size)

    def checked_concat(self, parts: tuple[Any, ...]) -> str:
        """``~``: ``"".join(map(str, parts))`` (jinja2's ``str_join``), refused before it is
        built when over ``max_string_chars`` (the instrumentation routes ``~`` here)."""
        size = 0
        for part in parts:
            size += len(part) if type(part) is str else self.text(part)
        if size >= SMALL:
            self.check("'~'", size, size)
        return "".join(map(str, parts))

    def checked_slice(self, value: Any, start: Any = None, stop: Any = None, step: Any = None) -> Any:
        """``value[start:stop:step]``, counted against the render's limits (for the
        instrumentation to route slices through)."""
        key = slice(start, stop, step)
        if isinstance(value, SEQUENCES):
            try:
                n = len(range(*key.indices(len(value))))
            except (TypeError, ValueError):
                n = 0
            size = n * SLOT if isinstance(value, (list, tuple)) else n
            self.check("a slice", size, size)
        return value[key]

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        if operator_ == "*":
            if isinstance(left, int) and isinstance(right, int):
                bits = left.bit_length() + right.bit_length()
                if bits > self._small_int_bits:
                    self.check_int_bits("'*'", bits)
            else:
                seq, times = (left, right) if isinstance(left, SEQUENCES) else (right, left)
                if isinstance(seq, SEQUENCES) and isinstance(times, int) and times > 0:
                    size = len(seq) * times * (SLOT if isinstance(seq, (list, tuple)) else 1)
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
