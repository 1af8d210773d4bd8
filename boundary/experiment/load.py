"""Load: what a closed-loop serving run (``serving``) measured, against what it was offered.

Where it sits: in the experiment, after the serving model: summarises a run's TTFT, throughput
and saturation; ``sweep`` calls it.

Every figure is over the measurement window (``ServingRun.window``: while all
``concurrency`` users had a session to run): TTFT percentiles over the requests that arrived
in it, throughput over the requests that finished in it.

*Offered load* is the request rate the users would generate if no request ever waited for the
scheduler: Little's law for a closed loop, ``concurrency / (mean client delay + mean unloaded
latency)``, where a request's unloaded latency is its prefill chunks (one step per
``max_num_batched_tokens``, from the policy's own joint hit) plus its decode steps at the run's
mean decode batch (a bigger batch's slower steps are the cost of batching, not saturation).
*Capacity* is an upper bound on what the replicas can serve of this request mix: replicas /
mean engine-seconds per request, a request's engine-seconds being its prefill time plus its
share of decode steps at the fullest batch the load allows (``full_batch``: ``max_num_seqs``,
the users, and the running requests the replica's memory holds). A point is **saturated**
when its measured throughput falls below ``SATURATED_BELOW`` of its offered load: queueing
stretched the users' cycle by more than 1 / 0.9 − 1 ≈ 11 %. Saturated points are labelled
and never a headline.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from boundary.experiment.aggregate import percentile, ratio
from boundary.experiment.cost import StepCostModel
from boundary.experiment.replay import RequestRecord
from boundary.experiment.serving import RESERVED_STATES, ServingRun

SATURATED_BELOW = 0.9


def unloaded_seconds(
    record: RequestRecord, output_tokens: int, cost: StepCostModel, budget: int, batch: float = 1.0
) -> float:
    """``record``'s latency with no waiting: its prefill chunks (one step each) from the joint
    hit, then ``output_tokens - 1`` decode steps at a batch of ``batch`` sequences."""
    chunks = math.ceil((record.prompt_tokens - record.joint) / budget)
    c = cost.constants
    prefill = chunks * c.step_overhead_seconds + cost.prefill.seconds(record.joint, record.prompt_tokens)
    decode = c.step_overhead_seconds + c.decode_base_seconds + c.decode_seconds_per_sequence * batch
    return prefill + max(output_tokens - 1, 0) * decode


def engine_seconds(record: RequestRecord, output_tokens: int, cost: StepCostModel, batch: int) -> float:
    """``record``'s share of a replica's time at a full batch of ``batch`` sequences: its
    prefill from the joint hit (the step that ends it samples the first token) and its share
    of ``output_tokens - 1`` decode steps."""
    step = cost.constants.step_overhead_seconds + cost.decode_seconds(batch)
    prefill = cost.prefill.seconds(record.joint, record.prompt_tokens)
    return prefill + max(output_tokens - 1, 0) * step / batch


def full_batch(run: ServingRun, output_tokens: list[int]) -> int:
    """The largest batch a replica can run: ``max_num_seqs``, the users, and the running
    requests whose mean reserve (``serving``'s) fits the replica's memory (at least 1)."""
    m, cache = run.model, run.caches[0]
    g = cache.geometry
    if not run.records:
        return 1
    blocks = statistics.fmean(
        -(-(r.prompt_tokens + output_tokens[i]) // g.block_size) for i, r in enumerate(run.records)
    )
    reserve = blocks * g.block_bytes + RESERVED_STATES * g.state_bytes
    fits = int(cache.working.capacity // reserve) if math.isfinite(cache.working.capacity) else m.concurrency
    return max(1, min(m.scheduler.max_num_seqs, m.concurrency, fits))


def summary(run: ServingRun, output_tokens: list[int], cost: StepCostModel) -> dict[str, Any]:
    """TTFT, throughput, offered load, capacity and the saturation label of one run
    (``output_tokens``: by ``rid``, as the records)."""
    m, window = run.model, run.window
    arrived = [i for i, t in enumerate(run.timings) if t.arrival <= window]
    finished = [i for i, t in enumerate(run.timings) if t.finish <= window]
    ttft = [run.timings[i].ttft for i in arrived]
    budget, batch = m.scheduler.max_num_batched_tokens, full_batch(run, output_tokens)
    unloaded = [
        unloaded_seconds(run.records[i], output_tokens[i], cost, budget, run.mean_decode_batch)
        for i in arrived
    ]
    delays = [run.timings[i].delay for i in arrived]
    offered = m.concurrency / (statistics.fmean(delays) + statistics.fmean(unloaded)) if arrived else None
    engine = [engine_seconds(run.records[i], output_tokens[i], cost, batch) for i in arrived]
    capacity = m.replicas / statistics.fmean(engine) if engine else None
    throughput = ratio(len(finished), window)
    return {
        "window_seconds": window,
        "requests_in_window": len(arrived),
        "ttft_mean_seconds": statistics.fmean(ttft) if ttft else None,
        "ttft_p50_seconds": percentile(ttft, 0.5),
        "ttft_p95_seconds": percentile(ttft, 0.95),
        "ttft_p99_seconds": percentile(ttft, 0.99),
        "unloaded_latency_mean_seconds": statistics.fmean(unloaded) if unloaded else None,
        "mean_decode_batch": run.mean_decode_batch,
        "full_batch": batch,
        "request_throughput_per_second": throughput,
        "input_token_throughput_per_second": ratio(
            sum(run.records[i].prompt_tokens for i in finished), window
        ),
        "output_token_throughput_per_second": ratio(sum(output_tokens[i] for i in finished), window),
        "offered_requests_per_second": offered,
        "capacity_requests_per_second": capacity,
        "offered_over_capacity": None if offered is None or not capacity else offered / capacity,
        "saturated": saturated(throughput, offered),
    }


def saturated(throughput: float | None, offered: float | None) -> bool:
    """Measured throughput below ``SATURATED_BELOW`` of the offered load."""
    return throughput is not None and offered is not None and throughput < SATURATED_BELOW * offered


def saturation_points(points: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per policy and capacity (``"<policy> @ <GiB>"``): the largest swept concurrency that is
    not saturated and the smallest that is (None: none such in the sweep)."""
    out: dict[str, dict[str, float | None]] = {}
    for p in points:
        key = f"{p['policy']} @ {p['capacity_gib']:g} GiB"
        at = out.setdefault(key, {"last_unsaturated": None, "first_saturated": None})
        c = p["concurrency"]
        if p["load"]["saturated"]:
            first = at["first_saturated"]
            at["first_saturated"] = c if first is None else min(first, c)
        else:
            last = at["last_unsaturated"]
            at["last_unsaturated"] = c if last is None else max(last, c)
    return out
