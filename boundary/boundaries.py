"""A rendered prompt in tokens, with its boundaries: U_end (input end) and P_end (prompt end).

Where it sits: after render (it encodes the ``TextRendering``) and before checkpoints and
everything that reads ids.

``encode_rendering`` is the tokenization stage: one encode of the full text (exactly the
ids ``apply_chat_template(tokenize=True)`` returns), then each char boundary floored to
the deepest token boundary at or before it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from boundary.checkpoints import Checkpoint, CheckpointKind
from boundary.errors import TokenizerError
from boundary.offsets import (
    Boundary,
    BoundaryStatus,
    CharOffset,
    PiecewiseTokenMap,
    ShiftedTokenMap,
    Span,
    TokenMap,
    TokenOffset,
    locate,
)
from boundary.render import TextRendering
from boundary.tokenizer import Tokenizer


@dataclass(frozen=True, slots=True)
class Rendering:
    """One rendered request.

    Invariants: ``text`` is exactly what transformers renders and ``token_ids`` exactly what
    it tokenizes; ``p_end == len(token_ids)``; when found, ``u_end <= p_end`` and
    ``token_ids[:u_end]`` decodes to a prefix of ``text[:input_end.char]``.

    With ``continue_final_message`` (a prefilled final message the model continues), the text
    ends where transformers cuts it, after the final message's content, so P_end is the end
    of the prefilled content; U_end is where the template's message loop began that final
    message (``message_starts[-1]``, from the same render), never beyond where the
    generation-prompt probe found the history to end, floored to a token boundary. It is
    UNAVAILABLE, with a reason, when the loop never began the final message or the probe
    found nothing.

    ``ignored_template_kwargs`` names the template kwargs that were dropped because the
    template never reads them (as vLLM drops them), in the order given; ``template_kwargs``
    are those that reached the template (None where not recorded): the output readers take
    them as the request's ``chat_template_kwargs`` when none are given.
    """

    text: str
    token_ids: list[int]
    input_end: Boundary
    message_starts: tuple[CharOffset | None, ...] = ()
    generation_spans: tuple[Span, ...] = ()
    token_map: TokenMap = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    ignored_template_kwargs: tuple[str, ...] = ()
    template_kwargs: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def u_end(self) -> TokenOffset | None:
        """U_end in tokens, or None when the template cannot expose it (see ``input_end.reason``)."""
        return self.input_end.token if self.input_end.status is BoundaryStatus.FOUND else None

    @property
    def p_end(self) -> TokenOffset:
        return TokenOffset(len(self.token_ids))

    def boundary_at(self, char: CharOffset) -> Boundary:
        """The deepest token boundary at or before text position ``char``."""
        return locate(self.token_map, char)

    def checkpoint(
        self, unit: int, kind: CheckpointKind | str = CheckpointKind.INPUT_END
    ) -> Checkpoint | None:
        """Where checkpoint ``kind`` (``input_end`` or ``prompt_end``) materializes for
        ``prefix_match_unit=unit``; None when U_end is unavailable."""
        kind = CheckpointKind(kind)
        if kind is CheckpointKind.PROMPT_END:
            return Checkpoint.at(kind, self.p_end, unit)
        if kind is CheckpointKind.INPUT_END:
            return None if self.u_end is None else Checkpoint.at(kind, self.u_end, unit)
        raise ValueError(f"a rendering alone has no {kind.value} checkpoint")


def encode_rendering(rendered: TextRendering, tokenizer: Tokenizer) -> Rendering:
    """The tokenization stage, under the render's deadline (``RenderLimitExceeded`` past it)."""
    enc = tokenizer.encode(rendered.text, clock=rendered.deadline)
    result = assemble(rendered, rendered.text, enc.ids, enc.token_map, lambda c: c)
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
