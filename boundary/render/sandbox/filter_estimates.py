"""What each builtin filter would build, estimated from its arguments: the filters over
sequences and values here (those that build text in ``text_estimates``), and the table of
how each filter is checked (``FILTER_CHECKS``).

Where it sits: inside the render stage's sandbox: ``filters`` and ``environment`` check filters
with it.

Each estimate takes (sandbox, args, kwargs), args[0] being the filter's value, may replace an
argument by an equivalent one it had to build to measure it (a generator's items as a list),
and returns an ``Estimate``. None of them builds what it measures."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from jinja2.filters import make_attrgetter
from markupsafe import Markup

from boundary.render.sandbox.limits import CHUNK, NOTHING, OBJECT, SEQUENCES, SLOT, Estimate
from boundary.render.sandbox.sizes import (
    VIEWS,
    Measure,
    Over,
    is_int,
    json_quick,
    length_or_none,
    param,
    set_param,
    too_deep,
)
from boundary.render.sandbox.text_estimates import (
    est_case,
    est_center,
    est_copy,
    est_escape,
    est_format_filter,
    est_indent,
    est_replace,
    est_string,
    est_striptags,
    est_title_filter,
    est_truncate,
    est_urlencode,
    est_urlize,
    est_wordcount,
    est_wordwrap,
    est_xmlattr,
)

if TYPE_CHECKING:
    from boundary.render.sandbox.base import SandboxBase as Sandbox


def _est_join_filter(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = env.materialized(args[0])
    if not isinstance(value, (list, tuple)):
        try:
            value = list(value)
        except TypeError:
            return NOTHING
    attribute = param(args, kwargs, 2, "attribute")
    if attribute is not None:  # join the attribute values, as do_join would
        getter = make_attrgetter(env, attribute)
        value = [getter(item) for item in value]
        set_param(args, kwargs, 2, "attribute", None)
    args[0] = value
    d = param(args, kwargs, 1, "d", "")
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
    n = length_or_none(value)
    if n is None:
        return NOTHING
    size = n * SLOT
    fresh = 0
    if isinstance(value, str) and not value.isascii():
        fresh = n * OBJECT  # characters past latin-1 become objects of their own
    elif isinstance(value, VIEWS[2]):
        fresh = n * (OBJECT + 2 * SLOT)  # (key, value) tuples
    return size, size + fresh, 0


def _est_reverse(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    if isinstance(value, str):
        return len(value), len(value), 0
    return NOTHING  # a reverse iterator; an iterator's items come back as a list, counted after


def _est_batch(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = length_or_none(value) or 0
    linecount = param(args, kwargs, 1, "linecount")
    fill = param(args, kwargs, 2, "fill_with")
    lines = linecount if is_int(linecount) else n
    pad = max(lines, 0) if fill is not None else 0
    batches = n // lines + 1 if lines > 0 else 2
    size = (min(n, max(lines, 0)) + pad) * SLOT
    return size, (n + pad) * SLOT + batches * OBJECT, n


def _est_slice(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = length_or_none(value) or 0
    slices = param(args, kwargs, 1, "slices")
    k = slices if is_int(slices) and slices > 0 else 1
    return (n // k + 2) * SLOT, n * SLOT + k * (OBJECT + SLOT), n + k


def _est_sort(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = length_or_none(value) or 0
    keys = 0
    if not param(args, kwargs, 2, "case_sensitive", False):
        keys = env.key_chars(value, param(args, kwargs, 3, "attribute"), multi=True)
    return n * SLOT, n * SLOT + keys, n


def _items_and_keys(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> tuple[int, int]:
    """``unique`` / ``min`` / ``max``: how many items, and the key chars a case-insensitive
    comparison builds (``case_sensitive`` and ``attribute`` are their 2nd and 3rd arguments)."""
    value = args[0] = env.materialized(args[0])
    n = length_or_none(value) or 0
    keys = 0
    if not param(args, kwargs, 1, "case_sensitive", False):
        keys = env.key_chars(value, param(args, kwargs, 2, "attribute"))
    return n, keys


def _est_unique(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n, keys = _items_and_keys(env, args, kwargs)
    return n * SLOT, 4 * n * SLOT + keys, n


def _est_min_max(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n, keys = _items_and_keys(env, args, kwargs)
    return 0, keys, n


def _est_groupby(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0] = env.materialized(args[0])
    n = length_or_none(value) or 0
    keys = 0
    attribute = param(args, kwargs, 1, "attribute")
    if not param(args, kwargs, 3, "case_sensitive", False):
        keys = env.key_chars(value, attribute, default=param(args, kwargs, 2, "default"))
    return n * SLOT, 3 * n * SLOT + n * OBJECT + keys, 2 * n


def _est_dictsort(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    if not isinstance(value, Mapping):
        return NOTHING
    n = len(value)
    keys = 0
    if not param(args, kwargs, 1, "case_sensitive", False):
        position = 1 if param(args, kwargs, 2, "by", "key") == "value" else 0
        for pair in value.items():
            if isinstance(pair[position], str):
                keys += len(pair[position]) + OBJECT
    return n * SLOT, n * (SLOT + OBJECT + 2 * SLOT) + keys, n


def _est_sum(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    items = env.materialized(args[0])
    attribute = param(args, kwargs, 1, "attribute")
    if attribute is not None and isinstance(items, Iterable):  # sum the attribute values, as do_sum would
        getter = make_attrgetter(env, attribute)
        items = [getter(item) for item in items]
        set_param(args, kwargs, 1, "attribute", None)
    args[0] = items
    n = length_or_none(items) or 0
    start = param(args, kwargs, 2, "start", 0)
    if not isinstance(start, SEQUENCES):
        return 0, 0, n
    # sequence concatenation: each partial sum is built anew
    weight = SLOT if isinstance(start, (list, tuple)) else 1
    running = built = len(start)
    for item in items:
        if isinstance(item, SEQUENCES):
            running += len(item)
        built += running
    return running * weight, built * weight, n


def est_tojson(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    indent = param(args, kwargs, 2, "indent")
    separators = param(args, kwargs, 3, "separators")
    if indent is None:
        width = None
    elif isinstance(indent, str):
        width = len(indent)
    elif is_int(indent):
        width = max(indent, 0)
    else:
        return NOTHING  # json.dumps refuses it
    if separators is None:
        item_sep, key_sep = ("," if width is not None else ", "), ": "
    else:
        try:
            item_sep, key_sep = separators
        except (TypeError, ValueError):
            return NOTHING
        if not (isinstance(item_sep, str) and isinstance(key_sep, str)):
            return NOTHING
    ascii = bool(param(args, kwargs, 1, "ensure_ascii", False))
    quick = json_quick(args[0])
    if quick is not None:  # a small tree: a bound from its shape is enough
        items, chars, depth = quick
        per_item = 48 + len(item_sep) + len(key_sep) + (0 if width is None else 2 + width * (depth + 1))
        bound = (12 if ascii else 6) * chars + (items + 1) * per_item
        if bound < CHUNK:
            return bound, bound, 0
    measure = env.measure()
    size = env.measured(measure, measure.json, args[0], width, len(item_sep), len(key_sep), ascii)
    return size, size, measure.nodes


def _est_pprint(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    cap = env.limits.max_string_chars
    measure = Measure(cap, env.limits.max_int_bits, pprint=True)
    try:
        size, elements, depth, longest, breaks = measure.stats(args[0])
    except Over:
        return cap + 1, cap + 1, measure.nodes
    except RecursionError:
        raise too_deep() from None
    # pprint breaks lines between items and between the pieces of long strings (each piece
    # quoted), and indents a line by at most its depth times the longest key's repr and
    # brackets; it re-measures each level's repr, hence the steps
    lines = elements + breaks + 1
    total = size + 2 * breaks + lines * (3 + depth * (longest + 4))
    return total, total, elements * (depth + 1) + measure.nodes


def _est_round(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    precision = param(args, kwargs, 1, "precision", 0)
    method = param(args, kwargs, 2, "method", "common")
    if is_int(precision):
        # round(int, -p) and the floor / ceil methods compute 10 ** p
        p = -precision if method == "common" else precision
        if (method != "common" or isinstance(value, int)) and p > 0:
            env.check_int_bits("round", p * 10 // 3 + 1)
    return NOTHING


# How each builtin filter is checked: its estimate, and how its input is prepared.
# "collect": an input without a length (a generator from another filter) is drawn into a list
# first, counted as it is drawn; "step": the input is passed through an iterator that counts
# a step per item (the filter's per-item work is the template's). Filters not listed build
# nothing (length, first, default, attr, items ...).
FILTER_CHECKS: dict[str, tuple[Callable[[Any, list[Any], dict[str, Any]], Estimate], str]] = {
    **dict.fromkeys(("upper", "lower", "capitalize"), (est_case, "")),
    **dict.fromkeys(("trim", "safe"), (est_copy, "")),
    **dict.fromkeys(("escape", "e", "forceescape"), (est_escape, "")),
    **dict.fromkeys(("max", "min"), (_est_min_max, "")),
    **dict.fromkeys(("map", "select", "reject", "selectattr", "rejectattr"), (lambda *_: NOTHING, "step")),
    "string": (est_string, ""),
    "title": (est_title_filter, ""),
    "center": (est_center, ""),
    "format": (est_format_filter, ""),
    "indent": (est_indent, ""),
    "join": (_est_join_filter, ""),
    "list": (_est_list, ""),
    "replace": (est_replace, ""),
    "reverse": (_est_reverse, "after"),
    "batch": (_est_batch, ""),
    "slice": (_est_slice, ""),
    "sort": (_est_sort, ""),
    "unique": (_est_unique, ""),
    "groupby": (_est_groupby, ""),
    "dictsort": (_est_dictsort, ""),
    "sum": (_est_sum, ""),
    "pprint": (_est_pprint, ""),
    "striptags": (est_striptags, ""),
    "truncate": (est_truncate, ""),
    "urlencode": (est_urlencode, ""),
    "urlize": (est_urlize, ""),
    "wordcount": (est_wordcount, ""),
    "wordwrap": (est_wordwrap, ""),
    "xmlattr": (est_xmlattr, ""),
    "round": (_est_round, ""),
    "int": (lambda *_: NOTHING, "after"),
}


# For these filters a plain string's estimate is its length times this (3: case mappings,
# exact for ASCII), checked without the general path.
PER_CHAR: dict[str, int] = {"trim": 1, "safe": 1, "string": 0, "upper": 3, "lower": 3, "capitalize": 3}
