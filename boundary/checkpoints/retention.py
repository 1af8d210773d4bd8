"""The retention policy's interface: what a policy decides about one request, and in what terms.

Where it sits: after checkpoints' kinds (``boundary.checkpoints.kinds``): the policies
(``boundary.checkpoints.policies``) implement ``RetentionRule`` here, and the cache model
(``boundary.cache``), the experiment and the vLLM plugin (``boundary_vllm``) execute the
``Decision`` it returns, in the types defined here.

One decision, executed by two engines: the cache model of the experiment and the vLLM plugin.
Given a request's boundaries, the round-trip verdict, the stability horizon and the engine
geometry, a policy returns the states to keep, each with its kind and the position where it
materializes. The policies go by the names of ``Variant`` (and ``SessionVariant``); nothing
here imports an engine.

What upstream keeps anyway: the state at P_end's block floor (vLLM's reachable-block mask
keeps the state block its replay boundary ends in). It is the kind ``prompt_end_block`` and
is counted apart from P_end; at ``unit == block`` it is P_end's own position and the one state
carries both labels. Kernels that export the prompt checkpoint from inside the last chunk
(GDN on FlashInfer) at a unit finer than the block keep P_end's unit tail instead of the block
floor (``EngineGeometry.exported_twin``): the twin then sits at P_end's own position.
``EngineGeometry.upstream_twin=False`` drops it (an engine that keeps only what the variant
asks for).

Materialization (vLLM 0.33.0 align mode) is ``boundary.checkpoints.kinds``'s one rule, the one
``Rendering.checkpoint`` answers by: a prompt-side state at logical ``n`` lands on
``floor(n / unit) * unit`` (a prefill chunk ends there); P_end's anchor is ``P_end - 1`` and
U_end's ``min(U_end, P_end - 1)`` (the last prompt token is recomputed for logits). An
output-side state exists only where decoding left one: at a block boundary the decode
crossed (``decode_states=block``, what vLLM does), at every unit boundary
(``decode_states=unit``, an engine that snapshots while decoding), or nowhere
(``decode_states=none``: prefill and decode disaggregated without a way back).

Two phases, the two calls of ``RetentionRule.decide``. At admission D_end is unknown
(``RequestBoundaries.d_end is None``): the decision names the prompt-side states, which must
exist by the end of prefill, and ``RetentionRule.may_keep_decode`` says whether the decode
states must be held until finish. At finish D_end is known; the decision may add an
output-side state and drop prompt-side ones, never add a prompt-side one (the tests hold the
invariant).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import ClassVar

from boundary.checkpoints.kinds import CheckpointKind, materialize, prompt_end_position


class Variant(StrEnum):
    """The policies, by the one name each goes by: the plugin's ``policy`` setting, the
    experiment's ``--policies`` values and report columns are these values."""

    MAIN_SPARSE = "main_sparse"
    INPUT_END = "input_end"
    DECODE_END = "decode_end"
    BOTH = "both"
    CHAT_AWARE = "chat_aware"
    HORIZON = "horizon"


PHASE_ONE = (Variant.MAIN_SPARSE, Variant.INPUT_END, Variant.DECODE_END, Variant.BOTH)


class SessionVariant(StrEnum):
    """Variants whose keeps outlive the request: their executor must hold a state across a
    session's requests. The cache model of the experiment does; the vLLM plugin does not
    (it has no session clock), so these are experiment-only and not in ``Variant``.

    ``chain_fallback``: D_end on every request, and U_end only where the prompt ends in a user
    message, held (not evictable) until the session's next user turn arrives. In a reasoning
    tool chain the reasoning is stripped once the next user turn arrives, so the chain's
    D_ends stop matching and the useful fallback is the chain's first U_end, two or more
    requests old."""

    CHAIN_FALLBACK = "chain_fallback"


# When one state answers for several kinds, a hit is credited to the first here.
SERVING_ORDER = (
    CheckpointKind.DECODE_END,
    CheckpointKind.INPUT_END,
    CheckpointKind.PROMPT_END,
    CheckpointKind.REACTIVE,
    CheckpointKind.PROMPT_END_BLOCK,
)


