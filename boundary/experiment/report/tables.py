"""The report's tables: policies side by side, which checkpoint served, the unit sweep, the
load sweep and the deployments' PD states.

Where it sits: in the report, last in the flow: ``boundary.experiment.report`` calls it for the
tables.
"""

from __future__ import annotations

from typing import Any

from boundary.experiment.harness import ExperimentResult, UnitResult
from boundary.experiment.plan import PD_KINDS
from boundary.experiment.report.fmt import (
    DASH,
    EQUAL_CAPACITY,
    gib,
    pct,
    rate,
    seconds,
    signed,
    table,
    tokens,
)


def side_by_side(unit: UnitResult) -> list[str]:
    header = [
        "policy",
        "budget",
        "reused / oracle",
        "hit rate",
        "1st cont. reused / oracle",
        "1st cont. own-session hits",
        "steady reused / oracle",
        "extra tokens vs main_sparse",
        "avoided prefill",
        "TTFT mean / p90 (queued)",
        "state mem (mean / peak)",
        "evictions (state / block)",
        "forced splits",
        "collapsed candidates",
    ]
    rows = [_side_row(r) for r in unit.runs]
    o = unit.oracle
    rows.append(
        [
            "`oracle`",
            "infinite",
            pct(o["hit_rate"]["reused_over_oracle"]),
            pct(o["hit_rate"]["hit_rate"]),
            pct(o["first_continuation"]["reused_over_oracle"]),
            DASH,
            pct(o["steady_state"]["reused_over_oracle"]),
            DASH,
            DASH,
            f"{seconds(o['ttft_estimate_seconds']['mean'])} (no queue)",
            "∞",
            DASH,
            DASH,
            DASH,
        ]
    )
    return table(header, rows)


def _side_row(r: dict[str, Any]) -> list[str]:
    ev = r["evictions"]
    states = sum(v for k, v in ev.items() if k.startswith("state_"))
    blocks = sum(v for k, v in ev.items() if k.startswith("block_"))
    load = r["load"]
    return [
        f"`{r['policy']}`",
        r["budget"],
        pct(r["hit_rate"]["reused_over_oracle"]),
        pct(r["hit_rate"]["hit_rate"]),
        pct(r["first_continuation"]["reused_over_oracle"]),
        pct(r["first_continuation"]["session_hit_rate"]),
        pct(r["steady_state"]["reused_over_oracle"]),
        tokens(r["additional_matched_tokens_vs_main_sparse"]),
        pct(r["avoided_prefill_fraction"]),
        f"{seconds(load['ttft_mean_seconds'])} / {seconds(load['ttft_p90_seconds'])}",
        f"{gib(r['retained_state_bytes']['mean'])} / {gib(r['retained_state_bytes']['peak'])}",
        f"{states:,} / {blocks:,}",
        f"{r['forced_scheduler_splits']:,}",
        f"{r['duplicate_candidates']:,}",
    ]


SERVING_KINDS = ("prompt_end", "input_end", "decode_end", "reactive", "prompt_end_block", "none")


def serving(unit: UnitResult) -> list[str]:
    """Which logical checkpoint served each request (the selected checkpoint), who produced it,
    and how far below its logical position it materialized."""
    header = [
        "policy",
        "budget",
        "prompt_end",
        "input_end",
        "decode_end",
        "reactive",
        "prompt_end_block (P_end's block twin)",
        "no hit",
        "previous request",
        "two back",
        "older",
        "other session",
        "mean flooring loss (tokens)",
    ]
    rows = []
    for r in unit.runs:
        sel, age = r["selected_checkpoint"], r["producer_age"]
        loss = r["materialized_boundary"]["mean_flooring_loss_tokens"]
        rows.append(
            [
                f"`{r['policy']}`",
                r["budget"],
                *(f"{sel.get(k, 0):,}" for k in SERVING_KINDS),
                *(f"{age[k]:,}" for k in ("previous", "two_back", "older", "other_session")),
                DASH if loss is None else f"{loss:.1f}",
            ]
        )
    return table(header, rows)


def unit_sweep(result: ExperimentResult, budget: str = EQUAL_CAPACITY) -> list[str]:
    """Per unit and policy: reused tokens, as a share of the *finest* unit's oracle (what a
    coarse unit costs) and of the same unit's oracle (how close the policy gets at that unit)."""
    ordered = sorted(result.units, key=lambda u: u.unit)
    finest = ordered[0].oracle["joint_matched_tokens"]
    policies = list(dict.fromkeys(r["policy"] for r in ordered[0].runs if r["budget"] == budget))
    header = ["unit", "block", "oracle tokens", "oracle / finest oracle"]
    header += [f"`{p}` tokens · / finest oracle · / same-unit oracle" for p in policies]
    rows = []
    for u in ordered:
        runs = {r["policy"]: r for r in u.runs if r["budget"] == budget}
        oracle = u.oracle["joint_matched_tokens"]
        row = [str(u.unit), str(u.block_size), tokens(oracle), pct(oracle / finest if finest else None)]
        for p in policies:
            r = runs.get(p)
            if r is None:
                row.append(DASH)
                continue
            reused = r["joint_matched_tokens"]
            row.append(
                f"{tokens(reused)} · {pct(reused / finest if finest else None)} · "
                f"{pct(r['hit_rate']['reused_over_oracle'])}"
            )
        rows.append(row)
    return table(header, rows)


