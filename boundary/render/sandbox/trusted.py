"""The sandbox a trusted template runs in: the per-call checks its Jinja AST proves cannot
fire are skipped there; every render limit, and every other check, is kept.

Where it sits: inside the render stage's sandbox: ``boundary.render.template_run`` compiles a template
here when its source is a shipped one (``boundary.shipped.trust``), in ``Sandbox`` otherwise.

What a render checks per call, and what of it a template's AST can settle:

- ``getattr``: jinja2's attribute-safety verdict (``is_safe_attribute``, cached per type and
  name) and the ``str.format`` lookup on method values. A name is *plain* when it does not
  start with ``_`` and is none of the names jinja2 refuses by name on some type (``mro``, the
  generator, coroutine and async-generator frame and code attributes, the methods that mutate
  a list, dict, set or deque) nor ``format`` / ``format_map``. jinja2 refuses a plain name on
  no object except a code, frame or traceback object (which refuse every name), so for the
  plain names a template spells out (``x.name``) the verdict is skipped on any other object;
  and on a ``str``, ``dict``, ``list``, ``tuple``, number, ``bool`` or ``None`` (whose
  attributes are fixed builtins, never a ``str.format`` method under another name) the
  ``str.format`` lookup is skipped too. Any other name (from ``attr``, a format field), and
  any name on code, frame or traceback objects, takes ``Sandbox.getattr`` with every check.
  Soundness rests on the name alone, never on which template runs: trusting only shipped
  sources is a second line, not the argument.
- ``call``: whether a callee is ``str.format`` (however it was reached) or marked unsafe,
  and the size estimates of methods and globals. What a template calls can come from its
  inputs, so no AST settles these: they stay.
- ``+``, ``~``, slices, ``*``, ``%``, ``//``, ``**``, filters, printed values: size checks,
  that is render limits, so they stay, as do loop steps, output size and the clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import BuiltinMethodType, CodeType, FrameType, MethodType, TracebackType
from typing import Any

from jinja2 import nodes
from jinja2.sandbox import (
    UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
    UNSAFE_COROUTINE_ATTRIBUTES,
    UNSAFE_FUNCTION_ATTRIBUTES,
    UNSAFE_GENERATOR_ATTRIBUTES,
    UNSAFE_METHOD_ATTRIBUTES,
    modifies_known_mutable,
)

from boundary.render.sandbox.environment import _DICT_ATTRIBUTES, Sandbox
from boundary.render.sandbox.limits import DEFAULT_LIMITS, RenderLimits

_MUTABLE_EXAMPLES: tuple[Any, ...] = ([], {}, set())
REFUSED_BY_NAME = frozenset(
    {
        "mro",
        "format",  # str.format / format_map: wrapped by the sandbox, so always looked up
        "format_map",
        *UNSAFE_FUNCTION_ATTRIBUTES,
        *UNSAFE_METHOD_ATTRIBUTES,
        *UNSAFE_GENERATOR_ATTRIBUTES,
        *UNSAFE_COROUTINE_ATTRIBUTES,
        *UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
        *(n for obj in _MUTABLE_EXAMPLES for n in dir(obj) if modifies_known_mutable(obj, n)),
        # jinja2 lists deque's own as well (a deque matches its sequence rule first)
        "appendleft",
        "extendleft",
        "popleft",
        "rotate",
    }
)
"""Names jinja2 refuses by name on some type, and the names the sandbox wraps."""

OPAQUE_TYPES = frozenset({CodeType, FrameType, TracebackType})
"""Types jinja2 refuses every attribute of."""

BUILTIN_VALUES = frozenset({str, dict, list, tuple, int, float, bool, type(None)})
"""Types whose attributes are fixed builtins: none is a ``str.format`` method unless so named."""

ATTRIBUTE_VERDICT = "attribute verdict"
FORMAT_LOOKUP = "str.format lookup on builtin values"


def is_plain(name: str) -> bool:
    """Whether jinja2 allows ``name`` on every object but code, frame and traceback objects,
    and the sandbox wraps nothing under it."""
    return not name.startswith("_") and name not in REFUSED_BY_NAME


def plain_attributes(tree: nodes.Template) -> frozenset[str]:
    """The plain names the template spells out as ``x.name``."""
    return frozenset(n.attr for n in tree.find_all(nodes.Getattr) if is_plain(n.attr))


class TrustedSandbox(Sandbox):
    """``Sandbox`` with the attribute checks for ``names`` (plain, see ``is_plain``) skipped
    where they cannot fire; everything else, render limits included, is ``Sandbox``'s.

    Invariant: for every object and name, ``getattr`` returns what ``Sandbox.getattr`` does."""

    def __init__(self, limits: RenderLimits = DEFAULT_LIMITS, names: Iterable[str] = ()) -> None:
        super().__init__(limits)
        self.plain_names = frozenset(n for n in names if is_plain(n))
        self.skipped_checks: tuple[str, ...] = (ATTRIBUTE_VERDICT, FORMAT_LOOKUP) if self.plain_names else ()

    def getattr(self, obj: Any, attribute: str) -> Any:
        kind = type(obj)
        if kind is dict and attribute not in _DICT_ATTRIBUTES:  # as Sandbox.getattr
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        if attribute not in self.plain_names or kind in OPAQUE_TYPES:
            return super().getattr(obj, attribute)
        # From here, Sandbox.getattr's lookup (kept inline: the hottest call of a render) without
        # the verdict, which cannot refuse a plain name on these types.
        try:
            value = getattr(obj, attribute)
        except AttributeError:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return self.undefined(obj=obj, name=attribute)
        if kind not in BUILTIN_VALUES:
            # a namespace, a loop or an input object may hold a str.format method under any name
            value_kind = type(value)
            if value_kind is MethodType or value_kind is BuiltinMethodType:
                fmt = self.wrap_str_format(value)
                if fmt is not None:
                    return fmt
        return value
