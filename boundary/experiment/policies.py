"""Retention policies: which logical checkpoints a request asks the cache to keep.

A policy is one decision: ``retain(request) -> tuple[Retain, ...]``. Every variant also keeps
reactive shared-prefix junctions; the cache model does that itself, as vLLM does, so no policy
names them. The proactive endpoints:

- ``main_sparse``: P_end, vLLM's own replay boundary (the baseline);
- ``input_end``: U_end, the end of the stable history (P_end when the template cannot expose it);
- ``decode_end``: D_end, the end of the committed output;
- ``both``: U_end and D_end;
- ``chat_aware``: one endpoint per request, D_end when the output is expected to round-trip
  into the next request (a tool-call continuation), U_end otherwise; as many states per
  request as ``main_sparse``, so it is compared under the same checkpoint-byte budget.

``oracle`` is not a policy: it is a different cache (infinite capacity, a state at every
unit), see ``boundary.cache.oracle``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from boundary.cache.request import Retain
from boundary.checkpoints import CheckpointKind
from boundary.experiment.stream import StreamRequest

ORACLE = "oracle"

RoundTripPredictor = Callable[[StreamRequest], bool]


def expected_round_trip(request: StreamRequest) -> bool:
    """The verifier's prediction when the stream carries one; else the rule it stands in for:
    a tool-call output is continued by tool results with no new user message, so templates
    that drop reasoning only before the last user message keep it."""
    return request.round_trip if request.round_trip is not None else request.tool_call


class RetentionPolicy(Protocol):
    name: str

    def retain(self, request: StreamRequest) -> tuple[Retain, ...]: ...


def _input_end(request: StreamRequest) -> Retain:
    if request.u_end is None:
        return Retain(CheckpointKind.PROMPT_END, request.p_end)
    return Retain(CheckpointKind.INPUT_END, request.u_end)


@dataclass(frozen=True, slots=True)
class MainSparse:
    name: str = "main_sparse"

    def retain(self, request: StreamRequest) -> tuple[Retain, ...]:
        return (Retain(CheckpointKind.PROMPT_END, request.p_end),)


@dataclass(frozen=True, slots=True)
class InputEnd:
    name: str = "input_end"

    def retain(self, request: StreamRequest) -> tuple[Retain, ...]:
        return (_input_end(request),)


@dataclass(frozen=True, slots=True)
class DecodeEnd:
    name: str = "decode_end"

    def retain(self, request: StreamRequest) -> tuple[Retain, ...]:
        return (Retain(CheckpointKind.DECODE_END, request.d_end),)


@dataclass(frozen=True, slots=True)
class Both:
    name: str = "both"

    def retain(self, request: StreamRequest) -> tuple[Retain, ...]:
        return (_input_end(request), Retain(CheckpointKind.DECODE_END, request.d_end))


@dataclass(frozen=True, slots=True)
class ChatAware:
    predictor: RoundTripPredictor = expected_round_trip
    name: str = "chat_aware"

    def retain(self, request: StreamRequest) -> tuple[Retain, ...]:
        if self.predictor(request):
            return (Retain(CheckpointKind.DECODE_END, request.d_end),)
        return (_input_end(request),)


POLICIES: dict[str, Callable[[], RetentionPolicy]] = {
    "main_sparse": MainSparse,
    "input_end": InputEnd,
    "decode_end": DecodeEnd,
    "both": Both,
    "chat_aware": ChatAware,
}
PHASE_ONE = ("main_sparse", "input_end", "decode_end", "both")
ALL_NAMES = (*POLICIES, ORACLE)


def policy(name: str) -> RetentionPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(ALL_NAMES)})") from None
