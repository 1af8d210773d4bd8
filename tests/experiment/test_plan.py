"""The plan's question metrics, the prefill queue and the unit sweep, on hand-made records
with hand-computed expected values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from boundary.experiment import plan
from boundary.experiment.load import prefill_queue
from boundary.experiment.replay import RequestRecord
from boundary.experiment.report.tables import unit_sweep

_DEFAULTS = dict(
    rid=0,
    session="s",
    turn=1,
    continuation="tool",
    tool_call=False,
    prompt_tokens=100,
    attention=0,
    recurrent=0,
    joint=0,
    junction=0,
    oracle=0,
    served_by=None,
    served_from_output=None,
    producer_age=None,
    flooring_loss=None,
    states_created=0,
    candidates=0,
    collapsed=0,
    recached=0,
    forced_splits=0,
    avoided_flops=0.0,
    recompute_flops=0.0,
    ttft_seconds=0.0,
)


def rec(**fields) -> RequestRecord:
    return RequestRecord(**{**_DEFAULTS, **fields})


def test_the_prefill_queue_serves_first_come_first_served_with_hit_dependent_service():
    records = [
        rec(rid=0, arrival=0.0, ttft_seconds=0.2, prompt_tokens=1000),
        rec(rid=1, arrival=0.1, ttft_seconds=0.05, prompt_tokens=500),
        rec(rid=2, arrival=0.15, ttft_seconds=0.1, prompt_tokens=2000),
    ]
    q = prefill_queue(records)
    # starts 0, 0.2, 0.25; done 0.2, 0.25, 0.35
    assert q.ttft == pytest.approx((0.2, 0.15, 0.2))
    assert q.waits == pytest.approx((0.0, 0.1, 0.1))
    assert q.span_seconds == pytest.approx(0.35)
    assert q.request_throughput == pytest.approx(3 / 0.35)
    assert q.input_token_throughput == pytest.approx(3500 / 0.35)
    assert q.summary()["prefill_engine_utilization"] == pytest.approx(1.0)
    assert prefill_queue([]).summary()["ttft_mean_seconds"] is None


def test_u_end_fallback_counts_only_requests_whose_d_end_was_retained_and_hash_rejected():
    records = [
        rec(
            rid=1,
            retained_prev=("decode_end", "input_end"),
            matched_prev=("input_end",),
            served_by="input_end",
        ),
        rec(rid=2, retained_prev=("decode_end",), matched_prev=(), served_by="reactive"),
        rec(rid=3, retained_prev=("decode_end",), matched_prev=("decode_end",), served_by="decode_end"),
        rec(rid=4, retained_prev=("input_end",), matched_prev=(), served_by="input_end"),  # D_end evicted
    ]
    assert plan.input_end_fallback(records) == {"requests": 2, "input_end_served": 1, "rate": 0.5}


def test_unreachable_p_end_is_asked_of_first_continuations_only():
    records = [
        rec(rid=1, turn=1, prompt_end_unreachable=True, served_by="input_end"),
        rec(rid=2, turn=1, prompt_end_unreachable=True, served_by="prompt_end_block"),
        rec(rid=3, turn=1, prompt_end_unreachable=False, served_by="prompt_end"),
        rec(rid=4, turn=2, prompt_end_unreachable=True, served_by="input_end"),
    ]
    assert plan.unreachable_prompt_end(records) == {
        "first_continuations": 3,
        "requests": 2,
        "input_end_served": 1,
        "rate": 0.5,
        "prompt_end_position_unreachable": {"requests": 0, "input_end_served": 0, "rate": None},
    }


def test_after_the_junction_compares_the_same_requests_with_main_sparse():
    mine = [rec(rid=1, junction_present=True, joint=300, served_by="input_end"), rec(rid=2, joint=50)]
    base = SimpleNamespace(records=[rec(rid=1, joint=256), rec(rid=2, joint=10)])
    assert plan.after_junction(mine, base) == {
        "requests": 1,
        "reused_tokens": 300,
        "additional_matched_tokens_vs_main_sparse": 44,
        "input_end_served": 1,
        "input_end_served_share": 1.0,
    }


def test_the_second_checkpoint_verdict_nets_saved_against_lost_work_with_a_sign():
    both = SimpleNamespace(records=[rec(rid=0, avoided_flops=10.0), rec(rid=1, avoided_flops=2.0)])
    single = SimpleNamespace(records=[rec(rid=0, avoided_flops=7.0), rec(rid=1, avoided_flops=6.0)])
    assert plan.second_checkpoint_verdict(both, single) == {
        "saved_flops": 3.0,
        "lost_flops": 4.0,
        "net_flops": -1.0,
        "verdict": "costs",
    }


def test_pd_states_count_retained_matched_consumable_and_selected_per_deployment():
    records = [
        rec(rid=0, turn=0),
        rec(
            rid=1,
            turn=1,
            retained_prev=("decode_end", "input_end"),
            matched_prev=("decode_end", "input_end"),
            prefill_side_prev=("input_end",),
            served_by="decode_end",
            producer_age="previous",
        ),
    ]
    split = SimpleNamespace(records=[rec(rid=1, served_by="input_end", producer_age="previous")])
    pd = plan.pd_states(records, split)
    d, u = pd["by_kind"]["decode_end"], pd["by_kind"]["input_end"]
    assert (d["retained"], d["hash_matched"]) == (1, 1)
    assert d["consumable"]["colocated"] == 1 and d["consumable"]["sticky_routing"] == 0
    assert d["selected"]["colocated"] == 1 and d["selected"]["sticky_routing"] == 0
    assert u["consumable"]["sticky_routing"] == 1 and u["selected"]["sticky_routing"] == 1
    assert u["selected"]["colocated"] == 0
    same_worker = plan._worker(1) == plan._worker(0)
    assert u["consumable"]["strict_disaggregation"] == int(same_worker)


def _unit(unit: int, oracle: int, reused: int | None, ratio: float | None):
    runs = (
        []
        if reused is None
        else [
            {
                "policy": "p",
                "budget": "equal_capacity",
                "joint_matched_tokens": reused,
                "hit_rate": {"reused_over_oracle": ratio},
            }
        ]
    )
    return SimpleNamespace(unit=unit, block_size=1056, oracle={"joint_matched_tokens": oracle}, runs=runs)


def test_the_unit_sweep_shows_tokens_against_the_finest_oracle_beside_the_same_unit_ratio():
    result = SimpleNamespace(units=[_unit(1056, 600, 600, 1.0), _unit(1, 1000, 900, 0.9)])
    rows = unit_sweep(result)
    assert rows[2] == "| 1 | 1056 | 1,000 | 100.0% | 900 · 90.0% · 90.0% |"
    assert rows[3] == "| 1056 | 1056 | 600 | 60.0% | 600 · 60.0% · 100.0% |"
    empty = SimpleNamespace(units=[_unit(1, 0, 0, None)])
    assert unit_sweep(empty)[2] == "| 1 | 1056 | 0 | – | 0 · – · – |"
