"""The report header: the stream, the model, the cost and load models, and every modelling
assumption with its value.

Where it sits: in the report, last in the flow: ``boundary.experiment.report`` writes it first.
"""

from __future__ import annotations

from typing import Any

from boundary.experiment.harness import ExperimentResult
from boundary.experiment.report.fmt import gib, tokens

BUDGET_RULE = (
    "main_sparse's peak retained-state bytes at equal capacity unless --checkpoint-budget-gib; every "
    "policy's kept states, junctions and twins included, are admitted up to B inside the equal-capacity "
    "pool: a new state evicts unheld kept states least recently let go first and is refused when held "
    "states leave no room; exceedances are counted (0 by this rule) and the pool's over-commits beside them"
)


def header(result: ExperimentResult) -> list[str]:
    s, m, c, cfg = result.stream, result.model, result.cost_model, result.config
    synthesised = ", ".join(s.get("synthesised") or []) or "nothing"
    budgets = ", ".join(
        f"{gib(u.checkpoint_budget_bytes)} ({u.checkpoint_budget_bytes / u.state_bytes:,.0f} states) "
        f"at unit {u.unit}"
        for u in result.units
    )
    states_at = "unit" if cfg.get("output_at_unit") else "block"
    stream = (
        production_stream(s)
        if s.get("records") == "production"
        else f"- Stream: {s['requests']:,} requests in {s['sessions']:,} sessions ({s['workload']}), "
        f"{tokens(s['prompt_tokens'])} prompt tokens, {tokens(s['output_tokens'])} output tokens; "
        f"family `{s.get('family')}`, template `{s.get('template')}`, "
        f"kwargs `{s.get('template_kwargs') or {}}`; "
        f"client {s.get('client')} reasoning; system prompt {s.get('system_prompt')}; "
        f"outputs from {s.get('output_source')}; synthesised: {synthesised}; "
        f"concurrency {s.get('concurrency')}, seed {s.get('seed')}."
    )
    geometry = result.geometry
    model = (
        f"- Model: {m['name']} ({m['attention_layers']} attention + {m['recurrent_layers']} "
        f"{m['recurrent_kind']} layers; {m['kv_bytes_per_token']:,} KV bytes/token; one recurrent state "
        f"{gib(m['recurrent_state_bytes'])} unpadded; from {m.get('source') or 'a preset'})"
        f"{layout_note(geometry)}. "
        f"Capacity {cfg['capacity_gib']:g} GiB; equal checkpoint "
        f"budget B = {budgets} ({BUDGET_RULE}); output-side states at {states_at} boundaries; at most "
        f"{cfg['max_chunk_tokens']:,} tokens per prefill chunk."
    )
    cost = (
        f"- Cost model: {c['flops_per_token'] / 1e9:.2f} GFLOP per token + "
        f"{c['flops_per_position'] / 1e3:.0f} kFLOP per earlier position; prefill time = FLOPs / "
        f"({c['peak_flops'] / 1e12:.0f} TFLOP/s x {c['utilization']}), an estimate, not a measurement."
    )
    return [stream, model, cost, *families(c), scope(result), *assumptions(s, c, cfg), ""]


def production_stream(s: dict[str, Any]) -> str:
    """The stream line of a trace of production records: replayed as recorded, nothing rendered."""
    return (
        f"- Stream: {s['requests']:,} requests in {s['sessions']:,} sessions ({s['workload']}): production "
        f"records replayed as recorded: the prompt and output token ids, U_end and D_end the engine "
        f"recorded; nothing rendered or parsed (family `{s.get('family')}` gives the stop tokens only); "
        f"{tokens(s['prompt_tokens'])} prompt tokens, {tokens(s['output_tokens'])} output tokens; "
        f"concurrency {s.get('concurrency')}, seed {s.get('seed')}."
    )


def layout_note(geometry: dict[str, Any]) -> str:
    """Where the cache layout came from when it is not the model's (``ExperimentResult.geometry``)."""
    if not geometry:
        return ""
    return (
        f"; cache layout from {geometry['source']}: block {geometry['block_size']:,}, "
        f"unit {geometry['unit']:,}, pages of {geometry['page_bytes']:,} bytes x {geometry['group_size']} "
        f"layer(s), {geometry['attention_groups']} attention and {geometry['recurrent_groups']} recurrent "
        "group(s); the model gives the prefill cost only"
    )


