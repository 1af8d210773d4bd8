"""The builtin filters, transformers' ``tojson``, ``{{ value }}`` output and block output
behind their estimates (``boundary.render.sandbox.filter_estimates``).

Where it sits: inside the render stage's sandbox: mixed into ``environment``'s ``Sandbox``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import update_wrapper
from typing import TYPE_CHECKING, Any, cast

from boundary.errors import RenderLimitExceeded
from boundary.render.sandbox.base import SandboxBase
from boundary.render.sandbox.filter_estimates import PER_CHAR, est_tojson
from boundary.render.sandbox.kept_json import ACTIVE_KEPT_JSON
from boundary.render.sandbox.limits import ACTIVE_DEADLINE, CHUNK, SLOT, SMALL, Estimate
from boundary.render.sandbox.sizes import json_quick
from boundary.render.sandbox.template_globals import tojson

if TYPE_CHECKING:
    from boundary.render.sandbox.base import SandboxBase as Sandbox


# The str method a filter applies to a plain string (jinja2's do_trim, do_upper, ... are
# ``soft_str(value).<method>(...)``, and soft_str returns a plain string itself).
_STR_METHODS: dict[str, Callable[..., str]] = {
    "trim": str.strip,
    "upper": str.upper,
    "lower": str.lower,
    "capitalize": str.capitalize,
}


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


class CheckedFiltersMixin(SandboxBase):
    """Wraps filters and output in the sandbox's checks."""

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
        per_char = PER_CHAR.get(name)

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
            checked = self._per_char_filter(name, f, per_char, slow)

        elif pass_arg is None:

            def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
                return slow((), [value, *args], kwargs)

        else:

            def checked(first: Any, value: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                return slow((first,), [value, *args], kwargs)

            checked.jinja_pass_arg = pass_arg  # type: ignore[attr-defined]
        return update_wrapper(checked, f)

    def _per_char_filter(
        self, name: str, f: Callable[..., Any], per_char: int, slow: Callable[..., Any]
    ) -> Callable[..., Any]:
        """A filter that builds ``per_char`` times a plain string's length (3: case mappings,
        exact for ASCII), checked inline for plain strings, by ``slow`` for anything else."""
        cap, what = self._cap, f"the {name} filter"
        method = _STR_METHODS.get(name)  # what f does to a plain string

        def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
            if type(value) is str:  # the common case, checked inline
                n = len(value)
                if n >= SMALL:
                    n *= per_char if per_char < 3 or not value.isascii() else 1
                    if n > cap:
                        raise self._too_big(what, n)
                    deadline = ACTIVE_DEADLINE.get()
                    if deadline is not None:
                        deadline.charge(n)
                if args or kwargs:
                    return f(value, *args, **kwargs)
                return method(value) if method is not None else f(value)
            return slow((), [value, *args], kwargs)

        return checked

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
            kept = ACTIVE_KEPT_JSON.get()
            options = (ensure_ascii, indent, separators, sort_keys)
            if kept is not None and not _hashable(options):  # e.g. separators given as a list
                kept = None
            replayed = None if kept is None else kept.get(x, options)
            if replayed is not None:  # the same object, unchanged: the same checks, the same text
                for what, size, built, steps in replayed[0]:
                    check(what, size, built, steps)
                return replayed[1]
            checks: list[tuple[str, int, int, int]] = []
            quick = json_quick(x) if indent is None and separators is None else None
            size = CHUNK
            if quick is not None:  # the common call: a bound from the tree's shape
                size = (12 if ensure_ascii else 6) * quick[1] + (quick[0] + 1) * 52
                if size >= SMALL:
                    checks.append(("the tojson filter", size, size, 0))
                    check("the tojson filter", size, size)
            if size >= CHUNK:
                size, built, steps = est_tojson(
                    cast("Sandbox", self), [x, ensure_ascii, indent, separators], {}
                )
                checks.append(("the tojson filter", size, built, steps))
                check("the tojson filter", size, built, steps)
            result = tojson(x, ensure_ascii, indent, separators, sort_keys)
            if kept is not None:
                kept.put(x, options, tuple(checks), result)
            return result

        return update_wrapper(checked_tojson, tojson)

    def _check_result(self, what: str, result: Any) -> None:
        """For the few filters whose result is only as large as an input already counted
        (``int``, ``reverse`` of an iterator): count it once built."""
        if type(result) is int:
            self.check_int_bits(what, result.bit_length())
        elif type(result) is list:
            self.check(what, len(result) * SLOT, len(result) * SLOT)

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
                if len(parts) == 1 and type(parts[0]) is str:
                    return parts[0]  # what join returns: nothing is built
                size = sum(map(len, parts))
                if size >= SMALL:
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