def serving_kind(kinds: Iterable[str]) -> CheckpointKind | None:
    """The kind a hit on a state standing for ``kinds`` is credited to: the first of them in
    ``SERVING_ORDER`` (None: none of them is a ``CheckpointKind``). The one rule for the plugin's
    ledger, the cache model's entries and ``Keep.kind``."""
    present = set(kinds)
    return next((k for k in SERVING_ORDER if k in present), None)


class DecodeStates(StrEnum):
    BLOCK = "block"  # vLLM align mode: a state at each block boundary the decode crossed
    UNIT = "unit"  # an engine that snapshots at every unit boundary while decoding
    NONE = "none"  # output-side states cannot serve a later prefill (disaggregated)


class Phase(StrEnum):
    PREFILL = "prefill"  # exists when a prefill chunk ends at it
    DECODE = "decode"  # kept at finish from the states the decode left


@dataclass(frozen=True, slots=True)
class EngineGeometry:
    """``block_size``: the align-mode block; ``unit``: ``prefix_match_unit`` (divides the
    block); ``decode_states``: where output-side states can exist; ``upstream_twin``: keep
    P_end's block twin as upstream does; ``exported_twin``: upstream's twin is P_end's unit
    tail (kernels that export the prompt checkpoint, at a unit finer than the block)."""

    block_size: int
    unit: int
    decode_states: DecodeStates = DecodeStates.BLOCK
    upstream_twin: bool = True
    exported_twin: bool = False

    def __post_init__(self) -> None:
        if self.unit < 1 or self.block_size % self.unit:
            raise ValueError(f"unit {self.unit} must divide the block size {self.block_size}")


@dataclass(frozen=True, slots=True)
class RequestBoundaries:
    """One request. Positions are token offsets into prompt + output; ``d_end`` None means
    not known yet (admission); callers take it from ``capped_d_end`` (the committed end capped
    at the tokens the request computed). ``round_trip``: the probability that the output re-renders token
    for token into the next request (None: unknown, counted as 0). ``horizon``: the stability
    horizon, possibly past P_end (the engine caps it at D_end); None: not predicted.
    ``user_turn``: the prompt ends in a user message; ``tool_call``: the output calls a tool,
    so the next request continues a tool loop (None: unknown; ``chat_aware`` and the
    ``SessionVariant`` decisions read them).

    Invariant: ``u_end <= p_end <= d_end`` where given; ``p_end >= 1``.
    """

    p_end: int
    u_end: int | None = None
    d_end: int | None = None
    round_trip: float | None = None
    horizon: int | None = None
    user_turn: bool | None = None
    tool_call: bool | None = None

    def __post_init__(self) -> None:
        if self.p_end < 1 or (self.u_end is not None and not 0 <= self.u_end <= self.p_end):
            raise ValueError(f"boundaries out of order: U_end={self.u_end} P_end={self.p_end}")
        if self.d_end is not None and self.d_end < self.p_end:
            raise ValueError(f"D_end={self.d_end} before P_end={self.p_end}")


@dataclass(frozen=True, slots=True)
class Keep:
    """Keep the state after exactly ``tokens[:position]``, standing for ``kinds`` (wanted at
    ``logical``, the deepest kind's). Invariant: ``0 < position``; a ``PREFILL`` keep lies at
    or before ``p_end``, a ``DECODE`` keep at or after it."""

    position: int
    kinds: tuple[CheckpointKind, ...]
    phase: Phase
    until_next_user_turn: bool = False  # held, not evictable, until the session's next user turn

    @property
    def kind(self) -> CheckpointKind:
        kind = serving_kind(self.kinds)
        assert kind is not None, self.kinds  # kinds is never empty
        return kind


