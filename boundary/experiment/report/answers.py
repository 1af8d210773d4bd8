"""Each question's line for one run (a policy under one budget), in the plan's order.

Where it sits: in the report, last in the flow: ``questions`` calls it for each run's answers.
"""

from __future__ import annotations

from typing import Any

from boundary.experiment.harness import GIB
from boundary.experiment.report.fmt import gib, pct, pflops, rate, seconds, share, signed, tokens


def first_continuation(r: dict[str, Any]) -> str:
    fc = r["first_continuation"]
    return (
        f"reused / oracle {pct(fc['reused_over_oracle'])} over {fc['requests']:,} first continuations; "
        f"own-session hit {pct(fc['session_hit_rate'])}, any hit {pct(fc['hit_rate'])}"
    )


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
    return f"{share(f['input_end_served'], f['requests'])} (input_end_fallback_rate)"


def unreachable_prompt_end(r: dict[str, Any]) -> str:
    u = r["unreachable_prompt_end_first_continuations"]
    own = u["prompt_end_position_unreachable"]
    return (
        f"P_end and its block twin unreachable in {u['requests']:,} of {u['first_continuations']:,} first "
        f"continuations, U_end served {u['input_end_served']:,} ({pct(u['rate'])}); P_end's own position "
        f"unreachable in {own['requests']:,}, U_end served {own['input_end_served']:,} ({pct(own['rate'])})"
    )


def after_junction(r: dict[str, Any]) -> str:
    j = r["after_junction"]
    return (
        f"{j['requests']:,} requests; {signed(j['additional_matched_tokens_vs_main_sparse'])} tokens vs "
        f"main_sparse on them; U_end served {pct(j['input_end_served_share'])}"
    )


def prompt_tokens(r: dict[str, Any]) -> str:
    return (
        f"{signed(r['additional_matched_tokens_vs_main_sparse'])} tokens vs main_sparse; "
        f"{tokens(r['joint_matched_tokens'])} of {tokens(r['prompt_tokens'])} prompt tokens reused "
        f"({pct(r['hit_rate']['reused_over_oracle'])} of the oracle's "
        f"{tokens(r['oracle_reusable_tokens'])}); "
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
    return (
        f"`both` {single.replace('_', ' ')}: saved {pflops(v['saved_flops'])}, lost "
        f"{pflops(v['lost_flops'])}, net {pflops(v['net_flops'], sign=True)}: **{v['verdict']}**"
    )


def evictions(r: dict[str, Any]) -> str:
    ev = ", ".join(f"{k} {v:,}" for k, v in r["evictions"].items()) or "none"
    return f"evictions {ev}; displaced checkpoints (evicted before any hit) {r['displaced_checkpoints']:,}"


def load(r: dict[str, Any]) -> str:
    q = r["load"]
    return (
        f"TTFT mean {seconds(q['ttft_mean_seconds'])}, p90 {seconds(q['ttft_p90_seconds'])} "
        f"(queue wait {seconds(q['queue_wait_mean_seconds'])}); "
        f"{rate(q['request_throughput_per_second'], 'requests/s')}, "
        f"{rate(q['input_token_throughput_per_second'], 'input tokens/s')}; prefill engine busy "
        f"{pct(q['prefill_engine_utilization'])}; residency states {pct(r['occupancy']['state_fraction'])} / "
        f"blocks {pct(r['occupancy']['block_fraction'])} of capacity"
    )


def first_vs_steady(r: dict[str, Any]) -> str:
    fc, st = r["first_continuation"], r["steady_state"]
    return (
        f"first {pct(fc['hit_rate'])}; {pct(fc['reused_over_oracle'])} — steady "
        f"{pct(st['hit_rate'])}; {pct(st['reused_over_oracle'])}"
    )


def collapsed(r: dict[str, Any]) -> str:
    return f"{r['duplicate_candidates']:,} collapsed candidates; {r['recached_states']:,} re-cached states"
