"""The retention policy: which recurrent-state checkpoints one request leaves behind.

Where it sits: after checkpoints: it decides which states a request leaves; the cache model and
the vLLM plugin both execute its decisions.

One decision, executed by two engines: the cache model of the experiment
(``boundary.cache``) and the vLLM plugin (``boundary_vllm``). Given a request's boundaries,
the round-trip verdict, the stability horizon and the engine geometry, ``decide`` returns the
states to keep, each with its kind and the position where it materializes. Nothing here
imports an engine.

Variants (reactive shared-prefix junctions are always kept by the engine itself):

- ``main_sparse``: P_end (vLLM's replay boundary: the state of the prompt minus its last token);
- ``input_end``: U_end (P_end when the template cannot expose U_end);
- ``decode_end``: D_end;
- ``both``: U_end and D_end;
- ``chat_aware``: the one state with the largest expected reused tokens among U_end, P_end and
  D_end: the probability that its tokens reach the next request (1 where it materializes at
  or before the stability horizon; beyond it, 0 for U_end and the round-trip verdict for P_end
  and D_end; without a horizon, 1 for U_end and the verdict for the others) times where it
  actually materializes, counted only beyond what the block twin already gives. A D_end past
  a horizon that reaches into the output also offers the decode state at the horizon (the
  decode pass crossed it; certainly reused). A state
  nothing predicts to pay is not kept. On a request that opens a tool
  loop (its prompt ends in a user message, its output calls a tool) P_end is no candidate:
  the loop's requests keep what the session's next user turn may strip, and U_end is the
  state that user turn still finds;
- ``horizon``: the one state at the deepest materializable position at or before the stability
  horizon (``boundary.verify.horizon``), never beyond it.

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

Two phases. At admission D_end is unknown (``RequestBoundaries.d_end is None``): the decision
names the prompt-side states, which must exist by the end of prefill. At finish D_end is known;
the decision may add an output-side state and drop prompt-side ones, never add a prompt-side
one (``check_phases`` states the invariant; the tests hold it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from boundary.checkpoints.kinds import CheckpointKind, input_end_position, materialize, prompt_end_position


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


# -- candidates ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Candidate:
    kind: CheckpointKind
    position: int  # 0: does not materialize
    phase: Phase
    reach: float  # the probability its tokens are a prefix of the next request


def _input_end(b: RequestBoundaries, g: EngineGeometry) -> _Candidate:
    if b.u_end is None:
        return _prompt_end(b, g)
    position = input_end_position(b.u_end, b.p_end, g.unit)
    return _Candidate(CheckpointKind.INPUT_END, position, Phase.PREFILL, 1.0)


def _prompt_end(b: RequestBoundaries, g: EngineGeometry) -> _Candidate:
    return _Candidate(
        CheckpointKind.PROMPT_END, prompt_end_position(b.p_end, g.unit), Phase.PREFILL, b.round_trip or 0.0
    )


def _decode_end(b: RequestBoundaries, g: EngineGeometry) -> _Candidate:
    position = 0 if b.d_end is None else decode_position(b.d_end, b.p_end, g)
    return _Candidate(CheckpointKind.DECODE_END, position, Phase.DECODE, b.round_trip or 0.0)


def _expected(c: _Candidate, floor: int, floor_reach: float) -> float:
    """Expected tokens a next request resumes from with ``c`` kept beside a state at ``floor``
    (reached with ``floor_reach``): ``c`` counts only where it lies beyond the floor."""
    base = floor * floor_reach
    if c.position <= floor:
        return base
    return c.reach * c.position + (1 - c.reach) * base


def _twin_reach(b: RequestBoundaries, g: EngineGeometry) -> tuple[int, float]:
    """The twin's position and the probability that it is reused: certainly when it is at or
    before U_end (or the horizon), else only when the output round-trips."""
    if not g.upstream_twin:
        return 0, 0.0
    twin = upstream_position(b.p_end, g)
    stable = b.horizon if b.horizon is not None else b.u_end
    if stable is not None and twin <= stable:
        return twin, 1.0
    return twin, b.round_trip or 0.0


def _best(candidates: list[_Candidate], b: RequestBoundaries, g: EngineGeometry) -> _Candidate | None:
    """The candidate with the largest expected reuse beyond the twin; None when none adds any.
    Ties go to the earlier candidate (prompt-side first: it is known at admission)."""
    floor, reach = _twin_reach(b, g)
    base = floor * reach
    best, best_value = None, base
    for c in candidates:
        if c.position <= 0:
            continue
        value = _expected(c, floor, reach)
        if value > best_value:
            best, best_value = c, value
    return best


def _horizon(b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
    """The deepest position at or before the horizon: in the output when the horizon reaches
    past P_end and a decode state exists there, else in the prompt."""
    h = b.horizon if b.horizon is not None else (b.u_end if b.u_end is not None else b.p_end - 1)
    prompt_side = prompt_position(min(h, b.p_end - 1), g.unit) if h < b.p_end else 0
    if h >= b.p_end:
        prompt_side = prompt_end_position(b.p_end, g.unit)
    at_input_end = b.u_end is not None and prompt_side <= prompt_position(b.u_end, g.unit)
    kind = CheckpointKind.INPUT_END if at_input_end else CheckpointKind.PROMPT_END
    out = [_Candidate(kind, prompt_side, Phase.PREFILL, 1.0)]
    if b.d_end is not None and h >= b.p_end:
        out.append(
            _Candidate(
                CheckpointKind.DECODE_END, decode_position(min(h, b.d_end), b.p_end, g), Phase.DECODE, 1.0
            )
        )
    deepest = max(out, key=lambda c: c.position)
    return [deepest]


def _chosen(variant: Variant, b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
    if variant is Variant.MAIN_SPARSE:
        return [_prompt_end(b, g)]
    if variant is Variant.INPUT_END:
        return [_input_end(b, g)]
    if variant is Variant.DECODE_END:
        return [_decode_end(b, g)]
    if variant is Variant.BOTH:
        return [_input_end(b, g), _decode_end(b, g)]
    if variant is Variant.HORIZON:
        return _horizon(b, g)
    return _chat_aware(b, g)


def _opens_tool_loop(b: RequestBoundaries) -> bool:
    """The prompt ends in a user message and the output calls a tool (or may: unknown)."""
    return bool(b.user_turn) and b.tool_call is not False


def _chat_aware(b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
    """At admission the best prompt-side candidate (P_end stands in for D_end when the output
    is expected to round-trip: D_end lies beyond it); at finish D_end replaces it only where it
    materializes deeper. Nothing beyond the twin when no candidate is expected to pay."""
    u, p = _reached(_input_end(b, g), b), _reached(_prompt_end(b, g), b)
    prompt = [u] if u.kind is CheckpointKind.INPUT_END and _opens_tool_loop(b) else [u, p]
    candidates = prompt if b.d_end is None else [*prompt, *_decode_candidates(b, g)]
    best = _best(candidates, b, g)
    return [] if best is None else [best]


def _decode_candidates(b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
    """D_end, and where D_end lies past a horizon that reaches into the output, the decode
    state at the horizon too: the decode pass crossed it, and the next request certainly
    reuses it, so a deeper D_end never loses what a shallower one on its side keeps."""
    d_end = _reached(_decode_end(b, g), b)
    assert b.d_end is not None
    if b.horizon is None or not b.p_end <= b.horizon < b.d_end:
        return [d_end]
    at_horizon = _Candidate(
        CheckpointKind.DECODE_END, decode_position(b.horizon, b.p_end, g), Phase.DECODE, 1.0
    )
    return [d_end, at_horizon]


def _reached(c: _Candidate, b: RequestBoundaries) -> _Candidate:
    """``c`` with the horizon's word on its reach: certain at or before the horizon; U_end
    beyond it is not reached (the next request rewrites the history before it); P_end and D_end
    beyond it keep the round-trip verdict's probability."""
    if b.horizon is None:
        return c
    if c.position <= b.horizon:
        return _Candidate(c.kind, c.position, c.phase, 1.0)
    return _Candidate(c.kind, c.position, c.phase, 0.0) if c.kind is CheckpointKind.INPUT_END else c


