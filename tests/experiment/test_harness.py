"""The experiment over whole streams: invariants, bounds, budgets, the metrics it reports."""

from __future__ import annotations

import pytest

from boundary.cache import CacheConfig, engine_geometry, geometry_for_unit
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.harness import GIB, ExperimentConfig, run_experiment
from boundary.experiment.policies import policy
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.replay import BudgetMode, event_order, replay, replay_oracle
from boundary.experiment.stream import cache_requests
from boundary.experiment.workloads import WorkloadOptions, rendered_sessions
from boundary.experiment.workloads.synthetic import SyntheticShape
from tests.experiment.conftest import synthetic_stream

COST = PrefillCostModel(QWEN3_5_35B_A3B)
ISSUE_METRICS = (
    "request_throughput",
    "input_token_throughput",
    "output_token_throughput",
    "forced_split_cost",
    "selected_checkpoint",
    "materialized_boundary",
    "producer_age",
    "attention_matched_tokens",
    "recurrent_matched_tokens",
    "joint_matched_tokens",
    "additional_matched_tokens_vs_main_sparse",
    "prompt_tokens_recomputed",
    "avoided_prefill_flops",
    "first_continuation",
    "steady_state",
    "reactive_branch_learning_misses",
    "retained_state_bytes",
    "checkpoint_creations",
    "checkpoint_hits",
    "checkpoint_lifetimes",
    "evictions",
    "displaced_checkpoints",
    "occupancy",
    "forced_scheduler_splits",
    "duplicate_candidates",
    "candidates_on_twin",
    "junctions_on_kept_states",
    "reused_over_unit1_oracle",
    "disaggregated_consumability",
    "ttft_estimate_seconds",
    "decode_end_hit_rate",
    "input_end_fallback_rate",
    "first_continuation_effective_hit_rate",
    "saved_prompt_tokens_per_retained_state_byte",
    "saved_prefill_work_per_retained_state_byte",
)


def small_config(**changes) -> ExperimentConfig:
    return ExperimentConfig(**{"capacity_gib": 2.0, "units": (16,), **changes})


def test_every_policy_and_budget_reports_every_metric_the_experiment_names(stream):
    result = run_experiment(stream, QWEN3_5_35B_A3B, small_config())
    runs = result.units[0].runs
    assert {(r["policy"], r["budget"]) for r in runs} == {
        (p, b.value)
        for p in ("main_sparse", "input_end", "decode_end", "both", "chat_aware", "horizon")
        for b in BudgetMode
    }
    for r in runs:
        assert set(ISSUE_METRICS) <= set(r), sorted(set(ISSUE_METRICS) - set(r))
    both = result.run("both", "equal_capacity")
    assert set(both["incremental_hit_rate"]) == {"over_input_end", "over_decode_end"}
    assert set(both["incremental_saved_work"]) == {"over_input_end", "over_decode_end"}
    assert result.units[0].oracle["hit_rate"]["reused_over_oracle"] == 1.0


@pytest.mark.parametrize("name", ["main_sparse", "input_end", "decode_end", "both", "chat_aware", "horizon"])
@pytest.mark.parametrize("unit", [1, 16, 1056])
def test_no_policy_reuses_more_than_the_oracle_and_the_cache_invariants_hold_after_every_event(
    stream, name, unit
):
    geometry = geometry_for_unit(QWEN3_5_35B_A3B, unit)
    requests = cache_requests(stream, unit)
    events = event_order(requests)
    oracle = replay_oracle(requests, unit, events)
    config = CacheConfig(geometry, 1.5 * GIB)
    run = replay(
        stream,
        requests,
        policy(name),
        config,
        COST,
        oracle,
        budget=BudgetMode.EQUAL_CAPACITY,
        events=events,
        geometry=engine_geometry(geometry),
        check_every=1,
    )
    assert len(run.records) == len(stream)
    for record in run.records:
        assert record.joint <= record.oracle
        assert record.joint <= record.attention and record.joint <= record.recurrent
        assert record.joint % unit == 0
    assert sum(e for e in run.stats.evictions.values()) > 0  # 1.5 GiB is tight: eviction was exercised


def test_an_equal_checkpoint_budget_is_the_same_state_budget_for_every_policy(stream):
    runs = {}
    result = run_experiment(
        stream,
        QWEN3_5_35B_A3B,
        small_config(
            capacity_gib=4.0, budgets=(BudgetMode.EQUAL_CHECKPOINT_BUDGET,), checkpoint_budget_gib=2.0
        ),
        keep_runs=runs,
    )
    budgets = {run.checkpoint_budget_bytes for run in runs.values()}
    assert budgets == {2.0 * GIB}
    for run in runs.values():
        assert run.peak_checkpoint_bytes <= 2.0 * GIB and run.overcommits == 0
        assert run.budget_exceedances == 0
        # the blocks keep the equal-capacity pool: one pool of 4 GiB, no arena carved out of it
        assert run.capacity_bytes == 4.0 * GIB and run.peak_working_bytes > 2.0 * GIB
    assert result.units[0].checkpoint_budget_bytes == 2.0 * GIB


