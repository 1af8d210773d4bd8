"""``boundary experiment``'s options: the arguments it takes, their defaults, and their checks.

Where it sits: the report end's command line, under ``boundary.cli.experiment`` (which adds these
arguments to its parser and calls ``validate`` before any work) and beside
``boundary.cli.experiment_output`` (which writes the command line back for the report); it
imports ``boundary.cli.options`` and ``boundary.cli.experiment_engine`` (``--executor``), and
``boundary.experiment`` only inside the functions that need it.

Every option is checked before any work: a bad value is a ``ValueError`` naming the option
(exit 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from boundary.checkpoints.retention import Variant
from boundary.cli import experiment_engine
from boundary.cli.options import FamilySource, add_family_arguments, family_source, refuse_overwriting

if TYPE_CHECKING:
    from boundary.experiment.replay import BudgetMode

DEFAULT_FAMILY = "qwen3_5"
BUDGETS = "equal_capacity,equal_checkpoint_budget"
DEFAULT_CAPACITY_GIB = 32.0
POLICIES = ",".join((*(v.value for v in Variant), "oracle"))  # every engine policy, then the oracle


def comma_list(text: str) -> list[str]:
    """The non-empty, stripped parts of a comma-separated option."""
    return [part.strip() for part in text.split(",") if part.strip()]


def budget_mode(name: str) -> BudgetMode:
    """The budget mode ``name`` (``ValueError`` listing the known ones)."""
    from boundary.experiment.replay import BudgetMode

    try:
        return BudgetMode(name)
    except ValueError:
        known = ", ".join(b.value for b in BudgetMode)
        raise ValueError(f"--budget: unknown budget mode {name!r} (known: {known})") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every option of ``boundary experiment``, on its parser ``p``."""
    _add_workload_arguments(p)
    _add_cache_arguments(p)
    _add_load_arguments(p)
    _add_output_arguments(p)


def _add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """Which sessions to replay, rendered how."""
    p.add_argument(
        "--workload", required=True, help="tau_bench | mt_bench | bfcl | synthetic | PATH.jsonl | - (stdin)"
    )
    add_family_arguments(
        p,
        default_family=DEFAULT_FAMILY,
        model_metavar="PRESET|DIR",
        model_help="a model preset for the cache geometry (default: the family's; one of "
        f"{', '.join(preset_names())}), or a local model directory: its chat templates and tokenizer render "
        "the workload and its config.json gives the geometry (a hub id is refused: boundary runs offline)",
    )
    p.add_argument(
        "--variant",
        help="template variant, or a model directory's named template (default: the family's default)",
    )
    p.add_argument("--template-kwargs", default="{}", help="JSON object of template kwargs")
    p.add_argument(
        "--client",
        choices=("kept", "dropped"),
        default="dropped",
        help="whether the client sends assistant reasoning back in history (default: dropped)",
    )
    p.add_argument(
        "--system-prompt",
        choices=("shared", "per_session", "head_rewrite"),
        default="shared",
        help="per_session gives every session its own system prompt; head_rewrite appends a note for "
        "each request to the system prompt, as a client that rewrites the prompt's head (default: shared)",
    )
    p.add_argument(
        "--no-reasoning", action="store_true", help="do not add synthetic reasoning to assistant turns"
    )
    p.add_argument("--sessions", type=int, help="use only the first N sessions")
    p.add_argument(
        "--synthesise-arrivals",
        action="store_true",
        help="re-synthesise arrival times even when the trace records them (arrival_s)",
    )
    p.add_argument("--synthetic-sessions", type=int, default=200, help="sessions of the synthetic workload")
    p.add_argument("--bfcl-categories", default="base", help="BFCL multi-turn categories, comma-separated")


def _add_cache_arguments(p: argparse.ArgumentParser) -> None:
    """The policies, budgets and cache model the workload is replayed through."""
    p.add_argument(
        "--policies",
        default=POLICIES,
        help=f"comma-separated (default: {POLICIES}; experiment-only: chain_fallback)",
    )
    p.add_argument(
        "--budget",
        default=BUDGETS,
        help="budget modes, comma-separated: equal_capacity, equal_checkpoint_budget (default: both)",
    )
    p.add_argument(
        "--unit",
        type=int,
        action="append",
        help="prefix_match_unit (repeatable: a sweep; default: the model's block size)",
    )
    p.add_argument(
        "--capacity-gib",
        type=float,
        help=f"cache memory (default: a recording header's pool, else {DEFAULT_CAPACITY_GIB:g})",
    )
    p.add_argument(
        "--block",
        type=int,
        help="the align-mode block size, for a trace without a recording header (default: the model's; "
        "a recording's header gives its engine's)",
    )
    p.add_argument(
        "--checkpoint-budget-gib",
        type=float,
        help="state bytes for equal_checkpoint_budget (default: main_sparse's mean under equal capacity)",
    )
    p.add_argument(
        "--decode-states",
        choices=("block", "unit"),
        default="block",
        help="where output-side checkpoints materialize: block boundaries (what vLLM align mode "
        "produces while decoding; default) or unit boundaries",
    )
    p.add_argument(
        "--junction-at-unit",
        action="store_true",
        help="keep junction states at the unit (vLLM --enable-mamba-shared-prefix-checkpoint)",
    )


