"""The report's tables: policies side by side, which checkpoint served, the unit sweep, the
load sweep and the deployments' PD states.

Where it sits: in the report, last in the flow: ``boundary.experiment.report`` calls it for the
tables.
"""

from __future__ import annotations

from typing import Any

from boundary.experiment.harness import ExperimentResult, UnitResult
from boundary.experiment.load import saturation_points
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
        "reused / unit-1 oracle",
        "hit rate",
        "1st cont. reused / oracle",
        "1st cont. own-session hits",
        "steady reused / oracle",
        "extra tokens vs main_sparse",
        "avoided prefill",
        "TTFT mean / p90 (prefill alone, no queue)",
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
            pct(o.get("reused_over_unit1_oracle", {}).get("hit_rate")),
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
    ttft = r["ttft_estimate_seconds"]
    return [
        f"`{r['policy']}`",
        r["budget"],
        pct(r["hit_rate"]["reused_over_oracle"]),
        pct(r.get("reused_over_unit1_oracle", {}).get("hit_rate")),
        pct(r["hit_rate"]["hit_rate"]),
        pct(r["first_continuation"]["reused_over_oracle"]),
        pct(r["first_continuation"]["session_hit_rate"]),
        pct(r["steady_state"]["reused_over_oracle"]),
        tokens(r["additional_matched_tokens_vs_main_sparse"]),
        pct(r["avoided_prefill_fraction"]),
        f"{seconds(ttft['mean'])} / {seconds(ttft['p90'])}",
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
    """One row per load point; saturated points are labelled (``load.SATURATED_BELOW``)."""
    header = [
        "users",
        "cache / replica",
        "policy",
        "reused / oracle",
        "offered · capacity (req/s)",
        "throughput (req/s)",
        "TTFT p50 / p95 / p99",
        "state residency",
        "state evictions",
        "`both` − `input_end` (net work)",
    ]
    rows = []
    for p in unit.load_sweep:
        load, verdict = p["load"], p.get("second_checkpoint_verdict")
        mark = " **saturated**" if load["saturated"] else ""
        ttft = " / ".join(seconds(load[f"ttft_p{q}_seconds"]) for q in (50, 95, 99))
        offered = " · ".join(
            rate(load[k], "") for k in ("offered_requests_per_second", "capacity_requests_per_second")
        )
        rows.append(
            [
                f"{p['concurrency']:g} ({p['sessions']:,} sessions){mark}",
                f"{p['capacity_gib']:g} GiB × {p['replicas']}",
                f"`{p['policy']}`",
                pct(p["reused_over_oracle"]),
                offered,
                rate(load["request_throughput_per_second"], ""),
                ttft,
                pct(p["residency"]["state_fraction"]),
                f"{p['state_evictions']:,}",
                DASH
                if verdict is None
                else f"{verdict['net_flops'] / 1e15:+,.2f} PFLOP ({verdict['verdict']})",
            ]
        )
    return table(header, rows)


def saturation_table(unit: UnitResult) -> list[str]:
    """Per policy and cache size: the largest swept user count below saturation, the first
    above it."""
    rows = [
        [
            key,
            DASH if at["last_unsaturated"] is None else f"{at['last_unsaturated']:g}",
            "not reached" if at["first_saturated"] is None else f"{at['first_saturated']:g}",
        ]
        for key, at in saturation_points(unit.load_sweep).items()
    ]
    return table(["policy @ cache", "most users unsaturated", "first saturated"], rows)


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
        "Q5 U_end avoided / main_sparse missed / P_end's state not a prefix",
        "Q6 after junction: requests · extra tokens",
        "Q7 extra tokens vs main_sparse",
        "Q8 avoided prefill",
        "Q12 steady reused / oracle",
        "Q13 U_end and P_end on one state",
    ]
    rows = []
    for u in sorted(result.units, key=lambda u: u.unit):
        c = u.logical_candidates_on_one_state
        shared = pct(c["u_end_p_end"] / c["requests"] if c.get("requests") else None)
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
                    f"{up['avoided']:,} / {up['main_sparse_missed']:,} / {up['requests']:,}",
                    f"{j['requests']:,} · {signed(j['additional_matched_tokens_vs_main_sparse'])}",
                    signed(r["additional_matched_tokens_vs_main_sparse"]),
                    pct(r["avoided_prefill_fraction"]),
                    pct(r["steady_state"]["reused_over_oracle"]),
                    shared,
                ]
            )
    return table(header, rows)
