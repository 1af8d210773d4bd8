"""What the builtin filters that build text would build, estimated from their arguments
(see ``boundary.render.sandbox.filter_estimates`` for the conventions).

Where it sits: inside the render stage's sandbox: ``filter_estimates`` and ``call_estimates``
call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from jinja2.runtime import Undefined
from markupsafe import Markup

from boundary.render.sandbox.limits import NOTHING, OBJECT, SLOT, SMALL, Estimate
from boundary.render.sandbox.sizes import (
    ASCII_SPACES,
    TITLE_SEPARATOR_RUN,
    WHITESPACE_RUN,
    escaped_size,
    is_int,
    length_or_none,
    line_count,
    param,
    runs,
    set_param,
)

if TYPE_CHECKING:
    from boundary.render.sandbox.base import SandboxBase as Sandbox


def est_copy(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = env.text(args[0])
    return n, n, 0


def est_string(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    return NOTHING if isinstance(args[0], str) else est_copy(env, args, kwargs)


def est_case(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    n = len(value) if isinstance(value, (bytes, bytearray)) else env.text(value)
    if not isinstance(value, (bytes, bytearray)) and not (isinstance(value, str) and value.isascii()):
        n *= 3  # a character's case mapping is at most three characters ('ΐ'.upper())
    return n, n, 0


def est_title_filter(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = est_case(env, args, kwargs)[0]
    value = args[0]
    words = 2 * runs(TITLE_SEPARATOR_RUN, value, ASCII_SPACES + "-({[<") + 1 if isinstance(value, str) else n
    return n, 2 * n + words * OBJECT, words


def est_center(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    n = env.text(args[0])
    width = param(args, kwargs, 1, "width", 80)
    size = max(n, width) if is_int(width) else n
    return size, size, 0


def est_escape(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    n = escaped_size(value) if isinstance(value, str) else 5 * env.text(value)
    return n, n, 0


def est_format_filter(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    fmt = args[0]
    if not isinstance(fmt, str):
        n = env.text(fmt)
        if n > env.limits.max_string_chars:
            return n, n, 0
        args[0] = fmt = str(fmt)  # what do_format's soft_str makes of it
    size, fields = env.percent_size(fmt, kwargs or tuple(args[1:]))
    return size, size, fields


def est_indent(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    s = args[0]
    if not isinstance(s, str):
        return NOTHING  # do_indent fails on anything else
    width = param(args, kwargs, 1, "width", 4)
    w = len(width) if isinstance(width, str) else max(width, 0) if is_int(width) else 0
    n = len(s)
    lines = n + 1
    if w * lines > SMALL:
        lines = line_count(s)  # the lines of s + "\n", which do_indent indents
    size = n + 1 + lines * (w + 1)
    return size, 2 * size, lines


def est_replace(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    texts = []
    for index, name in ((0, "s"), (1, "old"), (2, "new")):
        value: object = param(args, kwargs, index, name, NOTHING)
        if value is NOTHING:
            return NOTHING  # do_replace fails on the missing argument
        if not isinstance(value, str):
            n = env.text(value)
            if n > env.limits.max_string_chars:
                return n, n, 0
            value = str(value)  # do_replace makes the same string of it
            set_param(args, kwargs, index, name, value)
        texts.append(value)
    s, old, new = texts
    occurrences = len(s) + 1 if not old else s.count(old)
    count = param(args, kwargs, 3, "count")
    if is_int(count) and count >= 0:
        occurrences = min(occurrences, count)
    size = len(s) + occurrences * max(len(new) - len(old), 0)
    if any(isinstance(t, Markup) for t in texts):
        size = 5 * (len(s) + occurrences * len(new))
    return size, size, 0


def est_striptags(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
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


def est_truncate(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    size = env.text(args[0]) + env.text(param(args, kwargs, 4, "end", "..."))
    return size, 2 * size, 0


def _url_size(env: Sandbox, value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return 3 * len(value)
    n = env.text(value)
    return 3 * n if isinstance(value, str) and value.isascii() else 12 * n  # %XX per UTF-8 byte


def est_urlencode(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    if isinstance(value, str) or not isinstance(value, Iterable):
        n = _url_size(env, value)
        return n, n, 0
    value = args[0] = env.materialized(value)
    size = 0
    for pair in value.items() if isinstance(value, dict) else value:
        k, v = pair
        size += _url_size(env, k) + _url_size(env, v) + 2
    n = length_or_none(value) or 0
    return size, size + n * OBJECT, n


def est_urlize(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    n = env.text(value)
    words = runs(WHITESPACE_RUN, value, ASCII_SPACES) + 1 if isinstance(value, str) else n // 2 + 1
    per_link = 96 + env.text(param(args, kwargs, 3, "target")) + env.text(param(args, kwargs, 4, "rel"))
    size = 10 * n + words * per_link  # the text escaped, each link's URL twice, the attributes
    return size, size + words * OBJECT, words


def est_wordcount(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    value = args[0]
    n = env.text(value)
    words = n // 2 + 1  # a word and the character after it
    return words * SLOT, n + words * (SLOT + OBJECT), 0


def est_wordwrap(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    s = args[0]
    if not isinstance(s, str):
        return NOTHING  # do_wordwrap fails on anything else
    n = len(s)
    wrapstring = param(args, kwargs, 3, "wrapstring")
    joint = env.text(env.newline_sequence if wrapstring is None else wrapstring)
    paragraphs = line_count(s)
    lines = n + paragraphs  # every line but an empty paragraph's holds a character
    width = param(args, kwargs, 1, "width", 79)
    chunks = (
        2 * runs(WHITESPACE_RUN, s, ASCII_SPACES)
        + s.count("-")
        + n // max(width if is_int(width) else 1, 1)
        + 2
    )
    size = n + lines * joint
    return size, 2 * size + chunks * OBJECT, chunks + paragraphs


def est_xmlattr(env: Sandbox, args: list[Any], kwargs: dict[str, Any]) -> Estimate:
    d = args[0]
    if not isinstance(d, Mapping):
        return NOTHING
    size = 1
    for k, v in d.items():
        if v is not None and not isinstance(v, Undefined):
            size += 5 * (env.text(k) + env.text(v)) + 4
    return size, size + len(d) * OBJECT, len(d)
