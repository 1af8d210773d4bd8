"""One rendered request in tokens, with its boundaries: U_end (input end) and P_end (prompt end).

Where it sits: the type the renderer returns (built by ``boundary.tokenize.encode``) and everything
downstream reads: sessions, outputs, round trip, horizon, audit, experiment, the vLLM plugin.
It imports only ``offsets`` and ``checkpoints``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from boundary.checkpoints.kinds import Checkpoint, CheckpointKind
from boundary.offsets import (
    Boundary,
    BoundaryStatus,
    CharOffset,
    Span,
    TokenMap,
    TokenOffset,
    locate,
)


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
        ``prefix_match_unit=unit``, by the rule the engine keeps it by
        (``boundary.checkpoints.kinds.checkpoint_position``); None when U_end is unavailable."""
        kind = CheckpointKind(kind)
        if kind is CheckpointKind.PROMPT_END:
            return Checkpoint.at(kind, self.p_end, unit, p_end=self.p_end)
        if kind is CheckpointKind.INPUT_END:
            u_end = self.u_end
            return None if u_end is None else Checkpoint.at(kind, u_end, unit, p_end=self.p_end)
        raise ValueError(f"a rendering alone has no {kind.value} checkpoint")
