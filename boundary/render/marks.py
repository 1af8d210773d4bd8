"""The marks a render leaves in its text, and reading them back into character positions.

Where it sits: the render stage, after ``boundary.render.template_run`` (whose recorder writes the
marks while the instrumented template runs) and before ``boundary.tokenize.encode`` (which encodes the
``TextRendering`` read here); it imports only ``offsets`` and the sandbox's ``Deadline``.

A mark is ``OPEN + nonce + ":" + payload + CLOSE`` with a fresh random nonce per render, so
nothing in a message, tool or template kwarg can forge or move one. Payloads: ``g`` the
first divergent generation-prompt probe (U_end), ``m<site>.<index>`` a message loop beginning
message ``index``, ``s`` / ``e`` the start and end of a ``{% generation %}`` block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from boundary.offsets import CharOffset, Span
from boundary.render.sandbox import Deadline

OPEN = "\x00"
CLOSE = "\x01"


@dataclass(frozen=True, slots=True)
class TextRendering:
    """The rendered text and the character positions recorded while rendering it.

    ``input_end`` is U_end in characters, or None with ``input_end_reason`` saying why.
    ``message_starts[i]`` is where the template's message loop began message ``i`` (None if
    it never did, e.g. a system message the template renders outside its loop).
    ``generation_spans`` are the ``{% generation %}`` blocks printed to direct output.
    ``deadline`` is the render's clock, which tokenizing the text goes on reading (one
    ``max_seconds`` covers both); None for a text not rendered under limits.
    ``template_kwargs`` are the template kwargs that reached the template, where the caller
    recorded them (``Renderer.render_prepared`` does).
    """

    text: str
    input_end: CharOffset | None
    input_end_reason: str | None
    message_starts: tuple[CharOffset | None, ...]
    generation_spans: tuple[Span, ...]
    deadline: Deadline | None = field(default=None, repr=False, compare=False)
    template_kwargs: Mapping[str, Any] | None = field(default=None, compare=False)  # None: not known


@dataclass(frozen=True, slots=True)
class Splice:
    """A stretch of the raw text read before: ``size`` raw characters from ``start``, whose
    text without marks is ``text``; its only marks are the message marks of ``site``
    (``"m<site>"``) for messages ``0..len(starts)-1``, message ``j``'s at ``starts[j]`` in
    ``text``."""

    start: int
    size: int
    text: str
    site: str
    starts: list[int]


def read_marks(
    raw: str,
    nonce: str,
    n_messages: int,
    *,
    withdrawn: str | None,
    deadline: Deadline,
    splice: Splice | None = None,
) -> TextRendering:
    """The text without its marks, and the positions they marked. ``withdrawn`` is why U_end
    is unavailable (the template exposes none, or a probe could not be decided), else None.
    With ``splice``, its stretch of ``raw`` is taken as read: what reading it would give."""
    pieces: list[str] = []
    sites: dict[str, dict[str, int]] = {}  # "m<site>" -> "<index>" -> position, as written
    spans: list[Span] = []
    state: tuple[int, int | None, int | None] = (0, None, None)  # length, first divergence, open span
    if splice is None:
        state = _read(raw.split(nonce), pieces, sites, spans, state)
    else:
        state = _read(raw[: splice.start].split(nonce), pieces, sites, spans, state)
        length = state[0]
        pieces.append(splice.text)
        positions = sites.setdefault(splice.site, {})
        positions.update(zip(_indexes(len(splice.starts)), map(length.__add__, splice.starts), strict=True))
        state = (length + len(splice.text), state[1], state[2])
        state = _read(raw[splice.start + splice.size :].split(nonce), pieces, sites, spans, state)
    text = "".join(pieces)
    first_divergence = state[1]
    if withdrawn is not None:
        input_end, reason = None, withdrawn
    elif first_divergence is not None:
        input_end, reason = CharOffset(first_divergence), None
    else:
        # No probe disagreed: the generation flag changes nothing for this conversation.
        input_end, reason = CharOffset(len(text)), None
    starts = _message_starts(sites, n_messages)
    return TextRendering(text, input_end, reason, starts, tuple(spans), deadline)


def _read(
    chunks: list[str],
    pieces: list[str],
    sites: dict[str, dict[str, int]],
    spans: list[Span],
    state: tuple[int, int | None, int | None],
) -> tuple[int, int | None, int | None]:
    """Read one stretch of raw text split on the nonce (text, then per mark its payload,
    CLOSE and the text up to the next mark) into ``pieces``, ``sites`` and ``spans``, from
    ``state`` (the text's length so far, the first divergence, an open span's start)."""
    length, first_divergence, open_at = state
    pieces.append(chunks[0])
    length += len(chunks[0])
    for chunk in chunks[1:]:
        payload, _, rest = chunk.partition(CLOSE)
        kind = payload[:1]
        if kind == "m":
            site, _, index = payload.partition(".")
            if site in sites:
                sites[site][index] = length
            else:
                sites[site] = {index: length}
        elif kind == "g":
            if first_divergence is None:
                first_divergence = length
        elif kind == "s":
            open_at = length
        elif kind == "e" and open_at is not None:
            spans.append(Span(CharOffset(open_at), CharOffset(length)))
            open_at = None
        pieces.append(rest)
        length += len(rest)
    return length, first_divergence, open_at


def _message_starts(sites: dict[str, dict[str, int]], n: int) -> tuple[CharOffset | None, ...]:
    """Pick the loop that renders messages: the site whose marks spread over the most
    distinct positions (a loop that only scans messages leaves them all at one place), the
    higher site number on a tie. ``sites`` holds the marks' own text: ``"m<site>"`` and
    ``"<index>"`` as the recorder writes them (decimal, no sign or leading zero)."""
    if not sites:
        return (None,) * n
    if len(sites) == 1:
        (chosen,) = sites.values()
    else:
        best = max(sites, key=lambda s: (len(set(sites[s].values())), int(s[1:])))
        chosen = sites[best]
    return tuple(map(chosen.get, _indexes(n)))  # type: ignore[arg-type]  # CharOffset is int


def _indexes(n: int) -> tuple[str, ...]:
    """``"0"`` to ``str(n - 1)``, as the recorder writes them; cached up to ``_CACHED_INDEXES``."""
    return _cached_indexes(n) if n <= _CACHED_INDEXES else tuple(map(str, range(n)))


_CACHED_INDEXES = 1024  # 64 tuples of at most 1,024 short strings: at most about 4 MB


@lru_cache(maxsize=64)
def _cached_indexes(n: int) -> tuple[str, ...]:
    return tuple(map(str, range(n)))