def families(c: dict[str, Any]) -> list[str]:
    """Per-family recurrent state sizes and prefill rates, with their sources."""
    rows = c.get("families") or []
    if not rows:
        return []
    parts = [
        f"{f['model']} ({f['recurrent_kind']}): one state {gib(f['state_bytes'])} = "
        f"{f['state_in_kv_tokens']:,.0f} KV tokens, prefill {f['prefill_tokens_per_second']:,.0f} tokens/s "
        f"at context 0 [{f['source']}]"
        for f in rows
    ]
    return ["- Families (GPU assumptions): " + "; ".join(parts) + "."]


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


def eviction_line(cfg: dict[str, Any]) -> str:
    """Which cache executor ran (``harness.page_by_page``): the page-by-page pool, or the
    byte-LRU what-if, said so."""
    paged = cfg.get("eviction", "byte_lru") == "engine_steps" and not cfg.get("output_at_unit")
    if paged:
        return (
            "  - cache executor: vLLM's block pool page by page (a state one page per recurrent group, "
            "a block one per attention group, victims from the free queue's head) under both budget "
            "modes; equal_checkpoint_budget caps kept-state bytes inside the same pool."
        )
    return (
        "  - cache executor: a WHAT-IF, not vLLM: byte-LRU over whole entries (decode states at every "
        "unit, or --eviction byte_lru); equal_checkpoint_budget gives states an arena of their own "
        "and blocks the rest. No headline figure comes from this executor."
    )


def load_assumptions(c: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    """The serving model's GPU assumptions (``boundary.experiment.calibration``)."""
    step = c.get("step")
    if not step:
        return []
    return [
        f"  - load model (GPU assumptions, {step['source']}): a step costs "
        f"{step['step_overhead_seconds'] * 1000:g} ms + {step['decode_base_seconds'] * 1000:g} ms when it "
        f"decodes + {step['decode_seconds_per_sequence'] * 1000:g} ms per decoding sequence + its prefill "
        f"chunks' FLOPs at {c['peak_flops'] / 1e12:.0f} TFLOP/s × {c['utilization']} "
        f"({step['prefill_tokens_per_second_at_0']:,.0f} prefill tokens/s at context 0, "
        f"{step['prefill_tokens_per_second_at_32k']:,.0f} at 32k); continuous batching with chunked "
        f"prefill, max_num_batched_tokens {cfg.get('max_chunk_tokens', 8192):,}, max_num_seqs "
        f"{cfg.get('max_num_seqs', 256)}, decode first, then prefill chunks first come first served; "
        f"{cfg.get('load_replicas', 1)} replica(s), routing {cfg.get('load_routing', 'session_sticky')}, "
        "a cache of the stated capacity per replica; closed-loop users (think time 10 s before a user "
        "turn, tool latency 1 s after a tool call, exponential, seeded); no preemption."
    ]


def arrival_line(arrivals: dict[str, Any]) -> str:
    """Which arrival times the replays used: the trace's own, or synthesised (and why)."""
    if arrivals.get("source") == "recorded":
        return (
            f"  - arrivals: recorded in the trace (`arrival_s`); {arrivals.get('rule')}: "
            f"{arrivals.get('delayed_requests')} request(s) delayed, "
            f"{arrivals.get('delay_seconds', 0.0):.3f} s in all; the load sweep keeps each session's "
            "recorded client delays."
        )
    why = f" ({arrivals['why']})" if arrivals.get("why") else ""
    return (
        f"  - arrivals: synthesised{why}: {arrivals.get('session_starts')}; client delays "
        f"{arrivals.get('client_delays')}, mean tool latency {arrivals.get('tool_latency_mean_seconds')} s "
        f"after a tool call, mean think time {arrivals.get('think_time_mean_seconds')} s before a new "
        "user message."
    )


def assumptions(s: dict[str, Any], c: dict[str, Any], cfg: dict[str, Any] | None = None) -> list[str]:
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
        lines.append(arrival_line(arrivals))
    lines.append(
        f"  - decode speed in the cache replays: {c.get('decode_seconds_per_token', 0) * 1000:.0f} ms per "
        "output token, uncontended; a request's time in flight is its no-cache prefill plus its decode, "
        "so every policy replays the same interleaving (the load sweep runs its own clock)."
    )
    lines += load_assumptions(c, cfg or {})
    lines.append(eviction_line(cfg or {}))
    if s.get("system_prompt") == "per_session":
        lines.append(
            "  - per_session system prompts: each session gets its own system text, but the tools block "
            "stays shared and the Qwen templates render it before the system text (about half of a "
            "first prompt), so sessions still share that prefix."
        )
    if s.get("system_prompt") == "head_rewrite":
        lines.append(
            "  - head_rewrite: the client appends a note for each request to the shared system prompt "
            "(`workloads.script.with_head_note`), so every request's prompt parts from the previous "
            "one inside the system block and everything after the note is prefilled again."
        )
    return lines
