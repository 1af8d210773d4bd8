"""The report: Markdown that answers the experiment plan's thirteen questions in numbers, and
plots. Everything printed comes from an ``ExperimentResult``; nothing is recomputed here.

Where it sits: the report end, last in the flow: it prints an ``ExperimentResult`` from
``boundary.experiment.harness``; ``boundary.cli.experiment`` calls it.

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
    serving,
    side_by_side,
    unit_sweep,
)

__all__ = ["markdown", "pct", "plot"]

NOT_WITHOUT_GPU = (
    "snapshot and materialization *time* (the copy kernels' cost; bytes are reported)",
    "measured TTFT and throughput (here: the cost model through a FIFO prefill queue)",
    "the engine's real batching of prefills and the decode contention it causes",
    "KV-connector transfer times for the decode→prefill and shared-store deployments",
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
    lines += [_side_by_side_title(first), "", *side_by_side(first), ""]
    lines += [f"### Which checkpoint served each request — unit {first.unit}", "", *serving(first), ""]
    lines += ["### The plan's thirteen questions", "", *answers(first), ""]
    lines += _cost(first)
    lines += _deployments(first)
    if first.load_sweep:
        lines += [f"### Load: concurrency × capacity — unit {first.unit}, equal total capacity", ""]
        lines += [*load_table(first), ""]
    if others:
        lines += ["### Unit sweep (equal total capacity)", "", *unit_sweep(result), ""]
        lines += [
            "### The questions at every unit (equal total capacity)",
            "",
            *questions_by_unit(result),
            "",
        ]
    for u in others:
        lines += [_side_by_side_title(u), "", *side_by_side(u), ""]
    lines += ["### Not measured without a GPU", "", *(f"- {x}" for x in NOT_WITHOUT_GPU), ""]
    for p in plots:
        lines += [f"![{p.stem}]({p.as_posix()})", ""]
    return "\n".join(lines)


def _cost(unit: UnitResult) -> list[str]:
    rows = [
        [
            f"`{r['policy']}`",
            f"{r['extra_scheduler_steps']:,}",
            gib(r["snapshot_bytes"]),
            gib(r["materialization_bytes"]),
            tokens(r["duplicate_candidates"]),
        ]
        for r in runs_under(unit, EQUAL_CAPACITY) or unit.runs
    ]
    header = [
        "policy",
        "extra scheduler steps (forced splits)",
        "snapshot bytes",
        "materialization bytes (sub-block copy-on-write)",
        "duplicate candidates",
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
