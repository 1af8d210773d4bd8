"""The experiment's policies: ``boundary.checkpoints.policies`` applied to stream requests.

Where it sits: in the experiment, between the stream and the cache model: it asks
``boundary.checkpoints.policies`` (checkpoints) for each request; ``replay``, ``harness`` and
``sweep`` call it.

A policy here only translates a ``StreamRequest`` into ``boundary.checkpoints.retention``'s
``RequestBoundaries`` (the round-trip verdict and stability horizon the stream carries) and
asks ``decide`` twice: at admission (D_end not known yet) and at finish. The vLLM plugin
asks the same function with the same inputs, so both executors run the same variants.

``oracle`` is not a policy: it is a different cache (infinite capacity, a state at every
unit), see ``boundary.cache.oracle``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from boundary.checkpoints import retention as retention_policy
from boundary.checkpoints.policies import RULES, decide, may_keep_decode
from boundary.checkpoints.retention import (
    Decision,
    EngineGeometry,
    RequestBoundaries,
    SessionVariant,
    Variant,
    capped_d_end,
)
from boundary.experiment.stream import Continuation, StreamRequest

ORACLE = "oracle"

RoundTripPredictor = Callable[[StreamRequest], bool]


def expected_round_trip(request: StreamRequest) -> bool:
    """The verifier's prediction when the stream carries one; else the rule it stands in for:
    a tool-call output is continued by tool results with no new user message, so templates
    that drop reasoning only before the last user message keep it."""
    return request.round_trip if request.round_trip is not None else request.tool_call


def boundaries(
    request: StreamRequest, *, finished: bool, predictor: RoundTripPredictor = expected_round_trip
) -> RequestBoundaries:
    """The policy's inputs for ``request``; D_end (capped at the computed tokens) only once
    ``finished``."""
    d_end = capped_d_end(request.d_end, len(request.tokens), request.p_end) if finished else None
    return RequestBoundaries(
        p_end=request.p_end,
        u_end=request.u_end,
        d_end=d_end,
        round_trip=1.0 if predictor(request) else 0.0,
        horizon=request.horizon,
        user_turn=request.continuation is not Continuation.TOOL,
        tool_call=request.tool_call,
    )


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """One variant. ``admission`` / ``finish``: the decision at each phase."""

    variant: Variant | SessionVariant
    predictor: RoundTripPredictor = expected_round_trip

    @property
    def name(self) -> str:
        return self.variant.value

    def admission(self, request: StreamRequest, geometry: EngineGeometry) -> Decision:
        return decide(self.variant, boundaries(request, finished=False, predictor=self.predictor), geometry)

    def finish(self, request: StreamRequest, geometry: EngineGeometry) -> Decision:
        return decide(self.variant, boundaries(request, finished=True, predictor=self.predictor), geometry)


def keeps_decode(policy: RetentionPolicy, request: StreamRequest, geometry: EngineGeometry) -> bool:
    """Whether ``request``'s decode boundaries stay keyed until finish under the page-by-page pool
    (``engine_steps``): ``may_keep_decode`` asked at admission, the rule the
    plugin's tentative hold follows (D_end is not known before finish)."""
    return may_keep_decode(
        policy.variant, boundaries(request, finished=False, predictor=policy.predictor), geometry
    )


# The names are ``Variant``'s values (one enum names every policy, here, in the CLI and in the plugin).
PHASE_ONE = tuple(v.value for v in retention_policy.PHASE_ONE)
POLICIES = tuple(v.value for v in Variant)
# Experiment-only variants (``SessionVariant``: the vLLM plugin cannot hold a state across a
# session's requests); run only when ``--policies`` names them.
SESSION_POLICIES = tuple(v.value for v in SessionVariant)
ALL_NAMES = (*POLICIES, *SESSION_POLICIES, ORACLE)


def policy(name: str) -> RetentionPolicy:
    """The policy going by ``name``: the rule ``boundary.checkpoints.policies.RULES`` names so."""
    rule = RULES.get(name)
    if rule is None:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(ALL_NAMES)})")
    return RetentionPolicy(rule.variant)
