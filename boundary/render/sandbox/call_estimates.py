"""What calls of ``str`` / ``bytes`` / ``int`` / ``list`` / ``dict`` methods and of the
template globals (``dict``, ``namespace``, ``lipsum``, ``strftime_now``) would build,
estimated from their arguments (as the filter estimates are).

Where it sits: inside the render stage's sandbox: ``environment`` checks method and global calls
with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from jinja2.utils import Namespace, generate_lorem_ipsum
from markupsafe import Markup

from boundary.render.sandbox.limits import CHUNK, ENTRY, NOTHING, OBJECT, SLOT, Estimate
from boundary.render.sandbox.sizes import (
    ASCII_SPACES,
    WHITESPACE_RUN,
    digit_sum,
    is_int,
    length_or_none,
    line_count,
    param,
    runs,
)
from boundary.render.sandbox.template_globals import FIXED_CLOCK_CODE, strftime_now
from boundary.render.sandbox.text_estimates import est_case, est_escape, est_striptags

if TYPE_CHECKING:
    from boundary.render.sandbox.base import SandboxBase as Sandbox


def est_lipsum(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = param(args, kwargs, 0, "n", 5)
    most = max(param(args, kwargs, 2, "min", 20), param(args, kwargs, 3, "max", 100))
    if not (is_int(n) and is_int(most)):
        return NOTHING
    words = max(n, 0) * max(most, 0)
    size = words * 16 + max(n, 0) * 16  # a word is at most 14 characters and a separator
    return size, size + words * OBJECT, words


def est_strftime(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    fmt = param(args, kwargs, 0, "format")
    if not isinstance(fmt, str):
        return NOTHING
    # %c is the longest directive (24 characters for 2); a directive may name a field width
    size = 16 * len(fmt) + digit_sum(fmt, env.limits.max_string_chars) + 64
    return size, size, 0


def est_dict(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = len(kwargs)
    for index, value in enumerate(args):
        value = args[index] = env.materialized(value)
        n += length_or_none(value) or 0
    return n * ENTRY, n * ENTRY, 0


# -- methods -----------------------------------------------------------------------------------


def _est_pad(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)):
        return NOTHING
    width = param(args, kwargs, 1, "width", 0)
    size = max(len(owner), width) if is_int(width) else len(owner)
    return size, size, 0


def _est_expandtabs(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)):
        return NOTHING
    tabsize = param(args, kwargs, 1, "tabsize", 8)
    tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
    size = len(owner) + tabs * (max(tabsize, 0) if is_int(tabsize) else 0)
    return size, size, 0


def _est_join_method(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)) or len(args) < 2:
        return NOTHING
    items = env.materialized(args[1])
    if not isinstance(items, (list, tuple)):
        try:
            items = list(items)
        except TypeError:
            return NOTHING
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
        return NOTHING
    old, new = args[1], args[2]
    escape = 5 if isinstance(owner, Markup) else 1
    if isinstance(owner, str):
        if escape > 1:
            old, new = str(old), str(new)
        if not (isinstance(old, str) and isinstance(new, str)):
            return NOTHING
    elif not (isinstance(old, (bytes, bytearray)) and isinstance(new, (bytes, bytearray))):
        return NOTHING
    occurrences = len(owner) + 1 if not old else owner.count(old)
    count = param(args, kwargs, 3, "count", -1)
    if is_int(count) and count >= 0:
        occurrences = min(occurrences, count)
    size = len(owner) + occurrences * max(escape * len(new) - len(old), 0)
    return size, size, 0


def _est_translate(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, str) or len(args) < 2:
        return (len(owner), len(owner), 0) if isinstance(owner, (bytes, bytearray)) else NOTHING
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
        return NOTHING
    encoding = param(args, kwargs, 1, "encoding", "utf-8")
    plain = isinstance(encoding, str) and encoding.lower().replace("_", "-") in ("utf-8", "utf8")
    # UTF-8 takes at most 4 bytes a character; escaping codecs and error handlers at most 10
    size = (
        4 * len(owner)
        if plain and param(args, kwargs, 2, "errors", "strict") == "strict"
        else 10 * len(owner)
    )
    return size + 16, size + 16, 0


def _est_decode(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (bytes, bytearray)):
        return NOTHING
    size = 2 * len(owner) + 16
    return size, size, 0


def _est_split(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)):
        return NOTHING
    n = len(owner)
    sep = param(args, kwargs, 1, "sep")
    if isinstance(sep, (str, bytes, bytearray)) and sep:
        pieces = owner.count(sep) + 1  # type: ignore[arg-type]  # str and bytes mixed: TypeError, as split
    elif isinstance(owner, str) and n > CHUNK:
        pieces = runs(WHITESPACE_RUN, owner, ASCII_SPACES) + 1
    else:
        pieces = n // 2 + 1
    return pieces * SLOT, n + pieces * (SLOT + OBJECT), 0


def _est_splitlines(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (str, bytes, bytearray)):
        return NOTHING
    n = len(owner)
    pieces = line_count(owner) if isinstance(owner, str) else n + 1
    return pieces * SLOT, n + pieces * (SLOT + OBJECT), 0


def _est_partition(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    n = len(owner) if isinstance(owner, (str, bytes, bytearray)) else 0
    return n, n + 3 * OBJECT, 0


def _est_strip(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    n = len(owner) if isinstance(owner, (str, bytes, bytearray)) else 0
    return n, n, 0


def _est_hex(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    if not isinstance(owner, (bytes, bytearray)):
        return NOTHING
    sep = param(args, kwargs, 1, "sep", "")
    size = len(owner) * (2 + (len(sep) if isinstance(sep, (str, bytes)) else 0))
    return size, size, 0


def _est_to_bytes(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    length = param(args, kwargs, 1, "length", 1)
    size = max(length, 0) if is_int(length) else 0
    return size, size, 0


def _est_from_bytes(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    data = param(args, kwargs, 1, "bytes")
    n = length_or_none(data) or 0
    env.check_int_bits("int.from_bytes", 8 * n)
    return n, n, 0


def _est_container_copy(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    owner = args[0]
    n = length_or_none(owner) or 0
    size = n * (ENTRY if isinstance(owner, Mapping) else SLOT)
    return size, size, 0


def _est_fromkeys(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    if len(args) < 2:
        return NOTHING
    keys = args[1] = env.materialized(args[1])
    size = (length_or_none(keys) or 0) * ENTRY
    return size, size, 0


def _est_markup_escape(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    if len(args) < 2:
        return NOTHING
    return est_escape(env, args[1:], kwargs)


METHOD_ESTIMATES: dict[str, Callable[[Any, list[Any], dict[str, Any]], Estimate]] = {
    **dict.fromkeys(("capitalize", "casefold", "lower", "upper", "swapcase", "title"), est_case),
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
    "striptags": est_striptags,
    "escape": _est_markup_escape,
}
METHOD_OWNERS = (str, bytes, bytearray, int, list, tuple, dict, set, frozenset, type)

PLAIN_OWNERS = frozenset({str, bytes, bytearray, int, list, tuple, dict})  # see Sandbox.call

# what calls of the globals build, by the callee (a function's code, for closures)
CALL_ESTIMATES: dict[int, Callable[[Any, list[Any], dict[str, Any]], Estimate]] = {
    id(dict): est_dict,
    id(Namespace): est_dict,
    id(generate_lorem_ipsum.__code__): est_lipsum,
    id(strftime_now.__code__): est_strftime,
    id(FIXED_CLOCK_CODE): est_strftime,
}
