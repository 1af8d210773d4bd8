"""Arrival times: recorded in the trace (``recorded``), or synthesised so that about
``concurrency`` sessions are active at once (``interleave``).

Where it sits: in the experiment, between the rendered stream (``stream``) and the replay: it
times the requests; ``workloads`` and ``sweep`` call it.

A session's requests are sequential: the next arrives after the previous one finishes plus
a client delay (tool latency after a tool call, think time before a new user message,
both exponential). A request's time in flight is its estimated prefill with no cache hit
plus its decode time, so the schedule is the same for every policy and every policy
replays the identical stream. Sessions start as a Poisson process whose rate makes the
mean number of active sessions ``concurrency`` (Little's law: rate = concurrency / mean
session duration). Seeded: the same inputs give the same schedule.

A trace that records arrivals (``boundary.trace.records``'s ``arrival_s``) is replayed on its own
clock instead (``recorded``): a request arrives at its recorded time, measured from the
trace's earliest arrival, unless its session's previous request has not finished by then on
this schedule (a closed-loop session never sends before the previous reply is complete): then
it arrives at that finish, and is counted as delayed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.stream import Continuation, StreamRequest

TOOL_LATENCY_SECONDS = 1.0  # mean client delay after a tool call (exponential)
THINK_TIME_SECONDS = 10.0  # mean client delay before a new user message (exponential)


def service_seconds(request: StreamRequest, cost: PrefillCostModel) -> float:
    """Time in flight on the uncontended schedule: prefill with no cache hit, then decode."""
    return cost.seconds(0, request.num_prompt_tokens) + cost.decode_seconds(request.output_tokens)


@dataclass(frozen=True, slots=True)
class RecordedSchedule:
    """The requests on the trace's clock; ``delayed``: requests that arrived later than recorded
    (their session's previous request had not finished), ``delay_seconds`` their total delay."""

    requests: list[StreamRequest]
    delayed: int
    delay_seconds: float


def recorded(sessions: Sequence[Sequence[StreamRequest]], cost: PrefillCostModel) -> RecordedSchedule:
    """Every request at its ``recorded_arrival`` (minus the earliest one), or at its session's
    previous finish when that is later; in arrival order, ``rid`` renumbered to that order."""
    times = [r.recorded_arrival for s in sessions for r in s]
    if not times or any(t is None for t in times):
        raise ValueError("recorded arrivals need a recorded_arrival on every request")
    origin = min(t for t in times if t is not None)
    placed: list[tuple[float, int, int, StreamRequest, float]] = []
    delayed, delay = 0, 0.0
    for s, session in enumerate(sessions):
        free = 0.0  # when the session's previous request finished
        for i, r in enumerate(session):
            wanted = (r.recorded_arrival or 0.0) - origin
            arrive = max(wanted, free)
            if arrive > wanted:
                delayed, delay = delayed + 1, delay + arrive - wanted
            free = arrive + service_seconds(r, cost)
            placed.append((arrive, s, i, r, free))
    placed.sort(key=lambda p: (p[0], p[1], p[2]))
    timed = [replace(r, rid=k, arrival=a, finish=f) for k, (a, _, _, r, f) in enumerate(placed)]
    return RecordedSchedule(timed, delayed, delay)


def interleave(
    sessions: Sequence[Sequence[StreamRequest]],
    cost: PrefillCostModel,
    *,
    concurrency: float = 16.0,
    seed: int = 0,
    tool_latency: float = TOOL_LATENCY_SECONDS,
    think_time: float = THINK_TIME_SECONDS,
) -> list[StreamRequest]:
    """Every request with arrival and finish times, in arrival order, ``rid`` renumbered to
    that order."""
    rng = random.Random(seed)
    timed: list[list[tuple[float, float]]] = []
    durations = []
    for session in sessions:
        clock, times = 0.0, []
        for i, r in enumerate(session):
            if i:
                mean = tool_latency if r.continuation is Continuation.TOOL else think_time
                clock += rng.expovariate(1.0 / mean) if mean > 0 else 0.0
            service = service_seconds(r, cost)
            times.append((clock, clock + service))
            clock += service
        timed.append(times)
        durations.append(clock)
    mean_duration = sum(durations) / max(len(durations), 1)
    gap = mean_duration / concurrency if concurrency > 0 else 0.0
    start = 0.0
    placed: list[tuple[float, int, int, StreamRequest, float]] = []
    for s, (session, times) in enumerate(zip(sessions, timed, strict=True)):
        if s:
            start += rng.expovariate(1.0 / gap) if gap > 0 else 0.0
        for i, (r, (arrive, finish)) in enumerate(zip(session, times, strict=True)):
            placed.append((start + arrive, s, i, r, start + finish))
    placed.sort(key=lambda p: (p[0], p[1], p[2]))
    return [
        replace(r, rid=k, arrival=arrive, finish=finish) for k, (arrive, _, _, r, finish) in enumerate(placed)
    ]