@dataclass(frozen=True, slots=True)
class Decision:
    """The states one request keeps, in position order (one ``Keep`` per position)."""

    keeps: tuple[Keep, ...]

    @property
    def prefill_positions(self) -> tuple[int, ...]:
        return tuple(k.position for k in self.keeps if k.phase is Phase.PREFILL)

    def at(self, position: int) -> Keep | None:
        return next((k for k in self.keeps if k.position == position), None)


def capped_d_end(committed_end: int, num_tokens: int, p_end: int) -> int:
    """D_end as a finished request can keep it: its committed end (trailing stop tokens
    excluded), capped at ``num_tokens - 1`` (the last sampled token was never fed to the model,
    so no state covers it), never before P_end. The one rule for every executor and recorder:
    the experiment's stream requests, the plugin's finish hook and its recorded trace.

    The floor at P_end is what keeps ``RequestBoundaries`` valid: a request that computed no
    output (``num_tokens == p_end``, an abort before its first token) would otherwise get
    ``D_end = P_end - 1``, before P_end. Output tokens the engine never fed back have no state,
    so a committed end past ``num_tokens - 1`` is never kept as such."""
    return max(min(committed_end, num_tokens - 1), p_end)


# -- materialization -------------------------------------------------------------------------------
# The rules themselves are ``boundary.checkpoints.kinds``'s (``prompt_end_position``,
# ``input_end_position``), the ones ``Rendering.checkpoint`` answers by.
def prompt_position(logical: int, unit: int) -> int:
    """Where a prompt-side state wanted at ``logical`` materializes."""
    return materialize(max(logical, 0), unit)


def twin_position(p_end: int, block_size: int) -> int:
    """P_end's block twin."""
    return prompt_end_position(p_end, block_size)


def upstream_position(p_end: int, geometry: EngineGeometry) -> int:
    """Where upstream keeps P_end's twin on ``geometry``."""
    if geometry.exported_twin:
        return prompt_end_position(p_end, geometry.unit)
    return twin_position(p_end, geometry.block_size)


def decode_position(logical: int, p_end: int, geometry: EngineGeometry) -> int:
    """Where an output-side state wanted at ``logical >= p_end`` exists (0: nowhere)."""
    if geometry.decode_states is DecodeStates.NONE:
        return 0
    step = geometry.block_size if geometry.decode_states is DecodeStates.BLOCK else geometry.unit
    position = logical // step * step
    return position if position >= p_end and position > 0 else 0


# -- the interface ---------------------------------------------------------------------------------
# A D_end deeper than any request reaches: the probe ``may_keep_decode`` decides at.
_DEEPEST = 1 << 62


class RetentionRule(ABC):
    """One policy: the states a request keeps at each phase. ``variant`` is the public name it
    goes by (``boundary.checkpoints.policies.RULES`` maps the names to the rules)."""

    variant: ClassVar[Variant | SessionVariant]

    @abstractmethod
    def decide(self, request: RequestBoundaries, geometry: EngineGeometry) -> Decision:
        """The states ``request`` keeps on ``geometry``: the admission decision while
        ``request.d_end`` is None, the finish decision once it is known."""

    def may_keep_decode(self, request: RequestBoundaries, geometry: EngineGeometry) -> bool:
        """Whether ``request``'s finish decision may keep an output-side state, asked at
        admission (D_end unknown): an executor then holds the decode states it crosses until
        finish.

        Derived from ``decide`` itself, at two D_ends: the deepest, and the stability horizon's
        reach when it is at or past P_end. On each side of the horizon a rule's decode keep is
        monotone in D_end (a deeper D_end materializes at least as deep and is worth at least as
        much; past the horizon ``chat_aware`` and ``horizon`` still have the decode state at the
        horizon), so if any D_end keeps one, one of the two does (the tests hold it).
        Over-answering costs a tentative hold released at finish; under-answering would lose the
        state the decision keeps.
        """
        probes = [max(_DEEPEST, request.p_end)]
        if request.horizon is not None and request.horizon >= request.p_end:
            probes.append(request.horizon)
        return any(
            k.phase is Phase.DECODE
            for d_end in probes
            for k in self.decide(replace(request, d_end=d_end), geometry).keeps
        )