def test_a_tight_checkpoint_budget_is_never_exceeded_and_defaults_to_main_sparse_peak(stream):
    """A budget of two Qwen3.5 states (2 x 61.9 MiB, below what requests in flight hold at
    once): states are refused rather than admitted past it, under every policy; without
    ``checkpoint_budget_gib`` B is main_sparse's peak retained-state bytes at equal capacity."""
    runs: dict = {}
    g = geometry_for_unit(QWEN3_5_35B_A3B, 16)
    tight = 2 * g.state_bytes / GIB
    result = run_experiment(
        stream, QWEN3_5_35B_A3B, small_config(capacity_gib=4.0, checkpoint_budget_gib=tight), keep_runs=runs
    )
    refused = 0
    for r in result.units[0].runs:
        if r["budget"] != BudgetMode.EQUAL_CHECKPOINT_BUDGET.value:
            continue
        b = r["checkpoint_budget"]
        assert b["exceedances"] == 0 and b["peak_bytes"] <= b["bytes"] == 2 * g.state_bytes
        refused += sum(b["refusals"].values())
    assert refused > 0
    default = run_experiment(stream, QWEN3_5_35B_A3B, small_config(capacity_gib=4.0), keep_runs=runs)
    peak = runs[(16, BudgetMode.EQUAL_CAPACITY.value, "main_sparse")].stats.peak_state_bytes
    assert default.units[0].checkpoint_budget_bytes == max(peak, g.state_bytes)


def test_echoed_reasoning_lets_decode_end_serve_tool_loops_and_dropped_reasoning_falls_back_to_input_end():
    shape = {"tool_calls": (2, 4), "reasoning_tokens": (100, 200)}
    kept = run_experiment(
        synthetic_stream(16, client="kept", **shape),
        QWEN3_5_35B_A3B,
        small_config(units=(1,), capacity_gib=64.0, output_at_unit=True),
    )
    dropped = run_experiment(
        synthetic_stream(16, client="dropped", **shape),
        QWEN3_5_35B_A3B,
        small_config(units=(1,), capacity_gib=64.0, output_at_unit=True),
    )
    k, d = kept.run("both", "equal_capacity"), dropped.run("both", "equal_capacity")
    assert k["decode_end_hit_rate"] > 0.4 and k["decode_end_hits_by_continuation"].get("tool", 0) > 0
    assert d["decode_end_hit_rate"] == 0.0 and d["input_end_fallback_rate"] == 1.0
    # the plan's Q4: D_end retained but hash-rejected happens far less often when it round-trips
    assert k["input_end_fallback"]["requests"] < d["input_end_fallback"]["requests"] / 2
    assert k["input_end_share_of_previous_endpoint_hits"] < 0.5


def test_on_the_real_qwen3_5_template_dropped_reasoning_sends_first_continuations_to_input_end():
    from boundary.experiment.arrivals import interleave
    from boundary.experiment.stream import Stream

    rendered = rendered_sessions("tau_bench", WorkloadOptions(family="qwen3_5", sessions=3), use_cache=False)
    stream = Stream("tau_bench", rendered.provenance, interleave(list(rendered.sessions().values()), COST))
    result = run_experiment(
        stream,
        QWEN3_5_35B_A3B,
        small_config(units=(1,), capacity_gib=64.0, budgets=(BudgetMode.EQUAL_CAPACITY,)),
    )
    both, main = result.run("both", "equal_capacity"), result.run("main_sparse", "equal_capacity")
    assert both["first_continuation"]["session_hit_rate"] == 1.0
    assert both["decode_end_hit_rate"] == 0.0
    assert both["input_end_fallback_rate"] == 1.0
    assert main["first_continuation"]["session_hit_rate"] < 1.0  # P_end holds "<think>\n": no own-session hit
    assert both["first_continuation"]["reused_over_oracle"] > main["first_continuation"]["reused_over_oracle"]


def test_reuse_is_also_a_share_of_the_unit_1_oracle_whether_or_not_unit_1_ran(stream):
    config = small_config(units=(16, 1), budgets=(BudgetMode.EQUAL_CAPACITY,), disaggregation=False)
    both_units = run_experiment(stream, QWEN3_5_35B_A3B, config)
    alone = run_experiment(stream, QWEN3_5_35B_A3B, config.model_copy(update={"units": (16,)}))
    assert alone.unit1_oracle == both_units.unit1_oracle
    finest = both_units.units[1]
    assert (
        finest.unit == 1 and both_units.unit1_oracle["hit_rate"] == finest.oracle["hit_rate"]["oracle_tokens"]
    )
    for r in finest.runs:  # at unit 1 the two ratios are one
        assert r["reused_over_unit1_oracle"]["hit_rate"] == r["hit_rate"]["reused_over_oracle"]
    coarse = alone.units[0]
    assert (
        coarse.runs[0]["reused_over_unit1_oracle"] == both_units.units[0].runs[0]["reused_over_unit1_oracle"]
    )
    assert coarse.oracle["reused_over_unit1_oracle"]["hit_rate"] <= 1.0
    counts = coarse.logical_candidates_on_one_state
    assert counts["requests"] == len(stream) and counts["u_end_d_end"] == counts["p_end_d_end"] == 0


def test_a_replay_is_deterministic(stream):
    a = run_experiment(stream, QWEN3_5_35B_A3B, small_config(disaggregation=False)).model_dump()
    b = run_experiment(stream, QWEN3_5_35B_A3B, small_config(disaggregation=False)).model_dump()
    for unit in (a, b):
        for run in unit["units"][0]["runs"]:
            run.pop("replay_wall_seconds")
    assert a == b


def test_a_synthetic_shape_with_no_tool_calls_has_only_user_continuations():
    stream = synthetic_stream(6, tool_calls=(0, 0), user_turns=(2, 3))
    assert {r.continuation.value for r in stream if r.turn} == {"user"}
    assert not any(r.tool_call for r in stream)
    assert SyntheticShape(tool_calls=(0, 0)).tool_calls == (0, 0)
