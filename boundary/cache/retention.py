"""Which states a request leaves behind: a policy decision plus the engine's own junctions.

Where it sits: in the cache model, after the retention policy (``boundary.checkpoints.policies``),
whose decision it carries out.

The policy (``boundary.checkpoints.policies``) decides the proactive states and where each
materializes, P_end's block twin included; this module adds what the engine keeps by itself
and places everything on the request's timeline:

- a ``PREFILL`` keep exists once a prefill chunk ends at it: created at admission, and, when
  it lies inside a block in fine-grained mode, also registered as an attention alias so that
  attention can reach it;
- a ``DECODE`` keep is created at finish, from the finish-phase decision;
- a reactive junction (vLLM ``shared_prefix_boundary``, the attention match beyond the joint
  hit) keeps the block-floored state, and with ``junction_at_unit`` (vLLM's
  ``--enable-mamba-shared-prefix-checkpoint``) the exact unit position as well.

Positions at or below the joint hit are not recomputed by this request: nothing is created there.
"""

from __future__ import annotations

from dataclasses import dataclass

from boundary.cache.accounting import CacheGeometry
from boundary.checkpoints.kinds import CheckpointKind
from boundary.checkpoints.retention import Decision, DecodeStates, EngineGeometry, Phase


@dataclass(frozen=True, slots=True)
class PlannedState:
    """A state to create at ``position`` for ``kinds``; ``alias``: also let attention answer
    there; ``in_prompt``: produced during prefill (a chunk end) rather than at finish."""

    position: int
    kinds: tuple[str, ...]
    alias: bool
    in_prompt: bool


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """``candidates``: states considered (the junction counts as one); ``collapsed``: the
    policy's own candidates that share a materialized position with another of them (several
    kinds on one ``Keep``, P_end's block twin aside); ``on_twin``: the policy's candidates on
    the twin's position; ``junction_on_kept``: 1 when the junction lands on a position the
    decision keeps (a state it keeps anyway); ``covered``: candidates at or below the joint
    hit (nothing to create)."""

    states: tuple[PlannedState, ...]
    candidates: int
    collapsed: int
    covered: int
    on_twin: int = 0
    junction_on_kept: int = 0


def plan_retention(
    decision: Decision,
    *,
    junction: int,
    joint: int,
    num_prompt_tokens: int,
    geometry: CacheGeometry,
    junction_at_unit: bool = False,
) -> RetentionPlan:
    unit, block = geometry.unit, geometry.block_size
    kinds: dict[int, list[str]] = {}
    aliases: set[int] = set()
    candidates = collapsed = covered = on_twin = junction_on_kept = 0

    def keep(position: int, kind: str) -> None:
        at = kinds.setdefault(position, [])
        if kind not in at:
            at.append(kind)

    for k in decision.keeps:
        own = [kind for kind in k.kinds if kind is not CheckpointKind.PROMPT_END_BLOCK]
        candidates += len(k.kinds)
        collapsed += max(len(own) - 1, 0)
        on_twin += len(own) if len(own) < len(k.kinds) else 0
        if k.position <= joint:
            covered += len(k.kinds)
            continue
        for kind in k.kinds:
            keep(k.position, kind.value)
        if k.phase is Phase.PREFILL and k.position % block:
            aliases.add(k.position)
    if junction > joint:
        candidates += 1
        floored = junction // block * block
        primary = junction // unit * unit if junction_at_unit else floored
        if primary in kinds:
            junction_on_kept += 1
        for position in {floored, primary}:
            if position > joint:
                keep(position, CheckpointKind.REACTIVE.value)
        if max(floored, primary) <= joint:
            covered += 1
    states = tuple(
        PlannedState(
            p,
            tuple(k),
            geometry.fine_grained and p in aliases,
            _in_prompt(decision, p, num_prompt_tokens),
        )
        for p, k in sorted(kinds.items())
    )
    return RetentionPlan(states, candidates, collapsed, covered, on_twin, junction_on_kept)


def _in_prompt(decision: Decision, position: int, num_prompt_tokens: int) -> bool:
    keep = decision.at(position)
    if keep is not None:
        return keep.phase is Phase.PREFILL
    return position <= num_prompt_tokens  # a junction


def engine_geometry(
    geometry: CacheGeometry,
    decode_states: DecodeStates = DecodeStates.BLOCK,
    *,
    upstream_twin: bool = True,
) -> EngineGeometry:
    """The policy's view of a cache layout."""
    return EngineGeometry(geometry.block_size, geometry.unit, decode_states, upstream_twin)