def decide(
    variant: Variant | SessionVariant | str, request: RequestBoundaries, geometry: EngineGeometry
) -> Decision:
    """The states ``request`` keeps under ``variant`` on ``geometry`` (see the module doc)."""
    if variant in tuple(SessionVariant):
        return _chain_fallback(request, geometry)
    v = Variant(variant)
    kinds: dict[int, tuple[list[CheckpointKind], Phase]] = {}

    def keep(position: int, kind: CheckpointKind, phase: Phase) -> None:
        if position <= 0:
            return
        at = kinds.setdefault(position, ([], phase))
        if kind not in at[0]:
            at[0].append(kind)

    for c in _chosen(v, request, geometry):
        keep(c.position, c.kind, c.phase)
    if geometry.upstream_twin:
        keep(upstream_position(request.p_end, geometry), CheckpointKind.PROMPT_END_BLOCK, Phase.PREFILL)
    return Decision(tuple(Keep(p, tuple(k), phase) for p, (k, phase) in sorted(kinds.items())))


# A D_end deeper than any request reaches: the probe ``may_keep_decode`` decides at.
_DEEPEST = 1 << 62


def may_keep_decode(
    variant: Variant | SessionVariant | str, request: RequestBoundaries, geometry: EngineGeometry
) -> bool:
    """Whether ``request``'s finish decision may keep an output-side state, asked at admission
    (D_end unknown): an executor then holds the decode states it crosses until finish.

    Derived from ``decide`` itself, at two D_ends: the deepest, and the stability horizon's
    reach when it is at or past P_end. On each side of the horizon a variant's decode keep is
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
        for k in decide(variant, replace(request, d_end=d_end), geometry).keeps
    )


def _chain_fallback(b: RequestBoundaries, g: EngineGeometry) -> Decision:
    """``SessionVariant.CHAIN_FALLBACK``: ``decode_end``'s decision, plus U_end held until the
    next user turn on a request whose prompt ends in a user message."""
    base = decide(Variant.DECODE_END, b, g).keeps
    if not b.user_turn:
        return Decision(base)
    u = _input_end(b, g)
    if u.kind is not CheckpointKind.INPUT_END or u.position <= 0:
        return Decision(base)
    keeps = {k.position: k for k in base}
    at = keeps.get(u.position)
    kinds = (CheckpointKind.INPUT_END, *(at.kinds if at else ()))
    keeps[u.position] = Keep(u.position, kinds, Phase.PREFILL, until_next_user_turn=True)
    return Decision(tuple(keeps[p] for p in sorted(keeps)))


def check_phases(admission: Decision, finish: Decision) -> None:
    """The two-phase invariant: every prefill keep at finish was a prefill keep at admission."""
    missing = set(finish.prefill_positions) - set(admission.prefill_positions)
    if missing:
        raise AssertionError(f"prefill states decided only at finish: {sorted(missing)}")
