"""The report: Markdown that answers the experiment plan's thirteen questions in numbers, and
plots. Everything printed comes from an ``ExperimentResult``; nothing is recomputed here.

Where it sits: the report end, last in the flow: it prints an ``ExperimentResult`` from
``boundary.experiment.harness``; ``boundary.cli.experiment_output`` calls it.

``fmt`` formats numbers ("–" for undefined), ``header`` states the stream and every modelling
assumption, ``tables`` and ``questions`` (with ``answers``) write the sections, ``plots`` the
figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from boundary.experiment.harness import ExperimentResult, UnitResult
from boundary.experiment.report.fmt import EQUAL_CAPACITY, gib, pct, runs_under, table, tokens
from boundary.experiment.report.header import header
from boundary.experiment.report.plots import plot
from boundary.experiment.report.questions import answers
from boundary.experiment.report.tables import (
    deployments,
    load_table,
    questions_by_unit,
    saturation_table,
    serving,
    side_by_side,
    unit_sweep,
)
from boundary.experiment.report.targets import section as target_section

__all__ = ["markdown", "pct", "plot"]

NOT_WITHOUT_GPU = (
    "snapshot and materialization *time* (the copy kernels' cost; bytes are reported)",
    "measured TTFT and throughput (here: the step cost model through a scheduler model)",
    "the engine's real step times (the constants in `boundary/experiment/calibration.py` are assumed)",
    "KV-connector transfer times for the decode→prefill and shared-store deployments",
)


LOAD_NOTE = (
    "Closed loop: each user's next request arrives only after its previous reply finished plus a "
    "client delay; offered load is what the users would ask with no contention (Little's law), capacity "
    "an upper bound for this request mix at a full batch. A point is **saturated** when its throughput "
    "falls below 90% of its offered load; its TTFT is queueing, not a policy's effect, and is never a "
    "headline."
)


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
    lines += [_side_by_side_title(first), "", *side_by_side(first), "", *budget_line(first)]
    lines += [f"### Which checkpoint served each request — unit {first.unit}", "", *serving(first), ""]
    lines += ["### The plan's thirteen questions", "", *answers(first), ""]
    lines += _cost(first)
    lines += _deployments(first)
    if first.load_sweep:
        lines += [f"### Load: closed-loop users × cache — unit {first.unit}, equal total capacity", ""]
        lines += [LOAD_NOTE, "", *load_table(first), "", "Saturation per policy:", ""]
        lines += [*saturation_table(first), ""]
    if others:
        lines += ["### Unit sweep (equal total capacity)", "", *unit_sweep(result), ""]
        lines += [
            "### The questions at every unit (equal total capacity)",
            "",
            *questions_by_unit(result),
            "",
        ]
    if others:
        lines += ["### Phase 2 / 3 targets at every unit", "", *target_section(result.units)]
    for u in others:
        lines += [_side_by_side_title(u), "", *side_by_side(u), ""]
    lines += ["### Not measured without a GPU", "", *(f"- {x}" for x in NOT_WITHOUT_GPU), ""]
    for p in plots:
        lines += [f"![{p.stem}]({p.as_posix()})", ""]
    return "\n".join(lines)


def budget_line(unit: UnitResult) -> list[str]:
    """The equal checkpoint-byte budget as every policy kept it: exceedances (0 by the
    admission rule, counted), the states it refused and the pool's over-commits."""
    runs = [r for r in unit.runs if r.get("checkpoint_budget")]
    if not runs:
        return []
    b = unit.checkpoint_budget_bytes
    parts = [
        f"`{r['policy']}` peak {gib(r['checkpoint_budget']['peak_bytes'])}, "
        f"{r['checkpoint_budget']['exceedances']:,} exceedances, "
        f"{sum(r['checkpoint_budget']['refusals'].values()):,} states refused, "
        f"{r['checkpoint_budget'].get('pool_overcommits', 0):,} pool over-commits"
        for r in runs
    ]
    return [
        f"Equal checkpoint budget B = {gib(b)} ({b / unit.state_bytes:,.0f} states of this model): "
        + "; ".join(parts)
        + ".",
        "",
    ]


def _cost(unit: UnitResult) -> list[str]:
    rows = [
        [
            f"`{r['policy']}`",
            f"{r['forced_scheduler_splits']:,}",
            gib(r["snapshot_bytes"]),
            gib(r["materialization_bytes"]),
            tokens(r["duplicate_candidates"]),
            tokens(r["candidates_on_twin"]),
            tokens(r["junctions_on_kept_states"]),
        ]
        for r in runs_under(unit, EQUAL_CAPACITY) or unit.runs
    ]
    header = [
        "policy",
        "extra scheduler steps (forced splits)",
        "snapshot bytes",
        "materialization bytes (sub-block copy-on-write)",
        "duplicate candidates (its own, on one state)",
        "candidates on P_end's block twin",
        "junctions on a kept state",
    ]
    return [f"### Checkpoint cost — unit {unit.unit}", "", *table(header, rows), ""]


def _deployments(unit: UnitResult) -> list[str]:
    """The PD states under ``main_sparse`` (P_end) and ``both`` (U_end + D_end)."""
    runs = runs_under(unit, EQUAL_CAPACITY) or unit.runs
    chosen = [r for r in runs if r["policy"] in ("main_sparse", "both")] or runs[:1]
    if not chosen:
        return []
    out = [f"### Deployments: the four PD states — unit {unit.unit}", ""]
    for run in chosen:
        n = run["pd_states"]["continuations"]
        out += [
            f"Under `{run['policy']}`, per checkpoint kind of the previous request, over {n:,} "
            "continuations: retained at lookup, hash-matched by the new prompt, consumable by the worker "
            "that prefills it, and selected as its effective joint hit (request counts).",
            "",
            *deployments(run, notes=run is chosen[-1]),
            "",
        ]
    return out


def _side_by_side_title(u: UnitResult) -> str:
    sizes = f"attention block {gib(u.attention_block_bytes)}, state {gib(u.state_bytes)}"
    return f"### Side by side — unit {u.unit} (block {u.block_size}: {sizes})"


def _title(result: ExperimentResult) -> str:
    s = result.stream
    return f"{s['workload']} × {s.get('family')} ({result.model['name']})"
