"""The sandbox environment: transformers' chat-template environment plus the checks.

Where it sits: inside the render stage: the sandbox ``boundary.render.sandbox`` exports and
``boundary.render.template_run`` runs in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import BuiltinMethodType, FunctionType, MethodType
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.filters import make_attrgetter, make_multi_attrgetter
from jinja2.runtime import Macro, Undefined
from jinja2.utils import Namespace

from boundary.errors import RenderLimitExceeded
from boundary.render.sandbox.call_estimates import (
    CALL_ESTIMATES,
    METHOD_ESTIMATES,
    METHOD_OWNERS,
    PLAIN_OWNERS,
)
from boundary.render.sandbox.filter_estimates import FILTER_CHECKS
from boundary.render.sandbox.filters import CheckedFiltersMixin
from boundary.render.sandbox.formatting import FormattingMixin
from boundary.render.sandbox.limits import (
    ACTIVE_DEADLINE,
    DEFAULT_LIMITS,
    ENTRY,
    OBJECT,
    SLOT,
    SMALL,
    LimitedTemplate,
    RenderLimits,
)
from boundary.render.sandbox.operators import OperatorsMixin
from boundary.render.sandbox.sizes import Measure, Over, length_or_none, too_deep
from boundary.render.sandbox.template_globals import GenerationTag, raise_exception, strftime_now

_DICT_ATTRIBUTES = frozenset(dir(dict))


class _CodeGenerator(CodeGenerator):
    """jinja2's code generator, except that ``{{ x }}`` (outside autoescape) prints a plain
    string without calling ``finalize``, which measures only other values: it compiles to
    ``(v if type(v := x) is str else str(environment.finalize(v)))``, ``v`` a local no
    template name compiles to (jinja2's are ``l_*`` / ``t_*``)."""

    def _plain(self, frame: Frame, finalize: Any) -> bool:
        return not (frame.eval_ctx.volatile or frame.eval_ctx.autoescape) and finalize.src is not None

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        if not self._plain(frame, finalize):
            return super()._output_child_pre(node, frame, finalize)
        self.write("(_bnd_out if type(_bnd_out := ")
        return None

    def _output_child_post(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        if not self._plain(frame, finalize):
            return super()._output_child_post(node, frame, finalize)
        self.write(f") is str else str({finalize.src}_bnd_out)))")
        return None


class Sandbox(OperatorsMixin, FormattingMixin, CheckedFiltersMixin):
    """transformers' chat-template environment plus the ``RenderLimits`` checks.

    Invariant: every operation a template can run that builds a string, list, dict or large
    integer in proportion to its arguments is checked against ``max_string_chars`` (and
    counted against the render's ``Deadline``) before it builds anything, so the rendered
    text of every template that stays within the limits is exactly jinja2's."""

    intercepted_binops = frozenset({"*", "**", "%", "//"})  # "+" and "~": the instrumentation
    template_class = LimitedTemplate
    code_generator_class = _CodeGenerator

    def __init__(self, limits: RenderLimits = DEFAULT_LIMITS) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[GenerationTag, jinja2.ext.loopcontrols],
        )
        self.limits = limits
        self._cap = limits.max_string_chars
        self._small_int_bits = min(8 * SMALL, limits.max_int_bits - 1)  # ints checked from here on
        self._small_int = 1 << self._small_int_bits
        self._safe_attributes: dict[tuple[type, str], bool] = {}
        for name, (estimate, mode) in FILTER_CHECKS.items():
            self.filters[name] = self._checked_filter(name, self.filters[name], estimate, mode)
        self.filters["tojson"] = self._checked_tojson()
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        self.finalize = self._checked_output()
        self.concat = self._checked_concat_output()  # type: ignore[method-assign]
        # what calls of the globals build, by the callee (a function's code, for closures)
        self._call_estimates = CALL_ESTIMATES

    def __deepcopy__(self, memo: dict[int, Any]) -> Sandbox:
        # jinja2 gives every parsed node its environment: a copied node (the instrumentation
        # keeps each probed test unrewritten) refers to this one, never to a copy of it.
        return self

    # -- the checks ----------------------------------------------------------------------------
    def _too_big(self, what: str, size: int) -> RenderLimitExceeded:
        return RenderLimitExceeded(
            f"{what} would build a size of {size:,}, over max_string_chars={self.limits.max_string_chars:,}",
            location="template",
        )

    def check(self, what: str, size: int, built: int = 0, steps: int = 0) -> None:
        """Refuse an operation whose largest result (``size``) is over ``max_string_chars``;
        count all it builds and its steps against the render's ``Deadline`` (results under
        ``SMALL`` one by one are bounded by the steps and calls that run them instead)."""
        if size > self._cap:
            raise self._too_big(what, size)
        if built >= SMALL or steps:
            deadline = ACTIVE_DEADLINE.get()
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
        if bits > 8 * SMALL:
            self.check(what, bits // 8, bits // 8)

    def measure(self) -> Measure:
        return Measure(self.limits.max_string_chars, self.limits.max_int_bits)

    def measured(self, measure: Measure, how: Callable[..., int], *args: Any) -> int:
        """``how(*args)`` (a ``Measure`` method), or just over ``max_string_chars`` when the
        measure passed it."""
        try:
            return how(*args)
        except Over:
            return self.limits.max_string_chars + 1
        except RecursionError:
            raise too_deep() from None

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
        if isinstance(value, (str, list, tuple, dict, Undefined)) or length_or_none(value) is not None:
            return value
        try:
            items = iter(value)
        except TypeError:
            return value
        out: list[Any] = []
        limit = self.limits.max_string_chars // SLOT
        for item in items:
            out.append(item)
            if not len(out) & 0x3FF:
                if len(out) > limit:
                    raise self._too_big("drawing an iterator", len(out) * SLOT)
                self.check("drawing an iterator", 0, 0x400 * SLOT, 0x400)
        return out

    def stepped(self, value: Any) -> Any:
        """``value``, or for a long or unsized one an iterator over it that counts a step per
        item, so that a filter's per-item work stays under the clock."""
        n = length_or_none(value)
        if n is not None and n <= SMALL:
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
                deadline = ACTIVE_DEADLINE.get()
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
                    total += len(key) + OBJECT
        return total

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
        kind = type(value)
        if kind is MethodType or kind is BuiltinMethodType:  # final types: ``isinstance`` alike
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
        deadline = ACTIVE_DEADLINE.get()
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
            estimate = METHOD_ESTIMATES.get(__obj.__name__)
            owner = __obj.__self__
            if estimate is not None and isinstance(owner, METHOD_OWNERS):
                subject = [owner, *args]
                size, built, steps = estimate(__self, subject, kwargs)
                __self.check(f"{__obj.__name__}()", size, built, steps)
                args = tuple(subject[1:])
            if kind is BuiltinMethodType and type(owner) in PLAIN_OWNERS:
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
        elif (__obj is Namespace or __obj is dict) and not args and len(kwargs) < SMALL // ENTRY:
            pass  # namespace(a=..., b=...): a few entries
        else:
            estimate = __self._call_estimates.get(id(__obj.__code__ if kind is FunctionType else __obj))
            if estimate is not None:
                subject = list(args)
                size, built, steps = estimate(__self, subject, kwargs)
                __self.check(f"{getattr(__obj, '__name__', 'a call')}()", size, built, steps)
                args = tuple(subject)
        return super().call(__context, __obj, *args, **kwargs)
