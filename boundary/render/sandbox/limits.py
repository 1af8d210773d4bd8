"""The per-render limits (``RenderLimits``) and the counters that hold a render to them
(``Deadline``); the sizes every estimate is in (see ``boundary.render.sandbox``).

Where it sits: inside the render stage, at the bottom of the sandbox: every sandbox part and
``boundary.render.template_run`` (``Deadline``) read it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

import jinja2

from boundary.errors import RenderLimitExceeded


@dataclass(frozen=True, slots=True)
class RenderLimits:
    """Per-render resource limits; see the module docstring for what each bounds."""

    max_seconds: float = 10.0
    max_loop_steps: int = 2_000_000
    max_output_chars: int = 2 * 1024 * 1024  # tokenizing it: at most 600 B a char (docs/limits.md)
    max_string_chars: int = 16 * 1024 * 1024
    max_total_chars: int = 256 * 1024 * 1024
    max_int_bits: int = 4096


DEFAULT_LIMITS = RenderLimits()


# -- sizes -----------------------------------------------------------------------------------
# A size is in characters; containers and fresh objects are weighted so that a size is close
# to the bytes it takes (see the module docstring).
SLOT = 8  # a list or tuple slot
ENTRY = 32  # a dict entry
OBJECT = 64  # a fresh object's header
SMALL = 256  # results smaller than this are checked but not counted one by one (Sandbox.check)
OPAQUE = 256  # str() of an object that is neither a container nor a scalar (a macro, a loop)
CHUNK = 1 << 16  # long strings are measured in chunks this long
SEQUENCES = (str, bytes, bytearray, list, tuple)

Estimate = tuple[int, int, int]
"""What an operation would do: (size of the largest object it builds, size of all it builds,
Python-level steps it takes)."""

NOTHING: Estimate = (0, 0, 0)

_WORK_PER_CLOCK = 1 << 20  # the clock is read after this much built
_PULSE_PER_CALL = 64  # calls and filter steps count towards a clock reading every 1024
_PULSE_PER_CLOCK = 1024


class Deadline:
    """One render's counters against its ``RenderLimits``: loop steps, what its checked
    operations built, and the clock.

    Invariant: a counter past its limit raises ``RenderLimitExceeded`` from the method that
    moved it; the clock is read at every 16th ``tick``, every 16th ``call``, every 1024
    filter steps and every ``_WORK_PER_CLOCK`` characters built."""

    __slots__ = ("_deadline", "_limits", "_max_steps", "_next_reading", "_pulse", "_room", "_steps")

    def __init__(self, limits: RenderLimits) -> None:
        self._limits = limits
        self._max_steps = limits.max_loop_steps
        self._steps = 0
        self._room = limits.max_total_chars  # what the render may still build
        self._next_reading = max(self._room - _WORK_PER_CLOCK, 0)
        self._pulse = 0
        self._deadline = time.monotonic() + limits.max_seconds

    @property
    def limits(self) -> RenderLimits:
        return self._limits

    def tick(self) -> str:
        """One ``{% for %}`` iteration (``tick`` below is the same, for the hot path)."""
        self._steps += 1
        if self._steps > self._max_steps or not self._steps & 0xF:
            self._ticked()
        return ""

    def _ticked(self) -> None:
        """Every 16th loop step, or one past the limit."""
        if self._steps > self._max_steps:
            raise RenderLimitExceeded(
                f"more than max_loop_steps={self._max_steps:,} loop iterations", location="template"
            )
        self.check_time()

    def charge(self, size: int, steps: int = 0) -> None:
        """An operation that built ``size`` (see ``SLOT``) in ``steps`` Python-level steps."""
        room = self._room - size - OBJECT
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

    def check_tokenizing(self) -> None:
        """The clock, read while the render's output is tokenized: one deadline covers both."""
        if time.monotonic() > self._deadline:
            raise RenderLimitExceeded(
                f"rendering and tokenizing ran longer than max_seconds={self._limits.max_seconds}",
                location="tokenizer",
            )


ACTIVE_DEADLINE: ContextVar[Deadline | None] = ContextVar("boundary_active_deadline", default=None)


def active_deadline() -> Deadline | None:
    """The ``Deadline`` of the sandboxed render running in this context, if one is."""
    return ACTIVE_DEADLINE.get()


def tick(_: object = None) -> str:
    """One ``{% for %}`` iteration of the render active in this context (the instrumentation's
    loop step): ``Deadline.tick``, inlined, as it runs for every iteration."""
    deadline: Any = ACTIVE_DEADLINE.get()
    steps = deadline._steps = deadline._steps + 1
    if steps > deadline._max_steps or not steps & 0xF:
        deadline._ticked()
    return ""


def limited(deadline: Deadline) -> Token[Deadline | None]:
    """Make ``deadline`` the active one in this context; ``release`` the token when done."""
    return ACTIVE_DEADLINE.set(deadline)


def release(token: Token[Deadline | None]) -> None:
    with contextlib.suppress(ValueError):  # a render abandoned and closed from another context
        ACTIVE_DEADLINE.reset(token)


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
        token = ACTIVE_DEADLINE.set(Deadline(getattr(self.environment, "limits", DEFAULT_LIMITS)))
        try:
            yield from self.root_render_func(ctx)
        except Exception:
            yield self.environment.handle_exception()
        finally:
            release(token)

    def render(self, *args: Any, **kwargs: Any) -> str:
        token = ACTIVE_DEADLINE.set(Deadline(getattr(self.environment, "limits", DEFAULT_LIMITS)))
        try:
            return super().render(*args, **kwargs)
        finally:
            release(token)