def _add_load_arguments(p: argparse.ArgumentParser) -> None:
    """How many sessions run at once, and the load sweep."""
    p.add_argument("--concurrency", type=float, default=16.0, help="mean concurrent sessions (default 16)")
    p.add_argument(
        "--load-concurrency",
        type=float,
        action="append",
        help="load sweep: mean concurrent sessions (repeatable; with --load-capacity-gib)",
    )
    p.add_argument(
        "--load-capacity-gib",
        type=float,
        action="append",
        help="load sweep: cache memory per replica (repeatable; with --load-concurrency)",
    )
    experiment_engine.add_argument(p)
    p.add_argument(
        "--eviction",
        choices=("engine_steps", "byte_lru"),
        default="engine_steps",
        help="equal-capacity eviction: vLLM's block pool page by page (default) or byte-LRU (a what-if)",
    )
    p.add_argument("--load-replicas", type=int, default=1, help="load sweep: engine replicas (default 1)")
    p.add_argument(
        "--load-routing",
        choices=("session_sticky", "round_robin"),
        default="session_sticky",
        help="load sweep: how the router picks a replica (default session_sticky)",
    )
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        help="load sweep: the scheduler's max_num_seqs (its token budget is the chunk size, 8192)",
    )
    p.add_argument("--seed", type=int, default=0)


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Where the result, report and plots go."""
    p.add_argument(
        "--json", dest="json_out", type=Path, help="write the machine-readable result ('-': stdout)"
    )
    p.add_argument("--report", type=Path, help="write the Markdown report here")
    p.add_argument("--plots", type=Path, help="write plots into this folder (default: beside --report)")
    p.add_argument("--title", help="report section title")
    p.add_argument("--no-cache", action="store_true", help="render again instead of reading cached sessions")


def preset_names() -> list[str]:
    """The model presets ``--model`` may name."""
    from boundary.experiment.presets import PRESETS

    return list(PRESETS)


def chosen_family(args: argparse.Namespace) -> FamilySource:
    """The family ``args`` choose; a ``--model`` value naming a preset is the geometry's."""
    return family_source(args, default_family=DEFAULT_FAMILY, presets=preset_names())


def validate(args: argparse.Namespace) -> None:
    """Every option checked before any work; ``ValueError`` naming the option (exit 2)."""
    from boundary.experiment.policies import ALL_NAMES
    from boundary.experiment.workloads import SHIPPED

    trace = None if args.workload in SHIPPED else Path(args.workload)
    source = chosen_family(args)
    refuse_overwriting(
        {"trace": trace, **source.input_files()},
        {"--json": args.json_out, "--report": args.report, "--plots": args.plots},
    )

    positive = [
        ("--unit", args.unit or ()),
        ("--capacity-gib", [] if args.capacity_gib is None else [args.capacity_gib]),
        ("--block", [] if args.block is None else [args.block]),
        ("--concurrency", [args.concurrency]),
        ("--load-concurrency", args.load_concurrency or ()),
        ("--load-capacity-gib", args.load_capacity_gib or ()),
        ("--load-replicas", [args.load_replicas]),
        ("--max-num-seqs", [args.max_num_seqs]),
        ("--sessions", [] if args.sessions is None else [args.sessions]),
        ("--synthetic-sessions", [args.synthetic_sessions]),
        (
            "--checkpoint-budget-gib",
            [] if args.checkpoint_budget_gib is None else [args.checkpoint_budget_gib],
        ),
    ]
    for flag, values in positive:
        for value in values:
            if not value > 0:  # also refuses NaN
                raise ValueError(f"{flag}: must be positive, got {value:g}")
    capacity = DEFAULT_CAPACITY_GIB if args.capacity_gib is None else args.capacity_gib
    if args.checkpoint_budget_gib is not None and args.checkpoint_budget_gib >= capacity:
        raise ValueError(
            f"--checkpoint-budget-gib: {args.checkpoint_budget_gib:g} must be below --capacity-gib "
            f"{capacity:g}"
        )
    for unit in args.unit or ():
        if args.block is not None and args.block % unit:
            raise ValueError(f"--unit: {unit} does not divide --block {args.block}")
    policies = comma_list(args.policies)
    unknown = [p for p in policies if p not in ALL_NAMES]
    if unknown or not policies:
        raise ValueError(
            f"--policies: unknown policy {unknown[0]!r} (valid: {', '.join(ALL_NAMES)})"
            if unknown
            else f"--policies: none given (valid: {', '.join(ALL_NAMES)})"
        )
    if not comma_list(args.budget):
        raise ValueError("--budget: none given (valid: equal_capacity, equal_checkpoint_budget)")
    for b in comma_list(args.budget):
        budget_mode(b)
    if bool(args.load_concurrency) != bool(args.load_capacity_gib):
        raise ValueError("--load-concurrency and --load-capacity-gib go together")
    if args.system_prompt == "head_rewrite" and args.workload == "synthetic":
        raise ValueError(
            "--system-prompt head_rewrite: the synthetic workload has no system prompt to rewrite"
        )
