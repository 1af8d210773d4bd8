"""Checkpoint kinds and the one rule for where each materializes.

Where it sits: after boundaries: a token position becomes a checkpoint materialized at a unit
boundary; ``Rendering.checkpoint``, ``boundary render``, the round trip, the retention policy,
the cache model and the vLLM plugin all place states by the functions here.

A recurrent state can only be saved where a prefill chunk or a decode step ends, and engines
end chunks on ``prefix_match_unit`` boundaries: a state wanted at logical position ``n``
materializes at ``floor(n / unit) * unit``. The prompt's last token is always recomputed for
its logits, so no prompt-side state covers it: P_end's state is anchored at ``P_end - 1`` and
U_end's at ``min(U_end, P_end - 1)``. Position 0 is the empty prefix: no state is kept there.
Correctness never depends on this placement: a state at ``n`` represents exactly
``tokens[0:n]`` and is reused only by a request whose chained prefix hashes match up to ``n``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from boundary.offsets import TokenOffset


class CheckpointKind(StrEnum):
    """What a checkpoint (a kept recurrent state) stands for: one enum for the public API, the
    retention policy, the cache model and the plugin's counters."""

    PROMPT_END = "prompt_end"  # P_end: the literal end of the prompt, generation suffix included
    INPUT_END = "input_end"  # U_end: the end of the externally supplied history
    DECODE_END = "decode_end"  # D_end: the end of the committed generated tokens
    REACTIVE = "reactive"  # a shared-prefix junction learned from a later request
    PROMPT_END_BLOCK = "prompt_end_block"  # P_end's block twin: what upstream vLLM keeps anyway


def materialize(logical: int, unit: int) -> TokenOffset:
    """The deepest multiple of ``unit`` at or before ``logical``."""
    if unit < 1:
        raise ValueError(f"prefix_match_unit must be >= 1, got {unit}")
    if logical < 0:
        raise ValueError(f"a position is never negative, got {logical}")
    return TokenOffset(logical - logical % unit)


def prompt_end_position(p_end: int, unit: int) -> TokenOffset:
    """P_end's state: the deepest unit boundary strictly before the last prompt token."""
    if p_end < 1:
        raise ValueError(f"a prompt has at least one token, got P_end={p_end}")
    return materialize(p_end - 1, unit)


def input_end_position(u_end: int, p_end: int, unit: int) -> TokenOffset:
    """U_end's state; U_end == P_end (no generation suffix) lands where P_end's state does."""
    if not 0 <= u_end <= p_end:
        raise ValueError(f"U_end={u_end} outside the prompt (P_end={p_end})")
    return materialize(min(u_end, p_end - 1), unit)


def checkpoint_position(kind: CheckpointKind, logical: int, p_end: int, unit: int) -> TokenOffset:
    """Where a state of ``kind`` wanted at ``logical`` materializes in a request of ``p_end``
    prompt tokens, for ``unit`` (the block for ``prompt_end_block``; for ``decode_end`` the
    step at which the decode leaves states)."""
    if kind in (CheckpointKind.PROMPT_END, CheckpointKind.PROMPT_END_BLOCK):
        return prompt_end_position(p_end, unit)
    if kind is CheckpointKind.INPUT_END:
        return input_end_position(logical, p_end, unit)
    return materialize(logical, unit)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint of ``kind`` wanted at ``logical`` and materialized at ``position <= logical``
    (``checkpoint_position``'s rule); ``position == 0``: nothing is kept."""

    kind: CheckpointKind
    logical: TokenOffset
    position: TokenOffset
    unit: int

    @classmethod
    def at(cls, kind: CheckpointKind, logical: TokenOffset, unit: int, *, p_end: TokenOffset) -> Checkpoint:
        return cls(kind, logical, checkpoint_position(kind, logical, p_end, unit), unit)
