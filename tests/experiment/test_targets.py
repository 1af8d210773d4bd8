"""The Phase 2 / 3 target check of the report (``boundary.experiment.report.targets``) on
hand-made runs: reused / oracle, served kinds and producer ages written out, the margins and
causes worked out by hand."""

from __future__ import annotations

from typing import Any

from boundary.experiment.harness import UnitResult
from boundary.experiment.report.targets import checks, lines, miss_causes

BUDGET = "equal_checkpoint_budget"


def run(
    policy: str,
    reused: float,
    served: dict[str, int] | None = None,
    older_u_end: int = 0,
    refused: int = 0,
    older_p_end: int = 0,
    budget: str = BUDGET,
) -> dict[str, Any]:
    return {
        "policy": policy,
        "budget": budget,
        "hit_rate": {"reused_over_oracle": reused},
        "selected_checkpoint": served or {},
        "producer_age_by_kind": {
            "input_end": {"previous": 5, "two_back": older_u_end, "older": 0},
            "prompt_end": {"previous": 5, "two_back": 0, "older": older_p_end},
            "decode_end": {"previous": 5, "two_back": 9, "older": 9},  # not a fallback: not counted
        },
        "checkpoint_budget": {"refusals": {"input_end": refused} if refused else {}},
    }


def unit(*runs: dict[str, Any]) -> UnitResult:
    return UnitResult(
        unit=16,
        block_size=64,
        attention_block_bytes=1,
        state_bytes=1,
        checkpoint_budget_bytes=1.0,
        oracle={},
        runs=list(runs),
    )


def test_a_target_is_met_at_exactly_the_best_rival_and_missed_a_hair_below_it():
    u = unit(
        run("main_sparse", 0.90),
        run("input_end", 0.95),
        run("decode_end", 0.80),
        run("chat_aware", 0.95),
        run("both", 0.97),
        run("horizon", 0.9699),
        run("chat_aware", 0.10, budget="equal_capacity"),  # another budget mode: not read
    )
    chat, horizon = checks(u)
    assert (chat.policy, chat.rival, chat.met, chat.causes) == ("chat_aware", "input_end", True, ())
    assert abs(chat.margin) < 1e-12
    assert (horizon.policy, horizon.rival, horizon.met) == ("horizon", "both", False)
    assert abs(horizon.margin + 0.0001) < 1e-12
    text = lines(u)
    assert text[0].endswith("met (+0.00 points over `input_end`)")
    assert "**missed by 0.01 points** (best rival `both`)" in text[1]


def test_a_miss_names_the_kinds_the_rival_served_more_requests_from():
    """`input_end` served 72 requests from a U_end two or more requests old, `chat_aware` 16 from
    U_end and 7 from P_end (23);
    `decode_end` 30 from D_end against 28; the budget refused 3 of mine and none of the rival's."""
    served = {"input_end": 16, "prompt_end": 134, "decode_end": 28}
    mine = run("chat_aware", 0.92, served, 16, refused=3, older_p_end=7)
    fallback = run("input_end", 0.95, {"input_end": 242}, 72)
    causes = miss_causes(mine, fallback)
    assert len(causes) == 2
    assert causes[0].startswith(
        "`input_end` served 72 requests from a U_end or P_end two or more requests old (`chat_aware` 23)"
    )
    assert causes[1] == "the budget refused 3 of `chat_aware`'s states (0 of `input_end`'s)"
    decode = run("decode_end", 0.95, {"decode_end": 30, "prompt_end_block": 200})
    (cause,) = miss_causes(run("chat_aware", 0.94, {"decode_end": 28, "input_end": 150}), decode)
    assert cause.startswith("`decode_end` served 30 requests from D_end (`chat_aware` 28)")


def test_p_end_is_a_cause_only_beyond_what_mines_u_end_and_p_end_served_together():
    """`main_sparse` served 100 from P_end; `chat_aware` 98 from U_end and 2 from P_end: the same
    100 prompt-side requests, so P_end is no cause; with 97 from U_end it is."""
    rival = run("main_sparse", 1.0, {"prompt_end": 100})
    same = miss_causes(run("chat_aware", 0.99, {"input_end": 98, "prompt_end": 2}), rival)
    assert same[0].startswith("no state kind accounts for it")
    fewer = miss_causes(run("chat_aware", 0.99, {"input_end": 97, "prompt_end": 2}), rival)
    assert fewer[0].startswith("`main_sparse` served 100 requests from P_end (`chat_aware` 2)")


def test_a_target_without_its_policy_or_rivals_under_the_budget_is_not_checked():
    assert checks(unit(run("chat_aware", 0.9), run("both", 0.9))) == []  # no chat_aware rival, no horizon
    assert lines(unit(run("main_sparse", 0.9, budget="equal_capacity"))) == [
        "- not run (needs the equal checkpoint-byte budget and the policies compared)"
    ]
