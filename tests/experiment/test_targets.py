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
    mean_joint: dict[str, float] | None = None,
) -> dict[str, Any]:
    return {
        "materialized_boundary": {"mean_joint_by_kind": mean_joint or {}},
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


def test_a_miss_names_the_fallback_the_kinds_the_rival_reused_more_from_and_refusals():
    """`input_end` served 72 requests from a U_end two or more requests old, `chat_aware` 16 from
    U_end and 7 from P_end (23). Tokens by kind (requests x mean joint hit): `input_end` U_end
    242 x 1000 = 242,000; `chat_aware` U_end 16 x 1000 = 16,000, P_end 134 x 1500 = 201,000,
    D_end 28 x 500 = 14,000. Grouped, `input_end` minus `chat_aware`: U_end / P_end 242,000 -
    217,000 = +25,000, D_end -14,000 (the gap: +11,000). The budget refused 3 of `chat_aware`'s
    states, none of `input_end`'s."""
    served = {"input_end": 16, "prompt_end": 134, "decode_end": 28}
    means = {"input_end": 1000.0, "prompt_end": 1500.0, "decode_end": 500.0}
    mine = run("chat_aware", 0.92, served, 16, refused=3, older_p_end=7, mean_joint=means)
    fallback = run("input_end", 0.95, {"input_end": 242}, 72, mean_joint={"input_end": 1000.0})
    causes = miss_causes(mine, fallback)
    assert len(causes) == 3
    assert causes[0].startswith(
        "`input_end` served 72 requests from a U_end or P_end two or more requests old (`chat_aware` 23)"
    )
    assert causes[1].startswith(
        "tokens reused by kind, `input_end` minus `chat_aware`: U_end / P_end +25,000, D_end -14,000 "
        "(U_end / P_end: prompt-side states"
    )
    assert causes[2] == "the budget refused 3 of `chat_aware`'s states (0 of `input_end`'s)"


def test_the_groups_a_rival_led_are_explained_largest_first():
    """`decode_end`: D_end 30 x 600 = 18,000, twin 200 x 100 = 20,000; `chat_aware`: D_end
    28 x 600 = 16,800, U_end 150 x 90 = 13,500, twin 10 x 100 = 1,000. Rival minus mine:
    U_end / P_end -13,500, D_end +1,200, block twin +19,000; explained: the twin, then D_end."""
    decode = run(
        "decode_end",
        0.95,
        {"decode_end": 30, "prompt_end_block": 200},
        mean_joint={"decode_end": 600.0, "prompt_end_block": 100.0},
    )
    mine = run(
        "chat_aware",
        0.94,
        {"decode_end": 28, "input_end": 150, "prompt_end_block": 10},
        mean_joint={"decode_end": 600.0, "input_end": 90.0, "prompt_end_block": 100.0},
    )
    (cause,) = miss_causes(mine, decode)
    head = (
        "tokens reused by kind, `decode_end` minus `chat_aware`: "
        "U_end / P_end -13,500, D_end +1,200, block twin +19,000 ("
    )
    assert cause.startswith(head)
    assert cause[len(head) :].startswith("block twin: ")
    assert "; D_end: outputs the next request kept" in cause


def test_a_miss_no_kind_accounts_for_says_so():
    same = run("main_sparse", 1.0, {"prompt_end": 100}, mean_joint={"prompt_end": 10.0})
    (cause,) = miss_causes(
        run("chat_aware", 0.99, {"prompt_end": 100}, mean_joint={"prompt_end": 10.0}), same
    )
    assert cause.startswith("no state kind accounts for it")


def test_a_target_without_its_policy_or_rivals_under_the_budget_is_not_checked():
    assert checks(unit(run("chat_aware", 0.9), run("both", 0.9))) == []  # no chat_aware rival, no horizon
    nothing = run("chat_aware", 0.9)
    nothing["hit_rate"]["reused_over_oracle"] = None  # the oracle had nothing to reuse
    assert checks(unit(nothing, run("input_end", 0.9))) == []
    assert lines(unit(run("main_sparse", 0.9, budget="equal_capacity"))) == [
        "- not run (needs the equal checkpoint-byte budget and the policies compared)"
    ]
