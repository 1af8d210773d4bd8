"""The experiment's policies: ``boundary.retention_policy`` applied to stream requests.

Where it sits: in the experiment, between the stream and the cache model: it asks
``boundary.retention_policy`` (checkpoints) for each request; ``replay``, ``harness`` and
``sweep`` call it.

A policy here only translates a ``StreamRequest`` into the policy module's
``RequestBoundaries`` (the round-trip verdict and stability horizon the stream carries) and
asks ``decide`` twice: at admission (D_end not known yet) and at finish. The vLLM plugin
asks the same function with the same inputs, so both executors run the same variants.

``oracle`` is not a policy: it is a different cache (infinite capacity, a state at every
unit), see ``boundary.cache.oracle``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from boundary.experiment.stream import StreamRequest
from boundary.retention_policy import Decision, EngineGeometry, RequestBoundaries, Variant, decide

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
    d_end = min(request.d_end, len(request.tokens) - 1) if finished else None
    return RequestBoundaries(
        p_end=request.p_end,
        u_end=request.u_end,
        d_end=max(d_end, request.p_end) if d_end is not None else None,
        round_trip=1.0 if predictor(request) else 0.0,
        horizon=request.horizon,
    )


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """One variant. ``admission`` / ``finish``: the decision at each phase."""

    variant: Variant
    predictor: RoundTripPredictor = expected_round_trip

    @property
    def name(self) -> str:
        return self.variant.value

    def admission(self, request: StreamRequest, geometry: EngineGeometry) -> Decision:
        return decide(self.variant, boundaries(request, finished=False, predictor=self.predictor), geometry)

    def finish(self, request: StreamRequest, geometry: EngineGeometry) -> Decision:
        return decide(self.variant, boundaries(request, finished=True, predictor=self.predictor), geometry)


PHASE_ONE = ("main_sparse", "input_end", "decode_end", "both")
POLICIES = (*PHASE_ONE, "chat_aware", "horizon")
ALL_NAMES = (*POLICIES, ORACLE)


def policy(name: str) -> RetentionPolicy:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(ALL_NAMES)})")
    return RetentionPolicy(Variant(name))
