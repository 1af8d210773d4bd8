"""Arrival times: sessions interleaved so that about ``concurrency`` are active at once.

Where it sits: in the experiment, between the rendered stream (``stream``) and the replay: it
times the requests; ``workloads`` and ``sweep`` call it.

A session's requests are sequential: the next arrives after the previous one finishes plus
a client delay (tool latency after a tool call, think time before a new user message,
both exponential). A request's time in flight is its estimated prefill with no cache hit
plus its decode time, so the schedule is the same for every policy and every policy
replays the identical stream. Sessions start as a Poisson process whose rate makes the
mean number of active sessions ``concurrency`` (Little's law: rate = concurrency / mean
session duration). Seeded: the same inputs give the same schedule.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.stream import Continuation, StreamRequest

TOOL_LATENCY_SECONDS = 1.0  # mean client delay after a tool call (exponential)
THINK_TIME_SECONDS = 10.0  # mean client delay before a new user message (exponential)


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
            service = cost.seconds(0, r.num_prompt_tokens) + cost.decode_seconds(r.output_tokens)
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
