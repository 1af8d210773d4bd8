"""The report: Markdown that answers the experiment's thirteen questions in numbers, and plots.

Everything printed comes from an ``ExperimentResult``; nothing is recomputed here. The
questions (numbered as in every report):

1. How often does a session's first continuation hit its own state, and for how much?
2. How often is D_end reused, and how much of that is tool-call continuation?
3. When D_end does not round-trip, how often does U_end catch the request (U_end fallback)?
4. How many first-continuation misses do the new endpoints avoid?
5. Once a branch is learned (steady state), what does a proactive endpoint still add?
6. How many prompt tokens are saved?
7. How much prefill work is saved, and what does that do to (estimated) TTFT?
8. How much recurrent-state memory does each policy hold, and what does a byte buy?
9. The eviction externality: what do retained states push out?
10. First continuation vs steady state: hit rate and reused tokens.
11. How often do logical candidates land on one materialized checkpoint?
12. What do the checkpoints cost the engine (forced scheduler splits), and can they be
    consumed when prefill and decode are disaggregated without a decode-to-prefill path?
13. Does ``chat_aware`` (one endpoint per request) beat ``main_sparse`` under the same
    checkpoint-byte budget, and what does ``both``'s second checkpoint add?
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from boundary.experiment.harness import GIB, ExperimentResult, UnitResult

EQUAL_CAPACITY = "equal_capacity"
EQUAL_BUDGET = "equal_checkpoint_budget"


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def tokens(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def signed(x: float | None) -> str:
    return "–" if x is None else f"{x:+,.0f}"


def gib(x: float | None) -> str:
    return "–" if x is None else f"{x / GIB:.2f} GiB"


def pflops(x: float | None) -> str:
    return "–" if x is None else f"{x / 1e15:,.1f} PFLOP"


def seconds(x: float | None) -> str:
    return "–" if x is None else f"{x * 1000:,.0f} ms"


def _runs(unit: UnitResult, budget: str) -> list[dict[str, Any]]:
    return [r for r in unit.runs if r["budget"] == budget]


def _get(unit: UnitResult, policy: str, budget: str) -> dict[str, Any] | None:
    return next((r for r in unit.runs if r["policy"] == policy and r["budget"] == budget), None)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


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
        "est. TTFT (mean)",
        "state mem (mean / peak)",
        "evictions (state / block)",
        "forced splits",
        "collapsed candidates",
    ]
    rows = []
    for r in unit.runs:
        ev = r["evictions"]
        states = sum(v for k, v in ev.items() if k.startswith("state_"))
        blocks = sum(v for k, v in ev.items() if k.startswith("block_"))
        rows.append(
            [
                f"`{r['policy']}`",
                r["budget"],
                pct(r["hit_rate"]["reused_over_oracle"]),
                pct(r["hit_rate"]["hit_rate"]),
                pct(r["first_continuation"]["reused_over_oracle"]),
                pct(r["first_continuation"]["session_hit_rate"]),
                pct(r["steady_state"]["reused_over_oracle"]),
                tokens(r["additional_matched_tokens_vs_main_sparse"]),
                pct(r["avoided_prefill_fraction"]),
                seconds(r["ttft_estimate_seconds"]["mean"]),
                f"{gib(r['retained_state_bytes']['mean'])} / {gib(r['retained_state_bytes']['peak'])}",
                f"{states:,} / {blocks:,}",
                f"{r['forced_scheduler_splits']:,}",
                f"{r['duplicate_candidates']:,}",
            ]
        )
    o = unit.oracle
    rows.append(
        [
            "`oracle`",
            "infinite",
            pct(o["hit_rate"]["reused_over_oracle"]),
            pct(o["hit_rate"]["hit_rate"]),
            pct(o["first_continuation"]["reused_over_oracle"]),
            "–",
            pct(o["steady_state"]["reused_over_oracle"]),
            "–",
            "–",
            seconds(o["ttft_estimate_seconds"]["mean"]),
            "∞",
            "–",
            "–",
            "–",
        ]
    )
    return _table(header, rows)


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
        "P_end block twin",
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
                *(
                    f"{sel.get(k, 0):,}"
                    for k in ("prompt_end", "input_end", "decode_end", "reactive", "prompt_end_block", "none")
                ),
                *(f"{age[k]:,}" for k in ("previous", "two_back", "older", "other_session")),
                "–" if loss is None else f"{loss:.1f}",
            ]
        )
    return _table(header, rows)


def _line(policy: str, text: str) -> str:
    return f"- `{policy}`: {text}"


def answers(unit: UnitResult) -> list[str]:
    cap = _runs(unit, EQUAL_CAPACITY) or unit.runs
    budget_runs = _runs(unit, EQUAL_BUDGET)
    budget_name = EQUAL_CAPACITY if _runs(unit, EQUAL_CAPACITY) else cap[0]["budget"]
    out = [
        f"Numbers below are under **{budget_name}** unless a line says otherwise "
        f"(unit {unit.unit}, block {unit.block_size}).",
        "",
    ]
    out += _question(
        "**1. First-continuation hit.** A session's second request, the first that could reuse its "
        "own state:",
        cap,
        _first_continuation_hit,
        _line("oracle", f"reused / oracle {pct(unit.oracle['first_continuation']['reused_over_oracle'])}"),
    )
    out += _question(
        "**2. D_end reuse, and how much is tool-call continuation.** Continuations served by a "
        "decode_end state:",
        cap,
        _decode_end_reuse,
    )
    out += _question(
        "**3. U_end fallback.** Among continuations served by the previous request's U_end or D_end state, "
        "the share U_end served (D_end did not round-trip):",
        cap,
        _input_end_fallback,
    )
    out += _question(
        "**4. Avoided first misses.** First continuations that hit their own session's previous request "
        "where `main_sparse` did not:",
        cap,
        _avoided_first_misses,
    )
    out += _question(
        "**5. After a branch is learned.** Steady-state requests (turn 2 and later), extra tokens matched "
        "over `main_sparse`, and reactive branch-learning misses (attention matched past the joint hit):",
        cap,
        _after_branch_learned,
    )
    out += _question("**6. Prompt tokens saved.**", cap, _prompt_tokens_saved)
    out += _question(
        "**7. Prefill work saved** (cost model in the header; TTFT is an estimate, not a measurement):",
        cap,
        _prefill_work_saved,
        _line("oracle", f"estimated TTFT mean {seconds(unit.oracle['ttft_estimate_seconds']['mean'])}"),
    )
    out += _question(
        "**8. State memory.** Retained recurrent-state bytes (time-averaged / peak), states created, "
        "and what a retained byte buys:",
        cap,
        _state_memory,
    )
    out += _question(
        "**9. Eviction externality.** Evictions by victim and by the allocation that forced them, and "
        "states evicted before serving any hit:",
        cap + budget_runs,
        _eviction_externality,
    )
    out += _question(
        "**10. First continuation vs steady state** (hit rate; reused / oracle):", cap, _first_vs_steady
    )
    out += _question(
        "**11. Logical candidates on one materialized checkpoint** (within a request; and states created "
        "under a prefix id another live state already answers to):",
        cap,
        _collapsed_candidates,
    )
    out += _question(
        "**12. Engine cost and disaggregation.** Extra prefill chunks the in-prompt checkpoints force; "
        "share of reused tokens served by prefill-side states (what survives prefill/decode "
        "disaggregation without a decode-to-prefill path), and the reuse such a deployment measures:",
        cap,
        _engine_cost,
    )

    out.append("**13. chat_aware under the same checkpoint-byte budget, and the second checkpoint.**")
    for budget in (EQUAL_BUDGET, EQUAL_CAPACITY):
        ms, ca = _get(unit, "main_sparse", budget), _get(unit, "chat_aware", budget)
        if ms and ca:
            out.append(
                f"- [{budget}] `chat_aware` reused / oracle {pct(ca['hit_rate']['reused_over_oracle'])} vs "
                f"`main_sparse` {pct(ms['hit_rate']['reused_over_oracle'])}; first continuation "
                f"{pct(ca['first_continuation']['reused_over_oracle'])} vs "
                f"{pct(ms['first_continuation']['reused_over_oracle'])}; states created "
                f"{sum(ca['checkpoint_creations'].values()):,} vs "
                f"{sum(ms['checkpoint_creations'].values()):,}"
            )
        both = _get(unit, "both", budget)
        if both and both.get("incremental_hit_rate"):
            parts = [
                f"{k.replace('_', ' ')}: {pct(v, 2)} reused / oracle, "
                f"{pflops(both['incremental_saved_work'].get(k))}"
                for k, v in both["incremental_hit_rate"].items()
            ]
            out.append(f"- [{budget}] `both` second checkpoint: " + "; ".join(parts))
    out += targets(unit)
    return out


def targets(unit: UnitResult) -> list[str]:
    """The Phase 2 / 3 targets under the equal checkpoint-byte budget: ``chat_aware`` at least
    max(``input_end``, ``decode_end``) and ``main_sparse``; ``horizon`` at least ``both``."""

    def reused(policy: str) -> float | None:
        r = _get(unit, policy, EQUAL_BUDGET)
        return None if r is None else r["hit_rate"]["reused_over_oracle"]

    out = []
    checks = (("chat_aware", ("input_end", "decode_end", "main_sparse")), ("horizon", ("both",)))
    for policy, rivals in checks:
        mine = reused(policy)
        present = [(r, v) for r in rivals if (v := reused(r)) is not None]
        if mine is None or not present:
            continue
        best_name, best = max(present, key=lambda item: item[1])
        verdict = "met" if mine >= best - 1e-12 else f"missed by {pct(best - mine, 2)}"
        out.append(
            f"- target [{EQUAL_BUDGET}] `{policy}` {pct(mine, 2)} ≥ "
            + ", ".join(f"`{r}` {pct(v, 2)}" for r, v in present)
            + f": {verdict}"
            + ("" if verdict == "met" else f" (best rival `{best_name}`)")
        )
    return out


def _question(
    heading: str,
    runs: Sequence[dict[str, Any]],
    describe: Callable[[dict[str, Any]], str | None],
    *after: str,
) -> list[str]:
    """One question's answer: ``heading``, a line for each run ``describe`` has text for, the
    ``after`` lines, and a blank line."""
    lines = [heading]
    for r in runs:
        text = describe(r)
        if text is not None:
            lines.append(_line(r["policy"], text))
    return [*lines, *after, ""]


# -- each question's line for one run, in question order ------------------------------------


def _first_continuation_hit(r: dict[str, Any]) -> str:
    fc = r["first_continuation"]
    return (
        f"own-session hit {pct(fc['session_hit_rate'])} of {fc['requests']:,} first "
        f"continuations, any hit {pct(fc['hit_rate'])}, reused / oracle "
        f"{pct(fc['reused_over_oracle'])}"
    )


def _decode_end_reuse(r: dict[str, Any]) -> str:
    by = r["decode_end_hits_by_continuation"]
    total = sum(by.values())
    tool = by.get("tool", 0)
    return (
        f"decode_end_hit_rate {pct(r['decode_end_hit_rate'])} ({total:,} requests; "
        f"tool-call continuations {tool:,} = {pct(tool / total if total else None)})"
    )


def _input_end_fallback(r: dict[str, Any]) -> str | None:
    if r["input_end_fallback_rate"] is None:
        return None
    return f"input_end_fallback_rate {pct(r['input_end_fallback_rate'])}"


def _avoided_first_misses(r: dict[str, Any]) -> str | None:
    if r["policy"] == "main_sparse":
        return None
    return f"{r['avoided_first_misses']:,} of {r['first_continuation']['requests']:,}"


def _after_branch_learned(r: dict[str, Any]) -> str:
    return (
        f"{signed(r['additional_matched_tokens_after_branch_learned'])} tokens in "
        f"steady state; {r['reactive_branch_learning_misses']:,} branch-learning misses "
        f"({tokens(r['reactive_branch_learning_lost_tokens'])} tokens)"
    )


def _prompt_tokens_saved(r: dict[str, Any]) -> str:
    return (
        f"{tokens(r['joint_matched_tokens'])} of {tokens(r['prompt_tokens'])} prompt "
        f"tokens reused ({pct(r['hit_rate']['reused_over_oracle'])} of the oracle's "
        f"{tokens(r['oracle_reusable_tokens'])}); "
        f"{tokens(r['prompt_tokens_recomputed'])} recomputed; "
        f"{signed(r['additional_matched_tokens_vs_main_sparse'])} vs main_sparse"
    )


def _prefill_work_saved(r: dict[str, Any]) -> str:
    t = r["ttft_estimate_seconds"]
    return (
        f"{pflops(r['avoided_prefill_flops'])} avoided "
        f"({pct(r['avoided_prefill_fraction'])} of all prefill work); estimated TTFT "
        f"mean {seconds(t['mean'])}, p50 {seconds(t['p50'])}, p90 {seconds(t['p90'])}"
    )


def _state_memory(r: dict[str, Any]) -> str:
    life = r["checkpoint_lifetimes"]
    created = sum(r["checkpoint_creations"].values())
    per = r["saved_prompt_tokens_per_retained_state_byte"]
    return (
        f"{gib(r['retained_state_bytes']['mean'])} mean / "
        f"{gib(r['retained_state_bytes']['peak'])} peak; {created:,} states created "
        f"({_kinds(r['checkpoint_creations'])}); {_evicted(life)}; "
        f"{tokens(per * GIB if per else None)} saved tokens per GiB retained"
    )


def _eviction_externality(r: dict[str, Any]) -> str:
    ev = ", ".join(f"{k} {v:,}" for k, v in r["evictions"].items()) or "none"
    return (
        f"[{r['budget']}] {ev}; displaced checkpoints {r['displaced_checkpoints']:,}; "
        f"occupancy states {pct(r['occupancy']['state_fraction'])} / blocks "
        f"{pct(r['occupancy']['block_fraction'])} of capacity"
    )


def _first_vs_steady(r: dict[str, Any]) -> str:
    fc, st = r["first_continuation"], r["steady_state"]
    return (
        f"first {pct(fc['hit_rate'])}; {pct(fc['reused_over_oracle'])} — steady "
        f"{pct(st['hit_rate'])}; {pct(st['reused_over_oracle'])}"
    )


def _collapsed_candidates(r: dict[str, Any]) -> str:
    return f"{r['duplicate_candidates']:,} collapsed candidates; {r['recached_states']:,} re-cached states"


def _engine_cost(r: dict[str, Any]) -> str:
    return (
        f"{r['forced_scheduler_splits']:,} forced splits; "
        f"consumable {pct(r['disaggregated_consumability'])}; disaggregated replay "
        f"reuses {pct(r['disaggregated_reused_over_colocated'])} of the colocated tokens"
    )


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items() if v) or "none"


def _evicted(life: dict[str, Any]) -> str:
    if not life["evicted"]:
        return "none evicted"
    return f"{life['evicted']:,} evicted after {life['median_seconds']:,.0f} s (median)"


def unit_sweep(result: ExperimentResult, budget: str = EQUAL_CAPACITY) -> list[str]:
    policies = [r["policy"] for r in result.units[0].runs if r["budget"] == budget]
    header = ["unit", "block", *[f"`{p}`" for p in policies], "first cont.: " + ", ".join(policies)]
    rows = []
    for u in sorted(result.units, key=lambda u: u.unit):
        runs = {r["policy"]: r for r in u.runs if r["budget"] == budget}
        rows.append(
            [
                str(u.unit),
                str(u.block_size),
                *[pct(runs[p]["hit_rate"]["reused_over_oracle"]) if p in runs else "–" for p in policies],
                " / ".join(
                    pct(runs[p]["first_continuation"]["reused_over_oracle"], 0) if p in runs else "–"
                    for p in policies
                ),
            ]
        )
    return _table(header, rows)


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
        f"{c['flops_per_position'] / 1e3:.0f} kFLOP per earlier position; TTFT estimate = FLOPs / "
        f"({c['peak_flops'] / 1e12:.0f} TFLOP/s x {c['utilization']}), an estimate, not a measurement."
    )
    return [stream, model, cost, ""]


def markdown(
    result: ExperimentResult,
    *,
    command: str | None = None,
    title: str | None = None,
    plots: Sequence[Path] = (),
) -> str:
    lines = [f"## {title or _title(result)}", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += header(result)
    first, *others = result.units
    lines += [_side_by_side_title(first), "", *side_by_side(first), ""]
    lines += [f"### Which checkpoint served each request — unit {first.unit}", "", *serving(first), ""]
    lines += ["### The thirteen questions", "", *answers(first), ""]
    if others:
        lines += ["### Unit sweep (reused / oracle, equal total capacity)", "", *unit_sweep(result), ""]
    for u in others:
        lines += [_side_by_side_title(u), "", *side_by_side(u), ""]
    for p in plots:
        lines += [f"![{p.stem}]({p.as_posix()})", ""]
    return "\n".join(lines)


def _side_by_side_title(u: UnitResult) -> str:
    sizes = f"attention block {gib(u.attention_block_bytes)}, state {gib(u.state_bytes)}"
    return f"### Side by side — unit {u.unit} (block {u.block_size}: {sizes})"


def _title(result: ExperimentResult) -> str:
    s = result.stream
    return f"{s['workload']} × {s.get('family')} ({result.model['name']})"


def plot(result: ExperimentResult, folder: Path, stem: str) -> list[Path]:
    """Bar charts of reuse and state memory per policy and budget; reuse against the unit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    unit = result.units[0]
    budgets = sorted({r["budget"] for r in unit.runs})
    policies = list(dict.fromkeys(r["policy"] for r in unit.runs))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    width = 0.8 / max(len(budgets), 1)
    for b, budget in enumerate(budgets):
        xs = [i + b * width for i in range(len(policies))]
        runs = [_get(unit, p, budget) for p in policies]
        axes[0].bar(xs, [r["hit_rate"]["reused_over_oracle"] if r else 0 for r in runs], width, label=budget)
        axes[1].bar(
            xs,
            [r["first_continuation"]["reused_over_oracle"] or 0 if r else 0 for r in runs],
            width,
            label=budget,
        )
        axes[2].bar(
            xs, [r["retained_state_bytes"]["mean"] / GIB if r else 0 for r in runs], width, label=budget
        )
    for ax, name in zip(
        axes, ("reused / oracle", "first continuation: reused / oracle", "mean state GiB"), strict=True
    ):
        ax.set_xticks(
            [i + width * (len(budgets) - 1) / 2 for i in range(len(policies))], policies, rotation=20
        )
        ax.set_title(name)
    for ax in axes[:2]:  # ratios: start the axis near the lowest bar so differences show
        low = min((bar.get_height() for bar in ax.patches), default=0.0)
        ax.set_ylim(max(0.0, low - 0.05), 1.0)
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"{_title(result)} — unit {unit.unit}")
    fig.tight_layout()
    path = folder / f"{stem}-policies.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    out.append(path)
    if len(result.units) > 1:
        fig, ax = plt.subplots(figsize=(7, 4))
        ordered = sorted(result.units, key=lambda u: u.unit)
        units = [u.unit for u in ordered]
        for p in policies:
            ys = [
                (_get(u, p, EQUAL_CAPACITY) or {}).get("hit_rate", {}).get("reused_over_oracle")
                for u in ordered
            ]
            ax.plot(units, [y if y is not None else float("nan") for y in ys], marker="o", label=p)
        ax.set_xscale("log")
        ax.set_xlabel("prefix_match_unit (tokens)")
        ax.set_ylabel("reused / oracle")
        ax.legend(fontsize=8)
        ax.set_title(f"{_title(result)} — unit sweep ({EQUAL_CAPACITY})")
        fig.tight_layout()
        path = folder / f"{stem}-units.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out
