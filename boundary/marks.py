"""The marks a render leaves in its text, and reading them back into character positions.

Where it sits: the render stage, after ``boundary.template_run`` (whose recorder writes the
marks while the instrumented template runs) and before boundaries (which encode the
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
from boundary.sandbox import Deadline

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


def read_marks(
    raw: str, nonce: str, n_messages: int, *, withdrawn: str | None, deadline: Deadline
) -> TextRendering:
    """The text without its marks, and the positions they marked. ``withdrawn`` is why U_end
    is unavailable (the template exposes none, or a probe could not be decided), else None."""
    chunks = raw.split(nonce)
    pieces = [chunks[0]]
    length = len(chunks[0])
    first_divergence: int | None = None
    sites: dict[str, dict[str, int]] = {}  # "m<site>" -> "<index>" -> position, as written
    spans: list[Span] = []
    open_at: int | None = None
    for chunk in chunks[1:]:  # each: a mark's payload, CLOSE, then text up to the next mark
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
    text = "".join(pieces)

    if withdrawn is not None:
        input_end, reason = None, withdrawn
    elif first_divergence is not None:
        input_end, reason = CharOffset(first_divergence), None
    else:
        # No probe disagreed: the generation flag changes nothing for this conversation.
        input_end, reason = CharOffset(len(text)), None
    starts = _message_starts(sites, n_messages)
    return TextRendering(text, input_end, reason, starts, tuple(spans), deadline)


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


@lru_cache(maxsize=256)
def _indexes(n: int) -> tuple[str, ...]:
    """``"0"`` to ``str(n - 1)``, as the recorder writes them."""
    return tuple(map(str, range(n)))
