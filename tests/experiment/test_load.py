"""The closed-loop load model: the scheduler's steps, the serving clock and the load summary,
each worked out by hand on a stream of one or two sessions."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, replace

import pytest

from boundary.cache.accounting import geometry_for_unit
from boundary.cache.hybrid import CacheConfig
from boundary.cache.retention import engine_geometry
from boundary.checkpoints.retention import DecodeStates
from boundary.experiment.calibration import (
    ASSUMED_H200,
    MEASURED_STEP_CONSTANTS,
    StepConstants,
    step_constants,
)
from boundary.experiment.cost import StepCostModel
from boundary.experiment.load import saturated, saturation_points, summary
from boundary.experiment.policies import policy
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.replay import BudgetMode
from boundary.experiment.scheduler import Replica, Running, SchedulerConfig
from boundary.experiment.serving import LoadModel, Routing, client_delays, serve
from boundary.experiment.stream import Continuation, Stream, StreamRequest, cache_requests

GIB = 2**30
INF = float("inf")


@dataclass(frozen=True)
class LinearPrefill:
    """A prefill cost of one FLOP per token at 1000 FLOP/s: 1000 tokens take one second."""

    peak_flops: float = 1000.0
    utilization: float = 1.0

    def flops(self, start: int, end: int) -> float:
        return float(max(end - start, 0))

    step_overhead_seconds: float = 0.0

    def seconds(self, start: int, end: int) -> float:
        return self.flops(start, end) / 1000.0

    def ttft_seconds(self, start: int, end: int, steps: int) -> float:
        return self.seconds(start, end) + steps * self.step_overhead_seconds


# 0.5 s per step, 1 s more when it decodes, nothing per sequence.
CONSTANTS = StepConstants(0.5, 1.0, 0.0, source="test")
COST = StepCostModel(LinearPrefill(), CONSTANTS)  # type: ignore[arg-type]


def replica(budget: int, seqs: int, hits: dict[int, int] | None = None, memory: float = INF) -> Replica:
    return Replica(
        SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=seqs),
        lambda index, now: ((hits or {}).get(index, 0), ()),
        memory,
    )


def test_a_step_decodes_first_then_continues_prefills_then_admits_first_come_first_served():
    """Budget 10, at most 2 sequences. A (prompt 12, output 2) and B (prompt 5, output 1) wait.
    Step 1: A is admitted with chunk [0, 10); the budget is spent, B waits.
    Step 2: A's chunk [10, 12) (2 tokens), then B is admitted with [0, 5) (5 tokens); both
    prompts end, both sample their first token; B (one output token) finishes.
    Step 3: A decodes its second token (1 token of the budget) and finishes."""
    r = replica(10, 2)
    a, b = Running(0, 0.0, 12, 2), Running(1, 0.0, 5, 1)
    r.waiting.extend([a, b])
    s1 = r.plan(0.0)
    assert [(x.index, lo, hi) for x, lo, hi in s1.chunks] == [(0, 0, 10)] and not s1.decode
    assert r.complete(s1, 1.0) == [] and list(r.waiting) == [b]
    s2 = r.plan(1.0)
    assert [(x.index, lo, hi) for x, lo, hi in s2.chunks] == [(0, 10, 12), (1, 0, 5)]
    assert r.complete(s2, 2.0) == [b] and a.first_token == b.first_token == 2.0
    s3 = r.plan(2.0)
    assert s3.decode == [a] and not s3.chunks
    assert r.complete(s3, 3.0) == [a] and r.running == []


def test_decode_tokens_come_out_of_the_step_budget_before_prefill_chunks():
    """Budget 10: a decoding sequence takes 1 token, so a waiting 20-token prompt gets a
    9-token chunk [0, 9), not 10."""
    r = replica(10, 4)
    d = Running(0, 0.0, 2, 5, computed=2, produced=1)
    r.running.append(d)
    r.waiting.append(Running(1, 0.0, 20, 1))
    step = r.plan(0.0)
    assert step.decode == [d] and [(lo, hi) for _, lo, hi in step.chunks] == [(0, 9)]


def test_admission_starts_at_the_cache_hit_and_respects_max_num_seqs_and_memory():
    """Request 0 hits 8 of its 10 prompt tokens: its chunk is [8, 10). With max_num_seqs 1 the
    second request waits; with room for one reserve of 5 bytes in 8, so does it."""
    r = replica(100, 1, hits={0: 8})
    r.waiting.extend([Running(0, 0.0, 10, 3), Running(1, 0.0, 10, 3)])
    step = r.plan(0.0)
    assert [(lo, hi) for _, lo, hi in step.chunks] == [(8, 10)] and len(r.waiting) == 1
    m = replica(100, 4, memory=8)
    m.waiting.extend([Running(0, 0.0, 10, 3, reserve=5), Running(1, 0.0, 10, 3, reserve=5)])
    m.plan(0.0)
    assert len(m.running) == 1 and m.reserved == 5 and len(m.waiting) == 1


def _request(
    rid: int, session: str, turn: int, tokens: list[int], prompt: int, kind: Continuation
) -> StreamRequest:
    return StreamRequest(
        rid=rid,
        session=session,
        turn=turn,
        tokens=array("I", tokens),
        num_prompt_tokens=prompt,
        u_end=None,
        d_end=len(tokens) - 1,
        continuation=kind,
    )


def _two_turns(session: str = "s", first_rid: int = 0, base: int = 1) -> list[StreamRequest]:
    """Turn 0: a 2,000-token prompt and 3 output tokens; turn 1: turn 0's prompt and output
    followed by 997 new prompt tokens (a 3,000-token prompt) and 1 output token."""
    prompt0 = list(range(base, base + 2000))
    out0 = [90_000, 90_001, 90_002]
    prompt1 = prompt0 + out0 + list(range(base + 50_000, base + 50_997))
    return [
        _request(first_rid, session, 0, prompt0 + out0, 2000, Continuation.FIRST),
        _request(first_rid + 1, session, 1, [*prompt1, 90_003], 3000, Continuation.TOOL),
    ]


def _serve(stream: list[StreamRequest], model: LoadModel, name: str = "main_sparse"):
    g = geometry_for_unit(QWEN3_5_35B_A3B, 16)
    requests = cache_requests(Stream("t", {}, stream), 16)
    config = CacheConfig(g, 8 * GIB)
    return serve(stream, requests, policy(name), config, engine_geometry(g, DecodeStates.BLOCK), COST, model)


def test_one_closed_loop_session_is_timed_step_by_step():
    """No client delays (think and tool time 0). Turn 0 arrives at 0: one prefill step
    0.5 + 2000 / 1000 = 2.5 s (TTFT 2.5), then 2 decode steps of 0.5 + 1 = 1.5 s taken in one
    stride: it finishes at 5.5. Turn 1 arrives then (closed loop) and hits main_sparse's P_end
    state at floor(1999 / 16) * 16 = 1984: one step 0.5 + (3000 - 1984) / 1000 = 1.516 s, its
    only output token at 7.016. The user has no session left at 7.016: the window.
    Offered: 1 user / (mean delay 0 + mean unloaded latency (5.5 + 1.516) / 2 = 3.508) = 0.2851
    req/s; throughput 2 / 7.016 = 0.2851: not saturated. Capacity at the fullest batch (1
    user: 1): engine-seconds 2.0 + 2 x 1.5 = 5.0 and 1.016 + 0 = 1.016, mean 3.008: 0.3324
    req/s."""
    run = _serve(_two_turns(), LoadModel(concurrency=1, think_time=0.0, tool_latency=0.0))
    assert [r.joint for r in run.records] == [0, 1984]
    t0, t1 = run.timings
    assert (t0.arrival, t0.first_token, t0.finish) == pytest.approx((0.0, 2.5, 5.5))
    assert (t1.arrival, t1.first_token, t1.finish) == pytest.approx((5.5, 7.016, 7.016))
    assert run.window == pytest.approx(7.016)
    s = summary(run, [3, 1], COST)
    assert s["ttft_p50_seconds"] == pytest.approx((2.5 + 1.516) / 2)
    assert s["unloaded_latency_mean_seconds"] == pytest.approx(3.508)
    assert s["offered_requests_per_second"] == pytest.approx(1 / 3.508)
    assert s["request_throughput_per_second"] == pytest.approx(2 / 7.016)
    assert s["saturated"] is False
    assert s["full_batch"] == 1
    assert s["capacity_requests_per_second"] == pytest.approx(1 / 3.008)


def _two_sessions() -> list[StreamRequest]:
    """Sessions a and b (``_two_turns``, disjoint tokens), in arrival order a0, b0, a1, b1."""
    a, b = _two_turns("a", 0, 1), _two_turns("b", 2, 200_000)
    return [replace(r, rid=i) for i, r in enumerate((a[0], b[0], a[1], b[1]))]


def test_two_users_on_one_replica_share_its_steps():
    """Two identical sessions, two users, no delays, one replica. Step 1 admits both turn-0
    prompts (2,000 + 2,000 tokens within the 8,192 budget): 0.5 + 4 = 4.5 s, TTFT 4.5 each.
    Both then decode 2 steps together (1.5 s each): both finish at 7.5."""
    stream = _two_sessions()
    run = _serve(stream, LoadModel(concurrency=2, think_time=0.0, tool_latency=0.0))
    firsts = [run.timings[0], run.timings[1]]
    assert [t.first_token for t in firsts] == pytest.approx([4.5, 4.5])
    assert [t.finish for t in firsts] == pytest.approx([7.5, 7.5])


def test_the_router_pins_sessions_or_takes_replicas_in_turn():
    """Two sessions of two requests over two replicas: sticky puts session a (ordinal 0) on
    replica 0 and b on 1; round robin alternates by arrival: a0 (0), b0 (1), then the two
    second turns in arrival order (a1 and b1 arrive together at 5.5: a1 first) on 0 and 1."""
    stream = _two_sessions()
    base = {"concurrency": 2, "replicas": 2, "think_time": 0.0, "tool_latency": 0.0}
    sticky = _serve(stream, LoadModel(**base))
    assert [t.replica for t in sticky.timings] == [0, 1, 0, 1]
    rr = _serve(stream, LoadModel(**base, routing=Routing.ROUND_ROBIN))
    assert sorted(t.replica for t in rr.timings) == [0, 0, 1, 1]
    assert sticky.records[2].joint == 1984  # a1 found a0's state on its own replica


def test_client_delays_are_drawn_once_and_the_same_for_every_policy():
    stream = _two_turns()
    model = LoadModel(concurrency=1, seed=3)
    first = client_delays([stream], model)
    assert first == client_delays([stream], model)
    a, b = _serve(stream, model, "main_sparse"), _serve(stream, model, "input_end")
    assert [t.delay for t in a.timings] == [t.delay for t in b.timings] == first[0]


def test_saturation_is_throughput_below_ninety_percent_of_the_offered_load():
    assert saturated(0.89, 1.0) and not saturated(0.9, 1.0) and not saturated(None, 1.0)
    points = [
        {"policy": "p", "capacity_gib": 8, "concurrency": c, "load": {"saturated": s}}
        for c, s in ((16, False), (64, False), (256, True), (512, True))
    ]
    assert saturation_points(points) == {"p @ 8 GiB": {"last_unsaturated": 64, "first_saturated": 256}}


def test_measured_step_constants_replace_the_assumed_ones_by_model_name():
    assert step_constants("nobody") is ASSUMED_H200
    MEASURED_STEP_CONSTANTS["m"] = CONSTANTS
    try:
        assert step_constants("m") is CONSTANTS
    finally:
        del MEASURED_STEP_CONSTANTS["m"]


def test_a_step_costs_overhead_decode_batch_and_prefill_flops():
    """0.5 + (1 + 0 x 3) + 2000 / 1000 = 3.5 s; an empty step costs nothing."""
    assert COST.seconds(3, 2000.0) == pytest.approx(3.5)
    assert COST.seconds(0, 0.0) == 0.0


def test_the_load_sweep_reports_every_point_labels_saturation_and_states_its_assumptions():
    from boundary.experiment.harness import ExperimentConfig, run_experiment
    from boundary.experiment.report import markdown
    from tests.experiment.conftest import synthetic_stream

    config = ExperimentConfig(
        units=(16,),
        policies=("main_sparse", "input_end", "both"),
        budgets=(BudgetMode.EQUAL_CAPACITY,),
        disaggregation=False,
        load_concurrency=(2, 48),
        load_capacity_gib=(2.0,),
        max_num_seqs=8,
    )
    result = run_experiment(synthetic_stream(12), QWEN3_5_35B_A3B, config)
    points = result.units[0].load_sweep
    assert [(p["concurrency"], p["policy"]) for p in points] == [
        (c, n) for c in (2, 48) for n in ("main_sparse", "input_end", "both")
    ]
    for p in points:
        load = p["load"]
        assert load["ttft_p50_seconds"] <= load["ttft_p95_seconds"] <= load["ttft_p99_seconds"]
        assert load["full_batch"] <= 8 and p["overcommits"] == 0
    assert not any(p["load"]["saturated"] for p in points if p["concurrency"] == 2)
    assert all(p["load"]["saturated"] for p in points if p["concurrency"] == 48)  # 8 sequences at most
    report = markdown(result)
    assert "Families (GPU assumptions)" in report and "load model (GPU assumptions" in report
    assert report.count("**saturated**") == 3 + report.count("A point is **saturated**")
    assert "| main_sparse @ 2 GiB | 2 | 48 |" in report
