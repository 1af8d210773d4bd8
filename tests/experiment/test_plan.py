"""The plan's question metrics, the prefill queue and the unit sweep, on hand-made records
with hand-computed expected values."""

from __future__ import annotations

from types import SimpleNamespace

from boundary.experiment import plan
from boundary.experiment.replay import RequestRecord
from boundary.experiment.report.answers import after_junction, verdict
from boundary.experiment.report.questions import QUESTIONS, _question
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


def test_u_end_fallback_counts_only_rejected_d_ends_where_u_end_gained_tokens_over_decode_end():
    """Pool: D_end retained and hash-rejected = rids 1, 2, 5 (3 matched D_end; 4's D_end was
    evicted). U_end served 1 and 5; against the decode_end run on the same requests, 1 gained
    300 - 256 = 44 tokens, 5 gained 0 (U_end on the twin decode_end keeps too). Rate 1 / 3."""
    records = [
        rec(
            rid=1,
            retained_prev=("decode_end", "input_end"),
            matched_prev=("input_end",),
            served_by="input_end",
            joint=300,
        ),
        rec(rid=2, retained_prev=("decode_end",), matched_prev=(), served_by="reactive", joint=64),
        rec(rid=3, retained_prev=("decode_end",), matched_prev=("decode_end",), served_by="decode_end"),
        rec(rid=4, retained_prev=("input_end",), matched_prev=(), served_by="input_end"),  # D_end evicted
        rec(rid=5, retained_prev=("decode_end",), matched_prev=(), served_by="input_end", joint=256),
    ]
    decode_only = SimpleNamespace(records=[rec(rid=i, joint=256 if i != 2 else 64) for i in range(1, 6)])
    assert plan.input_end_fallback(records, decode_only) == {
        "requests": 3,
        "input_end_served": 2,
        "input_end_gained": 1,
        "gained_tokens": 44,
        "rate": 1 / 3,
    }
    unknown = plan.input_end_fallback(records, None)
    assert unknown["requests"] == 3 and unknown["input_end_gained"] is None and unknown["rate"] is None


def test_unreachable_p_end_pools_first_continuations_whose_materialized_p_end_is_not_a_prefix():
    """First continuations: rids 1, 2, 3, 5 (4 is turn 2). P_end never materialized: 5 (not in
    the pool). Pool (materialized, not a prefix): 1, 2. main_sparse missed (its joint < the
    oracle's): 1 (256 < 400) and 2 (256 < 300). U_end avoided the miss on 1 only (served, 390 >
    256): recovered 134 tokens; 2 was served by the twin. Rate 1 / 2."""
    records = [
        rec(
            rid=1,
            turn=1,
            prompt_end_materialized=True,
            prompt_end_unreachable=True,
            served_by="input_end",
            joint=390,
            oracle=400,
        ),
        rec(
            rid=2,
            turn=1,
            prompt_end_materialized=True,
            prompt_end_unreachable=True,
            served_by="prompt_end_block",
            joint=256,
            oracle=300,
        ),
        rec(
            rid=3, turn=1, prompt_end_materialized=True, prompt_end_unreachable=False, served_by="prompt_end"
        ),
        rec(rid=4, turn=2, prompt_end_materialized=True, prompt_end_unreachable=True, served_by="input_end"),
        rec(
            rid=5, turn=1, prompt_end_materialized=False, prompt_end_unreachable=False, served_by="input_end"
        ),
    ]
    base = SimpleNamespace(records=[rec(rid=i, joint=256) for i in range(1, 6)])
    assert plan.unreachable_prompt_end(records, base) == {
        "first_continuations": 4,
        "prompt_end_not_materialized": 1,
        "requests": 2,
        "main_sparse_missed": 2,
        "input_end_served": 1,
        "avoided": 1,
        "recovered_tokens": 134,
        "rate": 0.5,
    }
    # main_sparse is its own baseline: it never avoids its own miss
    assert plan.unreachable_prompt_end(records, None)["avoided"] == 0


