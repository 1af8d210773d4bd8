"""Load: the prefill engine as a queue whose service time shrinks with the cache hit.

Where it sits: in the experiment, after the replay: the prefill queue over a run's records;
``metrics`` and ``sweep`` call it.

Requests reach one prefill engine at the stream's arrival times and are served first come,
first served; a request's service time is the cost model's prefill time from its joint hit
to its prompt end (``RequestRecord.ttft_seconds``), so a policy that reuses more drains the
queue faster. TTFT = time waiting in the queue + service. Throughput is measured over the
span from the first arrival to the last prefill completion: when the engine keeps up it
equals the offered load for every policy; once it saturates it is the engine's rate, and a
policy's hits raise it.

Simplifications (stated in every report): arrivals, decode times and the cache's event
order come from the stream's no-cache schedule, so the cache sees the same interleaving under
every policy (closed-loop feedback of a faster TTFT onto the next arrival is not modelled);
decode is not contended; prefill requests are not batched together.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from boundary.experiment.replay import RequestRecord


@dataclass(frozen=True, slots=True)
class QueueResult:
    """One replay's records through the prefill queue (seconds; throughput per second)."""

    ttft: tuple[float, ...]
    waits: tuple[float, ...]
    span_seconds: float
    busy_seconds: float
    request_throughput: float | None
    input_token_throughput: float | None

    def summary(self) -> dict[str, float | None]:
        return {
            "ttft_mean_seconds": statistics.fmean(self.ttft) if self.ttft else None,
            "ttft_p50_seconds": _percentile(self.ttft, 0.5),
            "ttft_p90_seconds": _percentile(self.ttft, 0.9),
            "ttft_p99_seconds": _percentile(self.ttft, 0.99),
            "queue_wait_mean_seconds": statistics.fmean(self.waits) if self.waits else None,
            "request_throughput_per_second": self.request_throughput,
            "input_token_throughput_per_second": self.input_token_throughput,
            "prefill_engine_utilization": self.busy_seconds / self.span_seconds
            if self.span_seconds
            else None,
        }


def prefill_queue(records: Sequence[RequestRecord]) -> QueueResult:
    """FIFO through one prefill engine, in arrival order (ties by request id)."""
    ordered = sorted(records, key=lambda r: (r.arrival, r.rid))
    free_at = 0.0
    ttft: list[float] = []
    waits: list[float] = []
    busy = 0.0
    for r in ordered:
        start = max(r.arrival, free_at)
        free_at = start + r.ttft_seconds
        busy += r.ttft_seconds
        waits.append(start - r.arrival)
        ttft.append(free_at - r.arrival)
    span = free_at - ordered[0].arrival if ordered else 0.0
    tokens = sum(r.prompt_tokens for r in ordered)
    return QueueResult(
        ttft=tuple(ttft),
        waits=tuple(waits),
        span_seconds=span,
        busy_seconds=busy,
        request_throughput=len(ordered) / span if span > 0 else None,
        input_token_throughput=tokens / span if span > 0 else None,
    )


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
