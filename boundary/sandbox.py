"""The Jinja environment chat templates run in.

Templates are untrusted code. They run in jinja2's ``ImmutableSandboxedEnvironment`` with
exactly the globals and filters transformers gives them (``raise_exception``,
``strftime_now``, a non-escaping ``tojson``, loop controls, ``trim_blocks`` /
``lstrip_blocks``), so the text is byte-for-byte what ``apply_chat_template`` renders.

On top of the sandbox (which refuses ``__class__``, ``__globals__``, other unsafe attributes
and mutation of inputs — here with an error at the first unsafe access, where jinja2 alone
would render an empty string — and gives templates no file, import or OS access; include /
import / extends are refused when compiling) every render runs under ``RenderLimits``:

- ``max_seconds``: wall time, checked at every loop step and every output chunk;
- ``max_loop_steps``: total ``{% for %}`` iterations (``range`` alone is capped at 100,000
  by jinja2, nested loops are not);
- ``max_output_chars``: size of the rendered text;
- ``max_string_chars``: size of any one string or list built by ``+``, ``*``, ``join`` or
  the padding methods, checked before it is built; ``**`` is refused for huge results.

Exceeding one raises ``RenderLimitExceeded``. What the limits do not bound: memory held by
values built in ways not listed above (e.g. ``~`` concatenation inside a loop) — each such
step is still a loop step and subject to the time limit.
"""

from __future__ import annotations

import json
import operator
import time
from dataclasses import dataclass
from datetime import datetime
from types import BuiltinMethodType
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from boundary.errors import RenderLimitExceeded


@dataclass(frozen=True, slots=True)
class RenderLimits:
    """Per-render resource limits; see the module docstring for what each bounds."""

    max_seconds: float = 10.0
    max_loop_steps: int = 2_000_000
    max_output_chars: int = 64 * 1024 * 1024
    max_string_chars: int = 16 * 1024 * 1024


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


def fixed_clock(now: datetime):
    """A ``strftime_now`` that always reads ``now``, for reproducible date-stamped prompts."""

    def strftime_fixed(format: str) -> str:
        return now.strftime(format)

    return strftime_fixed


class GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body inline, between two marks.

    transformers tracks these blocks by the length of the output so far, which is wrong when
    the block sits in a macro that printed first or in a ``{% set %}`` block; in-band marks
    travel with the text and stay right.
    """

    tags = {"generation"}  # noqa: RUF012 (jinja2's attribute)

    def parse(self, parser: jinja2.parser.Parser) -> list[nodes.Node]:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        from boundary.instrumentation import GENERATION, recorder_call

        return [
            nodes.Output([recorder_call(GENERATION, [nodes.Const(True)], lineno)], lineno=lineno),
            *body,
            nodes.Output([recorder_call(GENERATION, [nodes.Const(False)], lineno)], lineno=lineno),
        ]


_PADDING_METHODS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs"})
_DICT_ATTRIBUTES = frozenset(dir(dict))


# The callbacks the instrumentation places, as filters on the per-render recorder
# (``boundary.render._Recorder``); see ``boundary.instrumentation``.
def _probe(recorder: Any, test: Any, flipped: Any) -> str:
    return recorder.probe(test, flipped)


def _message(recorder: Any, site: int, item: Any) -> str:
    return recorder.message(site, item)


def _tick(recorder: Any) -> str:
    return recorder.deadline.tick()


def _generation(recorder: Any, start: bool) -> str:
    return recorder.generation(start)


class Sandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment plus size checks on string-building operations."""

    intercepted_binops = frozenset({"*", "**"})  # "+" is routed through _bnd_add by the instrumentation

    def __init__(self, limits: RenderLimits = DEFAULT_LIMITS) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[GenerationTag, jinja2.ext.loopcontrols],
        )
        self.limits = limits
        self._safe_attributes: dict[tuple[type, str], bool] = {}
        self.filters["tojson"] = tojson
        self.filters["join"] = self._checked_join(self.filters["join"])
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        from boundary import instrumentation as ins

        self.filters.update(
            {
                ins.PROBE: _probe,
                ins.MESSAGE: _message,
                ins.TICK: _tick,
                ins.GENERATION: _generation,
                ins.CHECKED_ADD: self._checked_add,
            }
        )

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

    def _too_big(self, what: str, size: int) -> RenderLimitExceeded:
        return RenderLimitExceeded(
            f"{what} would build {size:,} items, over max_string_chars={self.limits.max_string_chars:,}",
            location="template",
        )

    def _checked_add(self, left: Any, right: Any) -> Any:
        if (
            isinstance(left, (str, list))
            and isinstance(right, (str, list))
            and len(left) + len(right) > self.limits.max_string_chars
        ):
            raise self._too_big("'+'", len(left) + len(right))
        return left + right

    def call_binop(self, context: jinja2.runtime.Context, op: str, left: Any, right: Any) -> Any:
        cap = self.limits.max_string_chars
        if op == "*":
            seq, times = (left, right) if isinstance(left, (str, list)) else (right, left)
            if isinstance(seq, (str, list)) and isinstance(times, int) and len(seq) * times > cap:
                raise self._too_big("'*'", len(seq) * times)
            return operator.mul(left, right)
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and right > 0
            and abs(left) > 1
            and right * abs(left).bit_length() > 8 * cap
        ):
            raise self._too_big("'**'", right * abs(left).bit_length() // 8)
        return operator.pow(left, right)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        kind = type(__obj)
        if kind is jinja2.runtime.Macro:
            # The template's own macros are always safe, and take no context argument: this is
            # what the general path ends up doing for them.
            kwargs.pop("_block_vars", None)
            kwargs.pop("_loop_vars", None)
            return __obj(*args, **kwargs)
        if kind is BuiltinMethodType and __obj.__name__ in _PADDING_METHODS and type(__obj.__self__) is str:
            width = args[0] if args else kwargs.get("width", kwargs.get("tabsize", 0))
            if isinstance(width, int) and width > __self.limits.max_string_chars:
                raise __self._too_big(f"str.{__obj.__name__}", width)
        return super().call(__context, __obj, *args, **kwargs)

    def _checked_join(self, join: Any) -> Any:
        cap = self.limits.max_string_chars

        @jinja2.pass_eval_context
        def checked_join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> str:
            if isinstance(value, (list, tuple)):
                size = sum(len(v) for v in value if isinstance(v, str)) + len(d) * max(len(value) - 1, 0)
                if size > cap:
                    raise self._too_big("join", size)
            return join(eval_ctx, value, d, attribute)

        return checked_join


class Deadline:
    """Counts loop steps and watches the clock for one render."""

    __slots__ = ("_deadline", "_limits", "_steps")

    def __init__(self, limits: RenderLimits) -> None:
        self._limits = limits
        self._steps = 0
        self._deadline = time.monotonic() + limits.max_seconds

    def tick(self) -> str:
        self._steps += 1
        if self._steps > self._limits.max_loop_steps:
            raise RenderLimitExceeded(
                f"more than max_loop_steps={self._limits.max_loop_steps:,} loop iterations",
                location="template",
            )
        if not self._steps & 0xFF:
            self.check_time()
        return ""

    def check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise RenderLimitExceeded(
                f"render ran longer than max_seconds={self._limits.max_seconds}", location="template"
            )