def test_after_the_junction_compares_the_same_requests_with_main_sparse():
    """Pool: rid 1 (junction present): 300 - 256 = +44 over main_sparse, U_end served it.
    Branches observed: lookups with a junction, rids 1 and 2."""
    mine = [
        rec(rid=1, junction_present=True, joint=300, served_by="input_end"),
        rec(rid=2, joint=50, junction=128),
    ]
    base = SimpleNamespace(records=[rec(rid=1, joint=256), rec(rid=2, joint=10)])
    assert plan.after_junction(mine, base, 1) == {
        "requests": 1,
        "reused_tokens": 300,
        "additional_matched_tokens_vs_main_sparse": 44,
        "input_end_served": 1,
        "input_end_served_share": 1.0,
        "branches_observed": 1,
        "junction_states_created": 1,
    }


def test_the_second_checkpoint_verdict_nets_saved_against_lost_work_with_a_sign():
    """rid 0: both saves 10 - 7 = 3; rid 1: loses 6 - 2 = 4; net -1 over the stream's prefill
    work 7 + 6 (avoided) + 0 (recomputed) = 13: -7.7 %, past the 0.5 % threshold: costs."""
    both = SimpleNamespace(records=[rec(rid=0, avoided_flops=10.0), rec(rid=1, avoided_flops=2.0)])
    single = SimpleNamespace(records=[rec(rid=0, avoided_flops=7.0), rec(rid=1, avoided_flops=6.0)])
    assert plan.second_checkpoint_verdict(both, single) == {
        "saved_flops": 3.0,
        "lost_flops": 4.0,
        "net_flops": -1.0,
        "net_share_of_prefill_work": -1 / 13,
        "threshold_share": 0.005,
        "verdict": "costs",
    }


def test_a_net_effect_under_the_threshold_is_no_verdict():
    """Net -0.006 % (the issue's case): -6 FLOPs over 100,000 of prefill work is under 0.5 %;
    +600 of 100,000 (0.6 %) pays."""
    single = SimpleNamespace(records=[rec(rid=0, avoided_flops=50_000.0, recompute_flops=50_000.0)])
    slightly = SimpleNamespace(records=[rec(rid=0, avoided_flops=49_994.0)])
    assert plan.second_checkpoint_verdict(slightly, single)["verdict"] == "no measurable effect"
    better = SimpleNamespace(records=[rec(rid=0, avoided_flops=50_600.0)])
    assert plan.second_checkpoint_verdict(better, single)["verdict"] == "pays"


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


def test_a_question_no_run_answers_says_why_instead_of_staying_empty():
    heading, describe, empty = QUESTIONS[2]  # Q3: the tool share of D_end reuse
    runs = [{"policy": "both", "decode_end_hits_by_continuation": {}}]
    assert _question(heading, runs, describe, empty=empty) == [
        heading,
        "- no D_end reuse under any policy (question 2), so none comes from tool-call continuations",
        "",
    ]


def test_an_empty_junction_pool_is_explained_by_what_the_lookups_saw():
    empty = {
        "after_junction": {
            "requests": 0,
            "branches_observed": 0,
            "junction_states_created": 0,
            "additional_matched_tokens_vs_main_sparse": 0,
            "input_end_served_share": None,
        }
    }
    text = after_junction(empty)
    assert text.startswith("0 requests: 0 lookups saw attention past the joint hit, 0 junction states")
    assert text.endswith(
        "every branch point already lay at or under a kept state, so the engine never made a junction"
    )
    empty["after_junction"] |= {"branches_observed": 3}
    assert "P_end's block twin, U_end, D_end" in after_junction(empty)
    empty["after_junction"] |= {"junction_states_created": 2}
    assert after_junction(empty).endswith(
        "no later request's prefix reached a junction state while it was cached"
    )


def test_the_verdict_line_states_the_net_as_a_share_of_prefill_work():
    v = {"saved_flops": 3e15, "lost_flops": 4e15, "net_flops": -1e15, "net_share_of_prefill_work": -6e-5}
    line = verdict("input_end", {**v, "verdict": "no measurable effect"})
    assert line.endswith("net -1.00 PFLOP (-0.006% of prefill work): **no measurable effect**")