def load_table(unit: UnitResult) -> list[str]:
    header = [
        "concurrency",
        "capacity",
        "policy",
        "reused / oracle",
        "TTFT mean / p90",
        "requests / s",
        "input tokens / s",
        "prefill engine busy",
        "state residency",
        "state evictions",
        "`both` − `input_end` (net work)",
    ]
    rows = []
    for p in unit.load_sweep:
        load, verdict = p["load"], p.get("second_checkpoint_verdict")
        rows.append(
            [
                f"{p['concurrency']:g} ({p['sessions']:,} sessions)",
                f"{p['capacity_gib']:g} GiB",
                f"`{p['policy']}`",
                pct(p["reused_over_oracle"]),
                f"{seconds(load['ttft_mean_seconds'])} / {seconds(load['ttft_p90_seconds'])}",
                rate(load["request_throughput_per_second"], ""),
                rate(load["input_token_throughput_per_second"], ""),
                pct(load["prefill_engine_utilization"]),
                pct(p["residency"]["state_fraction"]),
                f"{p['state_evictions']:,}",
                DASH
                if verdict is None
                else f"{verdict['net_flops'] / 1e15:+,.2f} PFLOP ({verdict['verdict']})",
            ]
        )
    return table(header, rows)


def deployments(run: dict[str, Any], *, notes: bool = True) -> list[str]:
    """The four PD states of the previous request's checkpoints, per kind and deployment."""
    pd = run["pd_states"]
    names = list(pd["deployments"])
    header = ["checkpoint kind", "retained", "hash-matched"]
    header += [f"consumable · selected: {n.replace('_', ' ')}" for n in names]
    rows = []
    for kind in PD_KINDS:
        k = pd["by_kind"][kind]
        row = [f"`{kind}`", f"{k['retained']:,}", f"{k['hash_matched']:,}"]
        for n in names:
            sel = k["selected"][n]
            row.append(f"{k['consumable'][n]:,} · {DASH if sel is None else f'{sel:,}'}")
        rows.append(row)
    lines = table(header, rows)
    if notes:
        lines += ["", *(f"- {n.replace('_', ' ')}: {text}." for n, text in pd["deployments"].items())]
    return lines


def questions_by_unit(result: ExperimentResult, budget: str = EQUAL_CAPACITY) -> list[str]:
    """The per-policy answers that move with the unit, one row per unit and policy."""
    header = [
        "unit",
        "policy",
        "Q1 1st cont. reused / oracle",
        "Q2 D_end hit rate",
        "Q3 tool share of D_end hits",
        "Q4 U_end fallback",
        "Q5 U_end served / P_end + twin unreachable · / P_end alone unreachable",
        "Q6 after junction: requests · extra tokens",
        "Q7 extra tokens vs main_sparse",
        "Q8 avoided prefill",
        "Q12 steady reused / oracle",
    ]
    rows = []
    for u in sorted(result.units, key=lambda u: u.unit):
        for r in (r for r in u.runs if r["budget"] == budget):
            by = r["decode_end_hits_by_continuation"]
            hits = sum(by.values())
            fb, up, j = (
                r["input_end_fallback"],
                r["unreachable_prompt_end_first_continuations"],
                r["after_junction"],
            )
            rows.append(
                [
                    str(u.unit),
                    f"`{r['policy']}`",
                    pct(r["first_continuation"]["reused_over_oracle"]),
                    pct(r["decode_end_hit_rate"]),
                    pct(by.get("tool", 0) / hits if hits else None),
                    f"{pct(fb['rate'])} of {fb['requests']:,}",
                    f"{up['input_end_served']:,} / {up['requests']:,} · "
                    f"{up['prompt_end_position_unreachable']['input_end_served']:,} / "
                    f"{up['prompt_end_position_unreachable']['requests']:,}",
                    f"{j['requests']:,} · {signed(j['additional_matched_tokens_vs_main_sparse'])}",
                    signed(r["additional_matched_tokens_vs_main_sparse"]),
                    pct(r["avoided_prefill_fraction"]),
                    pct(r["steady_state"]["reused_over_oracle"]),
                ]
            )
    return table(header, rows)
