"""Each question's line for one run (a policy under one budget), in the plan's order.

Where it sits: in the report, last in the flow: ``questions`` calls it for each run's answers.
"""

from __future__ import annotations

from typing import Any

from boundary.experiment.harness import GIB
from boundary.experiment.report.fmt import DASH, gib, pct, pflops, seconds, share, signed, tokens


def first_continuation(r: dict[str, Any]) -> str:
    fc = r["first_continuation"]
    return (
        f"reused / oracle {pct(fc['reused_over_oracle'])} ({_unit1(r, 'first_continuation')}) over "
        f"{fc['requests']:,} first continuations; own-session hit {pct(fc['session_hit_rate'])}, any hit "
        f"{pct(fc['hit_rate'])}"
    )


def _unit1(r: dict[str, Any], part: str) -> str:
    return f"{pct(r.get('reused_over_unit1_oracle', {}).get(part))} of the unit-1 oracle"


def decode_end(r: dict[str, Any]) -> str:
    total = sum(r["decode_end_hits_by_continuation"].values())
    return f"decode_end_hit_rate {pct(r['decode_end_hit_rate'])} ({total:,} continuations)"


def decode_end_tool_share(r: dict[str, Any]) -> str | None:
    by = r["decode_end_hits_by_continuation"]
    total = sum(by.values())
    if not total:
        return None
    return f"tool-call continuations {share(by.get('tool', 0), total)} of its D_end hits"


def fallback(r: dict[str, Any]) -> str | None:
    f = r["input_end_fallback"]
    if not f["requests"]:
        return None
    if f["input_end_gained"] is None:
        return (
            f"U_end served {share(f['input_end_served'], f['requests'])}; gain unknown (decode_end not run)"
        )
    return (
        f"{share(f['input_end_gained'], f['requests'])} gained tokens over decode_end by U_end "
        f"(input_end_fallback_rate; {signed(f['gained_tokens'])} tokens); U_end served "
        f"{f['input_end_served']:,}"
    )


def unreachable_prompt_end(r: dict[str, Any]) -> str:
    u = r["unreachable_prompt_end_first_continuations"]
    return (
        f"P_end's state not a prefix in {u['requests']:,} of {u['first_continuations']:,} first "
        f"continuations (never materialized in {u['prompt_end_not_materialized']:,} more); main_sparse "
        f"missed reusable tokens in {u['main_sparse_missed']:,} of them; U_end avoided "
        f"{u['avoided']:,} ({pct(u['rate'])}, {signed(u['recovered_tokens'])} tokens)"
    )


def after_junction(r: dict[str, Any]) -> str:
    j = r["after_junction"]
    if not j["requests"]:
        why = (
            "no later request's prefix reached a junction state while it was cached"
            if j["junction_states_created"]
            else "every branch point lay in the block of a kept state the request resumed from "
            "(P_end's block twin, U_end, D_end), so no junction state was made"
            if j["branches_observed"]
            else "no lookup's attention reached past its joint hit: every branch point already lay "
            "at or under a kept state, so the engine never made a junction"
        )
        return (
            f"0 requests: {j['branches_observed']:,} lookups saw attention past the joint hit, "
            f"{j['junction_states_created']:,} junction states created; {why}"
        )
    return (
        f"{j['requests']:,} requests; {signed(j['additional_matched_tokens_vs_main_sparse'])} tokens vs "
        f"main_sparse on them; U_end served {pct(j['input_end_served_share'])}"
    )


def prompt_tokens(r: dict[str, Any]) -> str:
    return (
        f"{signed(r['additional_matched_tokens_vs_main_sparse'])} tokens vs main_sparse; "
        f"{tokens(r['joint_matched_tokens'])} of {tokens(r['prompt_tokens'])} prompt tokens reused "
        f"({pct(r['hit_rate']['reused_over_oracle'])} of the oracle's "
        f"{tokens(r['oracle_reusable_tokens'])}; {_unit1(r, 'hit_rate')}); "
        f"{tokens(r['prompt_tokens_recomputed'])} recomputed"
    )


