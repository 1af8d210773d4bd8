"""``boundary experiment``'s output: plots, the Markdown report, the JSON result and the summary table.

Where it sits: the report end's command line, under ``boundary.cli.experiment`` (which calls
``write`` and ``summary`` with the model executor's result); it imports
``boundary.cli.experiment_options`` (the defaults ``command_line`` leaves out) and
``boundary.experiment.report`` inside the functions that write.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boundary.cli.experiment_options import BUDGETS, POLICIES, chosen_family

if TYPE_CHECKING:
    from rich.console import Console

    from boundary.experiment.harness import ExperimentResult


def command_line(args: argparse.Namespace) -> str:
    """The command as a user would type it (defaults left out), for the report."""
    source = chosen_family(args)
    parts = ["boundary", "experiment", "--workload", str(args.workload), *source.flags()]
    options = [
        ("--variant", args.variant),
        ("--template-kwargs", None if args.template_kwargs == "{}" else args.template_kwargs),
        ("--client", args.client if args.client != "dropped" else None),
        ("--system-prompt", args.system_prompt if args.system_prompt != "shared" else None),
        ("--sessions", args.sessions),
        ("--model", None if source.model_dir is not None else args.model),
        ("--capacity-gib", args.capacity_gib),
        ("--block", args.block),
        ("--checkpoint-budget-gib", args.checkpoint_budget_gib),
        ("--decode-states", args.decode_states if args.decode_states != "block" else None),
        ("--concurrency", args.concurrency if args.concurrency != 16.0 else None),
        ("--seed", args.seed or None),
        ("--budget", args.budget if args.budget != BUDGETS else None),
    ]
    for flag, value in options:
        if value is not None:
            parts += [flag, str(value)]
    if args.workload == "synthetic" and args.synthetic_sessions != 200:
        parts += ["--synthetic-sessions", str(args.synthetic_sessions)]
    if args.no_reasoning:
        parts.append("--no-reasoning")
    if args.synthesise_arrivals:
        parts.append("--synthesise-arrivals")
    if args.junction_at_unit:
        parts.append("--junction-at-unit")
    for unit in args.unit or ():
        parts += ["--unit", str(unit)]
    for flag, values in (
        ("--load-concurrency", args.load_concurrency),
        ("--load-capacity-gib", args.load_capacity_gib),
    ):
        for value in values or ():
            parts += [flag, f"{value:g}"]
    for flag, value, default in (
        ("--load-replicas", args.load_replicas, 1),
        ("--load-routing", args.load_routing, "session_sticky"),
        ("--max-num-seqs", args.max_num_seqs, 256),
        ("--eviction", args.eviction, "engine_steps"),
        ("--executor", args.executor, "model"),
    ):
        if value != default:
            parts += [flag, str(value)]
    if args.policies != POLICIES:
        parts += ["--policies", args.policies]
    for flag, value in (("--json", args.json_out), ("--report", args.report), ("--title", args.title)):
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


def write(args: argparse.Namespace, result: ExperimentResult, name: str, err: Any) -> None:
    """Plots, the Markdown report and the JSON, where the options ask for them."""
    from boundary.experiment.report import markdown, plot

    plots: list[Path] = []
    folder = args.plots or (args.report.parent if args.report else None)
    if folder is not None:
        plots = plot(result, folder, args.report.stem if args.report else name)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        links = [Path(os.path.relpath(p, args.report.parent)) for p in plots]
        text = markdown(result, command=command_line(args), title=args.title, plots=links)
        args.report.write_text(text + "\n", encoding="utf-8")
        err.print(f"report: {args.report}")
    if args.json_out:
        text = result.model_dump_json(indent=1)
        if str(args.json_out) == "-":
            sys.stdout.write(text + "\n")
        else:
            args.json_out.parent.mkdir(parents=True, exist_ok=True)
            args.json_out.write_text(text + "\n", encoding="utf-8")


def summary(console: Console, result: ExperimentResult) -> None:
    """One table per unit on ``console``: each policy and budget's reuse over the oracle's."""
    from rich.table import Table

    from boundary.experiment.report.fmt import pct

    for unit in result.units:
        table = Table(title=f"unit {unit.unit} (block {unit.block_size}) — reused / oracle")
        for column in ("policy", "budget", "all", "first continuation", "steady state", "mean state GiB"):
            table.add_column(column)
        for r in unit.runs:
            table.add_row(
                r["policy"],
                r["budget"],
                pct(r["hit_rate"]["reused_over_oracle"]),
                pct(r["first_continuation"]["reused_over_oracle"]),
                pct(r["steady_state"]["reused_over_oracle"]),
                f"{r['retained_state_bytes']['mean'] / 2**30:.2f}",
            )
        console.print(table)
