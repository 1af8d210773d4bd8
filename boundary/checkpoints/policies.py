"""The retention policies, one small class each, and the registry of their public names.

Where it sits: after checkpoints, behind the interface of ``boundary.checkpoints.retention``:
``decide`` and ``may_keep_decode`` here are what the cache model (``boundary.cache``), the
experiment (``boundary.experiment.policies``) and the vLLM plugin (``boundary_vllm.retention``,
``boundary_vllm.prediction``) ask for each request.

``RULES`` maps each public name (a ``Variant`` or ``SessionVariant`` value: the plugin's
``policy`` setting, the experiment's ``--policies``, report columns and traces) to its
``RetentionRule``. Reactive shared-prefix junctions are always kept by the engine itself; the
rules:

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
  horizon (``boundary.verify.horizon``), never beyond it;
- ``chain_fallback`` (a ``SessionVariant``, experiment-only): ``decode_end``'s states, plus U_end
  held until the session's next user turn on a request whose prompt ends in a user message.

Every rule but ``chain_fallback`` chooses candidates (``_CandidateRule.chosen``) and keeps them
beside upstream's twin of P_end (``boundary.checkpoints.retention``'s module doc).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

from boundary.checkpoints.kinds import CheckpointKind, input_end_position, prompt_end_position
from boundary.checkpoints.retention import (
    Decision,
    EngineGeometry,
    Keep,
    Phase,
    RequestBoundaries,
    RetentionRule,
    SessionVariant,
    Variant,
    decode_position,
    prompt_position,
    upstream_position,
)


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


def _opens_tool_loop(b: RequestBoundaries) -> bool:
    """The prompt ends in a user message and the output calls a tool (or may: unknown)."""
    return bool(b.user_turn) and b.tool_call is not False


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


# -- the rules -------------------------------------------------------------------------------------
def _decision(chosen: list[_Candidate], request: RequestBoundaries, geometry: EngineGeometry) -> Decision:
    """``chosen`` kept beside upstream's twin of P_end: one ``Keep`` per position, standing for
    every kind that lands there."""
    kinds: dict[int, tuple[list[CheckpointKind], Phase]] = {}

    def keep(position: int, kind: CheckpointKind, phase: Phase) -> None:
        if position <= 0:
            return
        at = kinds.setdefault(position, ([], phase))
        if kind not in at[0]:
            at[0].append(kind)

    for c in chosen:
        keep(c.position, c.kind, c.phase)
    if geometry.upstream_twin:
        keep(upstream_position(request.p_end, geometry), CheckpointKind.PROMPT_END_BLOCK, Phase.PREFILL)
    return Decision(tuple(Keep(p, tuple(k), phase) for p, (k, phase) in sorted(kinds.items())))


class _CandidateRule(RetentionRule):
    """A rule that keeps the candidates it chooses, beside upstream's twin."""

    def decide(self, request: RequestBoundaries, geometry: EngineGeometry) -> Decision:
        return _decision(self.chosen(request, geometry), request, geometry)

    @abstractmethod
    def chosen(self, b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
        """The states this rule asks for (a position of 0: none there)."""


class MainSparse(_CandidateRule):
    variant = Variant.MAIN_SPARSE

    def chosen(self, b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
        return [_prompt_end(b, g)]


class InputEnd(_CandidateRule):
    variant = Variant.INPUT_END

    def chosen(self, b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
        return [_input_end(b, g)]


class DecodeEnd(_CandidateRule):
    variant = Variant.DECODE_END

    def chosen(self, b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
        return [_decode_end(b, g)]


class Both(_CandidateRule):
    variant = Variant.BOTH

    def chosen(self, b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
        return [_input_end(b, g), _decode_end(b, g)]


class Horizon(_CandidateRule):
    variant = Variant.HORIZON

    def chosen(self, b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
        """The deepest position at or before the horizon: in the output when the horizon
        reaches past P_end and a decode state exists there, else in the prompt."""
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


class ChatAware(_CandidateRule):
    variant = Variant.CHAT_AWARE

    def chosen(self, b: RequestBoundaries, g: EngineGeometry) -> list[_Candidate]:
        """At admission the best prompt-side candidate (P_end stands in for D_end when the
        output is expected to round-trip: D_end lies beyond it); at finish D_end replaces it
        only where it materializes deeper. Nothing beyond the twin when no candidate is
        expected to pay."""
        u, p = _reached(_input_end(b, g), b), _reached(_prompt_end(b, g), b)
        prompt = [u] if u.kind is CheckpointKind.INPUT_END and _opens_tool_loop(b) else [u, p]
        candidates = prompt if b.d_end is None else [*prompt, *_decode_candidates(b, g)]
        best = _best(candidates, b, g)
        return [] if best is None else [best]


class ChainFallback(RetentionRule):
    """``decode_end``'s decision, plus U_end held until the next user turn on a request whose
    prompt ends in a user message."""

    variant = SessionVariant.CHAIN_FALLBACK

    def decide(self, request: RequestBoundaries, geometry: EngineGeometry) -> Decision:
        base = DecodeEnd().decide(request, geometry).keeps
        if not request.user_turn:
            return Decision(base)
        u = _input_end(request, geometry)
        if u.kind is not CheckpointKind.INPUT_END or u.position <= 0:
            return Decision(base)
        keeps = {k.position: k for k in base}
        at = keeps.get(u.position)
        kinds = (CheckpointKind.INPUT_END, *(at.kinds if at else ()))
        keeps[u.position] = Keep(u.position, kinds, Phase.PREFILL, until_next_user_turn=True)
        return Decision(tuple(keeps[p] for p in sorted(keeps)))


# -- the registry ----------------------------------------------------------------------------------
RULES: Mapping[str, RetentionRule] = {
    rule.variant.value: rule
    for rule in (MainSparse(), InputEnd(), DecodeEnd(), Both(), ChatAware(), Horizon(), ChainFallback())
}


def rule_for(name: Variant | SessionVariant | str) -> RetentionRule:
    """The rule going by ``name`` (a ``Variant`` or ``SessionVariant`` value)."""
    rule = RULES.get(name)
    if rule is None:
        raise ValueError(f"unknown retention policy {name!r} (known: {', '.join(RULES)})")
    return rule


def decide(
    variant: Variant | SessionVariant | str, request: RequestBoundaries, geometry: EngineGeometry
) -> Decision:
    """The states ``request`` keeps under ``variant`` on ``geometry`` (``RetentionRule.decide``)."""
    return rule_for(variant).decide(request, geometry)


def may_keep_decode(
    variant: Variant | SessionVariant | str, request: RequestBoundaries, geometry: EngineGeometry
) -> bool:
    """Whether ``request``'s finish decision under ``variant`` may keep an output-side state,
    asked at admission (``RetentionRule.may_keep_decode``)."""
    return rule_for(variant).may_keep_decode(request, geometry)
