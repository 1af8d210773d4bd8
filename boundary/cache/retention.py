"""Which states a request leaves behind: logical checkpoints -> materialized positions.

Every retained position materializes as vLLM align mode materializes its prompt-end replay
boundary with ``prefix_cache_retention_interval=0``:

- the unit-aligned position ``floor(anchor / unit) * unit`` (in fine-grained mode it is also
  registered as an attention alias when it falls inside a block, so attention can reach it);
- its block-aligned twin ``floor(position / block_size) * block_size`` (the reachable-block
  mask keeps the state block ending there; the same position when ``unit == block_size``).

A position in the output (past the prompt) exists only where decoding produced a state: in
vLLM align mode that is a block boundary (a block fills, the running state moves on). So by
default an output-side checkpoint materializes at ``floor(logical / block_size) *
block_size``, and only when that is still in the output (the vLLM integration holds exactly
these); ``output_at_unit`` models an engine that snapshots every unit boundary while
decoding, materializing output-side checkpoints like prompt-side ones.

A reactive junction (vLLM ``shared_prefix_boundary``, the attention match beyond the joint
hit) keeps the block-floored state only, unless ``junction_at_unit`` (vLLM's
``--enable-mamba-shared-prefix-checkpoint``) keeps the exact unit position as well.
Positions at or below the joint hit are not recomputed by this request, so nothing is
created there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from boundary.cache.accounting import CacheGeometry
from boundary.cache.request import Retain
from boundary.checkpoints import CheckpointKind


@dataclass(frozen=True, slots=True)
class PlannedState:
    """A state to create at ``position`` for ``kinds``; ``alias``: also let attention answer
    there; ``in_prompt``: produced during prefill (a chunk end) rather than at finish."""

    position: int
    kinds: tuple[CheckpointKind, ...]
    alias: bool
    in_prompt: bool


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """``candidates``: logical checkpoints considered (the junction counts as one);
    ``collapsed``: candidates whose materialized position another candidate already took;
    ``covered``: candidates at or below the joint hit (nothing to create)."""

    states: tuple[PlannedState, ...]
    candidates: int
    collapsed: int
    covered: int


def plan_retention(
    retain: Sequence[Retain],
    *,
    junction: int,
    joint: int,
    num_prompt_tokens: int,
    geometry: CacheGeometry,
    junction_at_unit: bool = False,
    output_at_unit: bool = False,
) -> RetentionPlan:
    unit, block = geometry.unit, geometry.block_size
    kinds: dict[int, list[CheckpointKind]] = {}
    aliases: set[int] = set()
    primaries: set[int] = set()
    candidates = collapsed = covered = 0

    def keep(position: int, kind: CheckpointKind) -> None:
        if position > joint:
            at = kinds.setdefault(position, [])
            if kind not in at:
                at.append(kind)

    for r in retain:
        candidates += 1
        in_output = r.anchor > num_prompt_tokens and not output_at_unit
        position = max(r.anchor, 0) // (block if in_output else unit) * (block if in_output else unit)
        if in_output and position < num_prompt_tokens:
            position = 0  # no block boundary was crossed while decoding: no state
        if position in primaries:
            collapsed += 1
        primaries.add(position)
        if position <= joint:
            covered += 1
            continue
        keep(position, r.kind)
        if position % block:
            aliases.add(position)
        keep(position // block * block, r.kind)
    if junction > joint:
        candidates += 1
        floored = junction // block * block
        primary = junction // unit * unit if junction_at_unit else floored
        if primary in primaries:
            collapsed += 1
        primaries.add(primary)
        keep(floored, CheckpointKind.REACTIVE)
        if junction_at_unit:
            keep(primary, CheckpointKind.REACTIVE)
        if max(floored, primary) <= joint:
            covered += 1
    states = tuple(
        PlannedState(p, tuple(k), geometry.fine_grained and p in aliases, p <= num_prompt_tokens)
        for p, k in sorted(kinds.items())
    )
    return RetentionPlan(states, candidates, collapsed, covered)
