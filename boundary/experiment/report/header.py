"""The report header: the stream, the model, the cost and load models, and every modelling
assumption with its value.

Where it sits: in the report, last in the flow: ``boundary.experiment.report`` writes it first.
"""

from __future__ import annotations

from typing import Any

from boundary.experiment.harness import ExperimentResult
from boundary.experiment.report.fmt import gib, tokens


def header(result: ExperimentResult) -> list[str]:
    s, m, c, cfg = result.stream, result.model, result.cost_model, result.config
    synthesised = ", ".join(s.get("synthesised") or []) or "nothing"
    budgets = ", ".join(f"{gib(u.checkpoint_budget_bytes)} at unit {u.unit}" for u in result.units)
    states_at = "unit" if cfg.get("output_at_unit") else "block"
    stream = (
        f"- Stream: {s['requests']:,} requests in {s['sessions']:,} sessions ({s['workload']}), "
        f"{tokens(s['prompt_tokens'])} prompt tokens, {tokens(s['output_tokens'])} output tokens; "
        f"family `{s.get('family')}`, template `{s.get('template')}`, "
        f"kwargs `{s.get('template_kwargs') or {}}`; "
        f"client {s.get('client')} reasoning; system prompt {s.get('system_prompt')}; "
        f"outputs from {s.get('output_source')}; synthesised: {synthesised}; "
        f"concurrency {s.get('concurrency')}, seed {s.get('seed')}."
    )
    model = (
        f"- Model: {m['name']} ({m['attention_layers']} attention + {m['recurrent_layers']} "
        f"{m['recurrent_kind']} layers; {m['kv_bytes_per_token']:,} KV bytes/token; one recurrent state "
        f"{gib(m['recurrent_state_bytes'])} unpadded). Capacity {cfg['capacity_gib']} GiB; equal checkpoint "
        f"budget {budgets}; output-side states at {states_at} boundaries; at most "
        f"{cfg['max_chunk_tokens']:,} tokens per prefill chunk."
    )
    cost = (
        f"- Cost model: {c['flops_per_token'] / 1e9:.2f} GFLOP per token + "
        f"{c['flops_per_position'] / 1e3:.0f} kFLOP per earlier position; prefill time = FLOPs / "
        f"({c['peak_flops'] / 1e12:.0f} TFLOP/s x {c['utilization']}), an estimate, not a measurement."
    )
    return [stream, model, cost, scope(result), *assumptions(s, c), ""]


def scope(result: ExperimentResult) -> str:
    """What this report sweeps (kept small enough to regenerate every report on one core)."""
    cfg = result.config
    units = ", ".join(str(u.unit) for u in result.units)
    text = f"- Scope: {result.stream['sessions']:,} sessions; units {units} (the first in detail)"
    if cfg.get("load_concurrency"):
        conc = ", ".join(f"{c:g}" for c in cfg["load_concurrency"])
        caps = ", ".join(f"{c:g}" for c in cfg["load_capacity_gib"])
        text += f"; load sweep at unit {result.units[0].unit}: concurrency {conc} × capacity {caps} GiB"
    else:
        text += "; no load sweep (see the reports that carry one)"
    return text + "."


def assumptions(s: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """Every modelling assumption that moves the results, with its value."""
    arrivals = s.get("arrivals") or {}
    words = s.get("reasoning_words")
    lines = ["- Assumptions:"]
    if "reasoning" in (s.get("synthesised") or []):
        lo, hi = words or ("?", "?")
        lines.append(
            f"  - synthetic reasoning: {lo}–{hi} words per assistant turn (seeded, uniform); the "
            "datasets carry no model reasoning."
        )
    if arrivals:
        lines.append(
            f"  - arrivals: {arrivals.get('session_starts')}; client delays {arrivals.get('client_delays')}, "
            f"mean tool latency {arrivals.get('tool_latency_mean_seconds')} s after a tool call, "
            f"mean think time {arrivals.get('think_time_mean_seconds')} s before a new user message."
        )
    lines.append(
        f"  - decode speed: {c.get('decode_seconds_per_token', 0) * 1000:.0f} ms per output token, "
        "uncontended; a request's time in flight is its no-cache prefill plus its decode, so every "
        "policy replays the same interleaving."
    )
    lines.append(
        "  - load: one FIFO prefill engine; service time = the cost model's prefill time from the joint "
        "hit, so TTFT = queue wait + service shrinks with the hit; arrivals are open-loop (a faster TTFT "
        "does not bring the session's next request forward); prefills are not batched."
    )
    if s.get("system_prompt") == "per_session":
        lines.append(
            "  - per_session system prompts: each session gets its own system text, but the tools block "
            "stays shared and the Qwen templates render it before the system text (about half of a "
            "first prompt), so sessions still share that prefix."
        )
    return lines
