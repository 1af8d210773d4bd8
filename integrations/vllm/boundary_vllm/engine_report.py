"""The Markdown of an engine experiment (``engine_experiment.run_engine_experiment``'s result).

Where it sits: the report end beside the engine executor: ``boundary.cli.experiment_engine`` and
``benchmarks/engine_experiment.py`` call it; it reads the result's plain data and imports nothing
of vLLM.

Per unit, one row per policy: what the engine reused (its ``num_cached_tokens``) over the prompt
and over the oracle in the engine's own event order, the cache model's prediction for the same
order, their agreement, the pages the engine's pool evicted and the states the plugin kept; then
the first requests where the model and the engine disagree, with the kind the engine served.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def runs_table(unit: Mapping[str, Any]) -> list[str]:
    """One row per policy of one unit."""
    lines = [
        "| policy | engine reused / prompt | engine reused / oracle | engine tokens | model tokens "
        "| model agreement | evictions | kept states |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in unit["runs"]:
        model = "n/a" if r["model_reused_tokens"] is None else f"{r['model_reused_tokens']:,}"
        lines.append(
            f"| {r['policy']} | {_pct(r['reused_over_prompt'])} | {_pct(r['reused_over_oracle'])} "
            f"| {r['reused_tokens']:,} | {model} | {_pct(r['model_agreement'])} | {r['evictions']:,} "
            f"| {sum(r['kept_states'].values()):,} |"
        )
    return lines


def disagreements_table(unit: Mapping[str, Any]) -> list[str]:
    """The first requests of each policy where the model's hit is not the engine's."""
    rows = [(r["policy"], d) for r in unit["runs"] for d in r["first_disagreements"]]
    if not rows:
        return ["The cache model predicted every request's hit."]
    lines = [
        "| policy | request | session | turn | engine hit | model hit | engine served |",
        "|---|---|---|---|---|---|---|",
    ]
    for policy, d in rows:
        lines.append(
            f"| {policy} | {d['request']} | {d['session']} | {d['turn']} | {d['engine_hit']:,} "
            f"| {d['model_hit']:,} | {d['engine_kind']} |"
        )
    return lines


def markdown(result: Mapping[str, Any], *, title: str | None = None) -> str:
    """The report: the stream, the target and the engine, then each unit's tables."""
    stream, target, engine = result["stream"], result["target"], result["engine"]
    out = [
        f"## {title or 'Engine experiment: ' + stream['name']}",
        "",
        f"{stream['requests']:,} requests in {stream['sessions']:,} sessions ({stream['name']}), executed by "
        f"vLLM's CPU build ({engine['vllm']}) with boundary's plugin on the tiny model {engine['model']}; "
        f"the target's pool: {target['capacity_gib']:g} GiB in pages of {target['pool_page_bytes']:,} bytes. "
        "Every hit, eviction and kept state is the engine's; the model column is the cache model's "
        "prediction for the engine's own event order.",
    ]
    for unit in result["units"]:
        out += [
            "",
            f"### unit {unit['unit']}, block {unit['block_size']}: {unit['pages']:,} pages, "
            f"at most {unit['concurrency']} sessions in flight",
            "",
            *runs_table(unit),
            "",
            *disagreements_table(unit),
        ]
    return "\n".join(out)
