"""TTFT that pays for forced splits: each scheduler step of a prefill costs a step's fixed cost,
so a split costs one more; Q11 nets the extra steps against the prefill they saved. Worked by
hand."""

from __future__ import annotations

from types import SimpleNamespace

from boundary.cache import CacheRequest, PrefixHasher
from boundary.cache.hybrid import CacheConfig, HybridPrefixCache
from boundary.checkpoints.policies import decide
from boundary.checkpoints.retention import DecodeStates, EngineGeometry, RequestBoundaries
from boundary.experiment import plan
from boundary.experiment.calibration import split_extra_seconds
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.metrics import throughput
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.report.answers import split_cost
from boundary.experiment.scheduler import Replica, Running, SchedulerConfig
from tests.cache.conftest import geometry
from tests.experiment.test_plan import rec


def test_a_forced_split_ends_a_chunk_and_costs_one_more_step():
    """Budget 10. A prompt of 8 tokens with a kept state at 4: the chunk that would cover
    [0, 8) stops at 4, and the prefill takes two steps; the first token comes with the second."""
    replica = Replica(SchedulerConfig(max_num_batched_tokens=10, max_num_seqs=2), lambda i, now: (0, (4,)))
    a = Running(0, 0.0, 8, 1)
    replica.waiting.append(a)
    first = replica.plan(0.0)
    assert [(lo, hi) for _, lo, hi in first.chunks] == [(0, 4)]
    assert replica.complete(first, 1.0) == [] and a.first_token is None
    second = replica.plan(1.0)
    assert [(lo, hi) for _, lo, hi in second.chunks] == [(4, 8)]
    assert replica.complete(second, 2.0) == [a] and a.first_token == 2.0


def test_the_ttft_estimate_charges_a_step_for_every_prefill_step():
    """Prefill [100, 1100) in 3 steps at 2 ms each: the compute estimate plus 6 ms."""
    cost = PrefillCostModel(QWEN3_5_35B_A3B, step_overhead_seconds=0.002)
    assert cost.ttft_seconds(100, 1100, 3) == cost.seconds(100, 1100) + 0.006


def _run(*records):
    return SimpleNamespace(records=list(records))


def test_extra_steps_outweigh_the_prefill_they_saved_when_they_cost_more():
    """main_sparse: request 0 prefills in 30 ms, request 1 in 20 ms, no split. A policy gains 64
    tokens on request 0 (prefill 29 ms) with 2 forced splits (2 x 2 ms), and none on request 1:
    4 ms of extra steps against 1 ms saved: net -3 ms, the steps outweigh it, 32 tokens a step.
    With one split and 9 ms saved instead, the saved prefill pays (net +7 ms)."""
    base = _run(rec(rid=0, joint=0, prefill_seconds=0.030), rec(rid=1, joint=0, prefill_seconds=0.020))
    policy = [
        rec(rid=0, joint=64, prefill_seconds=0.029, forced_splits=2, split_seconds=0.004),
        rec(rid=1, joint=0, prefill_seconds=0.020),
    ]
    c = plan.forced_split_cost(policy, base)
    assert (c["splits"], c["extra_splits"], c["tokens_per_extra_step"]) == (2, 2, 32.0)
    assert round(c["saved_prefill_seconds"], 9) == 0.001 and round(c["net_seconds"], 9) == -0.003
    assert c["outweighs"] is True
    assert "OUTWEIGH" in split_cost({"forced_split_cost": c})
    paying = [
        rec(rid=0, joint=64, prefill_seconds=0.021, forced_splits=1, split_seconds=0.002),
        rec(rid=1, joint=0, prefill_seconds=0.020),
    ]
    c = plan.forced_split_cost(paying, base)
    assert round(c["net_seconds"], 9) == 0.007 and c["outweighs"] is False
    assert "the saved prefill pays" in split_cost({"forced_split_cost": c})


def test_the_baseline_itself_has_no_saving_to_net():
    c = plan.forced_split_cost([rec(rid=0, forced_splits=1, split_seconds=0.002)], None)
    assert c["saved_prefill_seconds"] is None and c["outweighs"] is None
    assert "1 forced splits" in split_cost({"forced_split_cost": c})


def test_an_admission_names_its_prefill_steps_and_where_the_policy_split_it():
    """Block 8, unit 1, a 28-token prompt: the scheduler's own chunk ends are 24 (the last
    block boundary, where P_end's twin is cached), 27 (the prompt tail's unit) and 28, three
    steps; U_end at 26 adds a stop there: four steps, one split at 26. Both executors say so."""
    for engine_steps in (True, False):
        cache = HybridPrefixCache(CacheConfig(geometry(block=8, unit=1), 10_000.0, engine_steps=engine_steps))
        engine = EngineGeometry(8, 1, DecodeStates.BLOCK, True)
        request = CacheRequest.from_tokens(0, list(range(500, 529)), 28, PrefixHasher(1))
        decision = decide("input_end", RequestBoundaries(28, 26, None, 1.0), engine)
        admission = cache.admit(request, decision, 0.0)
        assert (admission.forced_splits, admission.prefill_steps, admission.split_at) == (1, 4, (26,))


def test_a_run_reports_requests_and_tokens_per_second_over_its_schedule():
    """Two requests (100 + 10 and 300 + 5 tokens) over a schedule of 2 s."""
    records = [
        rec(rid=0, prompt_tokens=100, output_tokens=10),
        rec(rid=1, prompt_tokens=300, output_tokens=5),
    ]
    assert throughput(SimpleNamespace(records=records, elapsed=2.0)) == {
        "request_throughput": 1.0,
        "input_token_throughput": 200.0,
        "output_token_throughput": 7.5,
    }
    assert throughput(SimpleNamespace(records=[], elapsed=0.0))["request_throughput"] is None


def test_a_split_read_off_measured_prefill_steps_costs_one_step_overhead():
    """Steps of 2 ms + 10 us a token: 512 tokens in two steps of 256 cost 2 ms more than in one."""
    prefill = {n: 0.002 + 1e-5 * n for n in (256, 512, 1024, 300)}
    extra = split_extra_seconds(prefill)
    assert set(extra) == {512, 1024} and all(abs(v - 0.002) < 1e-12 for v in extra.values())