def prefill_work(r: dict[str, Any]) -> str:
    return (
        f"{pflops(r['avoided_prefill_flops'])} avoided ({pct(r['avoided_prefill_fraction'])} of all "
        "prefill work)"
    )


def bytes_by_kind(r: dict[str, Any]) -> str:
    parts = [
        f"{kind} {gib(v['mean_bytes'])}"
        for kind, v in r["retained_state_bytes_by_kind"].items()
        if v["mean_bytes"] or v["snapshot_bytes"]
    ]
    per = r["saved_prompt_tokens_per_retained_state_byte"]
    return (
        f"{', '.join(parts) or 'none'} (total {gib(r['retained_state_bytes']['mean'])} mean, "
        f"{gib(r['retained_state_bytes']['peak'])} peak; snapshots {gib(r['snapshot_bytes'])}); "
        f"{tokens(per * GIB if per else None)} saved tokens per GiB retained"
    )


def verdict(single: str, v: dict[str, Any]) -> str:
    net = v.get("net_share_of_prefill_work")
    return (
        f"`both` {single.replace('_', ' ')}: saved {pflops(v['saved_flops'])}, lost "
        f"{pflops(v['lost_flops'])}, net {pflops(v['net_flops'], sign=True)} "
        f"({DASH if net is None else f'{100 * net:+.3f}%'} of prefill work): **{v['verdict']}**"
    )


def evictions(r: dict[str, Any]) -> str:
    ev = ", ".join(f"{k} {v:,}" for k, v in r["evictions"].items()) or "none"
    return f"evictions {ev}; displaced checkpoints (evicted before any hit) {r['displaced_checkpoints']:,}"


def load(r: dict[str, Any]) -> str:
    t = r["ttft_estimate_seconds"]
    return (
        f"prefill time and a step's fixed cost per prefill step (no queue, no batching) mean "
        f"{seconds(t['mean'])}, p90 {seconds(t['p90'])}; {split_cost(r)}; "
        f"residency states {pct(r['occupancy']['state_fraction'])} / "
        f"blocks {pct(r['occupancy']['block_fraction'])} of capacity"
    )


def split_cost(r: dict[str, Any]) -> str:
    """Whether a policy's extra scheduler steps outweigh the prefill it saved (``plan``)."""
    c = r.get("forced_split_cost") or {}
    if c.get("saved_prefill_seconds") is None:
        return f"{c.get('splits', 0):,} forced splits ({seconds(c.get('split_seconds', 0.0))})"
    per = c["tokens_per_extra_step"]
    verdict = "the extra steps OUTWEIGH the saved prefill" if c["outweighs"] else "the saved prefill pays"
    return (
        f"{c['extra_splits']:,} extra steps over main_sparse cost {seconds(c['extra_split_seconds'])} "
        f"against {seconds(c['saved_prefill_seconds'])} of prefill saved (net {seconds(c['net_seconds'])}"
        + (f", {per:,.0f} tokens per extra step" if per is not None else "")
        + f"): {verdict}"
    )


def first_vs_steady(r: dict[str, Any]) -> str:
    fc, st = r["first_continuation"], r["steady_state"]
    return (
        f"first {pct(fc['hit_rate'])}; {pct(fc['reused_over_oracle'])} ({_unit1(r, 'first_continuation')}) "
        f"— steady {pct(st['hit_rate'])}; {pct(st['reused_over_oracle'])} ({_unit1(r, 'steady_state')})"
    )


def logical_candidates(c: dict[str, Any]) -> str:
    """Q13 at one unit, from ``plan.logical_candidates_on_one_state``."""
    n = c["requests"]
    return (
        f"U_end and P_end on one state in {share(c['u_end_p_end'], n)} requests; U_end and D_end "
        f"{c['u_end_d_end']:,}, P_end and D_end {c['p_end_d_end']:,} (D_end's state lies at or past "
        "P_end, the others before it)"
    )


def collapsed(r: dict[str, Any]) -> str:
    return (
        f"its own candidates on one state {r['duplicate_candidates']:,}; apart: candidates on P_end's "
        f"block twin {r['candidates_on_twin']:,}, junctions on a kept state "
        f"{r['junctions_on_kept_states']:,}; {r['recached_states']:,} re-cached states"
    )
