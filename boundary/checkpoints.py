"""Logical checkpoints and where they materialize.

A recurrent state can only be saved where a scheduler step ends, and engines end steps on
``prefix_match_unit`` boundaries; so a checkpoint wanted at logical position ``p``
materializes at ``floor(p / unit) * unit``. Correctness never depends on this placement:
a state at ``n`` represents exactly ``tokens[0:n]`` and is reused only by a request whose
chained prefix hashes match up to ``n``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from boundary.offsets import TokenOffset


class CheckpointKind(StrEnum):
    PROMPT_END = "prompt_end"  # P_end: the literal end of the prompt, generation suffix included
    INPUT_END = "input_end"  # U_end: the end of the externally supplied history
    DECODE_END = "decode_end"  # D_end: the end of the committed generated tokens
    REACTIVE = "reactive"  # a shared-prefix junction learned from a later request


def materialize(logical: TokenOffset, unit: int) -> TokenOffset:
    """The deepest multiple of ``unit`` at or before ``logical``."""
    if unit < 1:
        raise ValueError(f"prefix_match_unit must be >= 1, got {unit}")
    if logical < 0:
        raise ValueError(f"a position is never negative, got {logical}")
    return TokenOffset(logical - logical % unit)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint of ``kind`` wanted at ``logical`` and materialized at ``position <= logical``."""

    kind: CheckpointKind
    logical: TokenOffset
    position: TokenOffset
    unit: int

    @classmethod
    def at(cls, kind: CheckpointKind, logical: TokenOffset, unit: int) -> Checkpoint:
        return cls(kind, logical, materialize(logical, unit), unit)
