"""Encoding a rendered text into a ``Rendering``: token ids and the boundaries U_end and P_end.

Where it sits: after render (it encodes the ``TextRendering`` that ``boundary.render.marks`` reads)
and before the renderer, which returns the ``Rendering`` (``boundary.tokenize.rendering``) built here.

``encode_rendering`` is the tokenization stage: one encode of the full text (exactly the
ids ``apply_chat_template(tokenize=True)`` returns), then each char boundary floored to
the deepest token boundary at or before it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from boundary.errors import TokenizerError
from boundary.offsets import (
    Boundary,
    CharOffset,
    PiecewiseTokenMap,
    ShiftedTokenMap,
    Span,
    TokenMap,
    TokenOffset,
    locate,
)
from boundary.render.marks import TextRendering
from boundary.tokenize.rendering import Rendering
from boundary.tokenize.segments import Clock
from boundary.tokenize.tokenizer import Tokenizer

Encoder = Callable[[str, Clock | None], tuple[list[int], TokenMap]]
"""An encoder hook: a rendered text's ids (exactly the tokenizer's) and token map, the clock
read while encoding. Sessions pass one that reuses the previous request's ids."""


def encode_rendering(
    rendered: TextRendering, tokenizer: Tokenizer, encoder: Encoder | None = None
) -> Rendering:
    """The tokenization stage, under the render's deadline (``RenderLimitExceeded`` past it):
    the text encoded by ``encoder`` where given, else by ``tokenizer`` in full."""
    if encoder is None:
        enc = tokenizer.encode(rendered.text, clock=rendered.deadline)
        ids, token_map = enc.ids, enc.token_map
    else:
        ids, token_map = encoder(rendered.text, rendered.deadline)
    result = assemble(rendered, rendered.text, ids, token_map, lambda c: c)
    if rendered.deadline is not None:  # placing U_end may have encoded one segment again
        rendered.deadline.check_tokenizing()
    return result


# -- sanitize_control_tokens -------------------------------------------------------------------
# As transformers does it: control tokens found in user-supplied strings are wrapped in two
# private-use markers before rendering; afterwards the text is split on the markers, marked
# tokens are encoded as plain text and the rest normally, each piece after the first behind
# a "\n" that is then dropped (so SentencePiece adds no prefix space).
CONTROL_START = "\U000f0000"
CONTROL_END = "\U000f0001"


def mark_control_tokens(obj: object, pattern: re.Pattern[str]) -> Any:
    """Wrap control tokens in every string of ``obj`` (dict keys excepted) in markers; ``obj``'s
    shape is kept, tuples coming back as lists."""
    if isinstance(obj, str):
        obj = obj.replace(CONTROL_START, "").replace(CONTROL_END, "")
        return pattern.sub(f"{CONTROL_START}\\g<0>{CONTROL_END}", obj)
    if isinstance(obj, dict):
        return {k: mark_control_tokens(v, pattern) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [mark_control_tokens(v, pattern) for v in obj]
    return obj


def encode_rendering_sanitized(
    rendered: TextRendering, tokenizer: Tokenizer, pattern: re.Pattern[str]
) -> Rendering:
    markers = re.compile(f"{CONTROL_START}({pattern.pattern}){CONTROL_END}|[{CONTROL_START}{CONTROL_END}]")
    parts = markers.split(rendered.text)  # [text, token-or-None, text, token-or-None, ..., text]
    newline = tokenizer.encode_ids("\n")
    ids: list[int] = []
    pieces: list[tuple[CharOffset, TokenOffset, TokenMap]] = []
    raw_starts: list[int] = []  # where each kept piece starts in the marked text
    final_starts: list[int] = []
    raw_pos = final_pos = 0
    for i, part in enumerate(parts):
        if part is None:  # a lone marker: dropped, but it still cuts the text
            raw_pos += 1
            continue
        as_text = i % 2 == 1
        if as_text:
            raw_pos += 1  # the opening marker
        if part:
            piece_ids, piece_map = _encode_piece(tokenizer, part, as_text, first=(i == 0), newline=newline)
            if rendered.deadline is not None:
                rendered.deadline.check_tokenizing()
            if as_text and tokenizer.token_to_id(part) in piece_ids:
                raise TokenizerError(f"can't sanitize {part!r}: the tokenizer produces it from plain text")
            pieces.append((CharOffset(final_pos), TokenOffset(len(ids)), piece_map))
            raw_starts.append(raw_pos)
            final_starts.append(final_pos)
            ids.extend(piece_ids)
        raw_pos += len(part) + (1 if as_text else 0)
        final_pos += len(part)
    text = "".join(p for i, p in enumerate(parts) if p)

    def to_final(raw: CharOffset) -> CharOffset:
        k = bisect_right(raw_starts, raw) - 1
        if k < 0:
            return CharOffset(0)
        return CharOffset(final_starts[k] + min(raw - raw_starts[k], _piece_len(pieces, k, final_pos)))

    return assemble(rendered, text, ids, PiecewiseTokenMap(pieces, len(text), len(ids)), to_final)


def _piece_len(pieces: list[tuple[CharOffset, TokenOffset, TokenMap]], k: int, total: int) -> int:
    return (pieces[k + 1][0] if k + 1 < len(pieces) else total) - pieces[k][0]


def _encode_piece(
    tokenizer: Tokenizer, piece: str, as_text: bool, *, first: bool, newline: list[int]
) -> tuple[list[int], TokenMap]:
    encode = tokenizer.encode_as_text if as_text else tokenizer.encode
    if not first:
        enc = encode("\n" + piece)
        if enc.ids[: len(newline)] == newline:
            return enc.ids[len(newline) :], ShiftedTokenMap(
                enc.token_map, CharOffset(1), TokenOffset(len(newline))
            )
    enc = encode(piece)
    return enc.ids, enc.token_map


def assemble(
    rendered: TextRendering,
    text: str,
    ids: list[int],
    token_map: TokenMap,
    to_final: Callable[[CharOffset], CharOffset],
) -> Rendering:
    """A ``Rendering`` of ``rendered``'s boundaries over ``ids``; ``to_final`` maps a char position
    of the rendered text onto ``text`` (they differ only when control-token markers were removed)."""
    if rendered.input_end is None:
        input_end = Boundary.unavailable(rendered.input_end_reason or "unavailable")
    else:
        input_end = locate(token_map, to_final(rendered.input_end))
    starts = tuple(None if s is None else to_final(s) for s in rendered.message_starts)
    spans = tuple(Span(to_final(s.start), to_final(s.end)) for s in rendered.generation_spans)
    return Rendering(text, ids, input_end, starts, spans, token_map, template_kwargs=rendered.template_kwargs)
