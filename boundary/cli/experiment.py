"""``boundary experiment``: replay a workload under every retention policy and budget mode.

    boundary experiment --workload W [--family NAME] [--model PRESET] ...
    boundary experiment --workload W --model DIR ...     (templates, tokenizer and geometry from DIR)
    boundary experiment --workload W --template FILE --tokenizer PATH --model PRESET ...
    boundary experiment --workload recorded.jsonl ...     (a recording: at its engine's geometry)

A recording whose first line is a header (``boundary.trace.header``, written by the vLLM
recorder) replays at the engine's geometry: its block, ``prefix_match_unit`` (the default unit),
page layout and pool (the default capacity); ``--unit`` and ``--capacity-gib`` still override.
``--block`` gives the block for a trace without one (the model's page bytes at that block).

Where it sits: the report end's command line: ``boundary.cli.main`` dispatches ``boundary
experiment`` here; it calls ``boundary.experiment`` (harness, report) and nothing calls it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boundary.checkpoints.retention import Variant
from boundary.cli import experiment_engine
from boundary.cli.options import (
    FamilySource,
    add_family_arguments,
    family_source,
    refuse_overwriting,
    template_kwargs,
)

if TYPE_CHECKING:
    from rich.console import Console

    from boundary.cache.accounting import ModelDescription
    from boundary.experiment.harness import ExperimentConfig, ExperimentResult, GivenGeometry
    from boundary.experiment.replay import BudgetMode
    from boundary.experiment.workloads import WorkloadOptions
    from boundary.trace.header import RecordingHeader

DEFAULT_FAMILY = "qwen3_5"
BUDGETS = "equal_capacity,equal_checkpoint_budget"
DEFAULT_CAPACITY_GIB = 32.0
POLICIES = ",".join((*(v.value for v in Variant), "oracle"))  # every engine policy, then the oracle


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _budget(name: str) -> BudgetMode:
    from boundary.experiment.replay import BudgetMode

    try:
        return BudgetMode(name)
    except ValueError:
        known = ", ".join(b.value for b in BudgetMode)
        raise ValueError(f"--budget: unknown budget mode {name!r} (known: {known})") from None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "experiment",
        help="replay a workload through the vLLM align-mode cache model under each retention policy",
        description="Render a workload with a family's real template, replay it through a model of "
        "vLLM's align-mode hybrid prefix cache under each retention policy (main_sparse, input_end, "
        "decode_end, both, chat_aware, horizon; oracle as the upper bound) and budget mode, and report the "
        "metrics. "
        "WORKLOAD is a shipped workload (tau_bench, mt_bench, bfcl, synthetic) or a JSONL trace file in the "
        "audit's format. The family is a shipped one, a local model directory (--model DIR: its templates "
        "and tokenizer render, its config.json gives the cache geometry) or a template file with a "
        "tokenizer (--template FILE --tokenizer PATH, with --model PRESET for the geometry).",
    )
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
        f"{', '.join(_preset_names())}), or a local model directory: its chat templates and tokenizer render "
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


def _preset_names() -> list[str]:
    from boundary.experiment.presets import PRESETS

    return list(PRESETS)


def _family_source(args: argparse.Namespace) -> FamilySource:
    """The family ``args`` choose; a ``--model`` value naming a preset is the geometry's."""
    return family_source(args, default_family=DEFAULT_FAMILY, presets=_preset_names())


def command_line(args: argparse.Namespace) -> str:
    """The command as a user would type it (defaults left out), for the report."""
    source = _family_source(args)
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


def validate(args: argparse.Namespace) -> None:
    """Every option checked before any work; ``ValueError`` naming the option (exit 2)."""
    from boundary.experiment.policies import ALL_NAMES
    from boundary.experiment.workloads import SHIPPED

    trace = None if args.workload in SHIPPED else Path(args.workload)
    source = _family_source(args)
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
    policies = _csv(args.policies)
    unknown = [p for p in policies if p not in ALL_NAMES]
    if unknown or not policies:
        raise ValueError(
            f"--policies: unknown policy {unknown[0]!r} (valid: {', '.join(ALL_NAMES)})"
            if unknown
            else f"--policies: none given (valid: {', '.join(ALL_NAMES)})"
        )
    if not _csv(args.budget):
        raise ValueError("--budget: none given (valid: equal_capacity, equal_checkpoint_budget)")
    for b in _csv(args.budget):
        _budget(b)
    if bool(args.load_concurrency) != bool(args.load_capacity_gib):
        raise ValueError("--load-concurrency and --load-capacity-gib go together")
    if args.system_prompt == "head_rewrite" and args.workload == "synthetic":
        raise ValueError(
            "--system-prompt head_rewrite: the synthetic workload has no system prompt to rewrite"
        )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from boundary.cache.accounting import geometry_for_unit, minimum_block_size
    from boundary.experiment.cost import PrefillCostModel
    from boundary.experiment.harness import run_experiment
    from boundary.experiment.workloads import SHIPPED, build_stream
    from boundary.trace.records import STDIN, read_header

    validate(args)
    experiment_engine.check(args)  # with --executor engine: no CPU engine is one line, exit 2
    err = Console(stderr=True, highlight=False)
    if args.workload not in (*SHIPPED, STDIN) and not Path(args.workload).exists():
        raise ValueError(
            f"--workload {args.workload!r}: neither a shipped workload ({', '.join(SHIPPED)}) nor a file"
        )
    source = _family_source(args)
    model = _geometry(source, args.model)
    header = None if args.workload in SHIPPED else read_header(args.workload)
    given = _given_geometry(args, model, header)
    family = None if source.name is not None else source.load(args.variant)
    options, config = _settings(args, source, header)
    with err.status("preparing the stream") as status:
        stream = build_stream(
            args.workload,
            options,
            PrefillCostModel(model),
            family=family,
            use_cache=not args.no_cache,
            progress=lambda msg: status.update(msg),
        )
        err.print(
            f"{len(stream):,} requests in {len(stream.sessions()):,} sessions ({stream.name}, {source.label})"
        )
    if args.executor == "engine":
        layout = given.layout if given is not None else geometry_for_unit(model, minimum_block_size(model))
        experiment_engine.run(args, stream, layout, _capacity_gib(args, header), err)
        return 0
    with err.status("replaying the stream") as status:
        result = run_experiment(
            stream, model, config, progress=lambda msg: status.update(msg), geometry=given
        )
    experiment_engine.label_model_runs(result.units)
    _write(args, result, stream.name, err)
    _summary(err, result)
    return 0


def _geometry(source: FamilySource, model: str | None) -> ModelDescription:
    """The cache model's geometry: a model directory's ``config.json``; else the ``--model``
    preset, or the shipped family's preset (``ValueError`` asking for ``--model`` when there
    is none, as for a template file)."""
    if source.model_dir is not None:
        from boundary.experiment.model_config import describe_model

        return describe_model(source.model_dir)
    from boundary.experiment.presets import preset_for_family

    return preset_for_family(source.label, model)


def _given_geometry(
    args: argparse.Namespace, model: ModelDescription, header: RecordingHeader | None
) -> GivenGeometry | None:
    """The layout to replay at in place of the model's: a recording header's (``--block``
    refused beside it), or the model's at ``--block``; None: the model's own."""
    from boundary.cache.accounting import CacheGeometry, align_mode_geometry
    from boundary.experiment.harness import GivenGeometry

    if header is not None:
        g = header.geometry
        if args.block is not None and args.block != g.block_size:
            raise ValueError(
                f"--block: the recording's header gives its engine's block, {g.block_size}; --block is for a "
                "trace without a header"
            )
        layout = CacheGeometry(
            g.block_size,
            g.prefix_match_unit,
            g.page_bytes,
            g.group_size,
            g.attention_groups,
            g.recurrent_groups,
        )
        return GivenGeometry(layout, f"the recording's header ({header.engine})")
    if args.block is None:
        return None
    try:
        layout = align_mode_geometry(model, block_size=args.block)
    except ValueError as exc:
        raise ValueError(f"--block: {exc} (give --model with the served model's directory)") from None
    return GivenGeometry(layout, f"--block {args.block} with {model.name}'s page bytes")


def _settings(
    args: argparse.Namespace, source: FamilySource, header: RecordingHeader | None = None
) -> tuple[WorkloadOptions, ExperimentConfig]:
    from boundary.experiment.harness import ExperimentConfig
    from boundary.experiment.workloads import WorkloadOptions

    kwargs = template_kwargs(args.template_kwargs)
    options = WorkloadOptions(
        family=source.label,
        variant=args.variant,
        template_kwargs=kwargs,
        client=args.client,
        system_prompt=args.system_prompt,
        reasoning=not args.no_reasoning,
        seed=args.seed,
        sessions=args.sessions,
        bfcl_categories=tuple(_csv(args.bfcl_categories)),
        synthetic_sessions=args.synthetic_sessions,
        synthetic_history="append_only"
        if args.client == "kept" and kwargs.get("preserve_thinking")
        else "drop_before_last_user",
        concurrency=args.concurrency,
        arrivals="synthesised" if args.synthesise_arrivals else "recorded",
    )
    config = ExperimentConfig(
        policies=tuple(_csv(args.policies)),
        budgets=tuple(_budget(b) for b in _csv(args.budget)),
        units=tuple(args.unit) if args.unit else (None,),
        capacity_gib=_capacity_gib(args, header),
        checkpoint_budget_gib=args.checkpoint_budget_gib,
        junction_at_unit=args.junction_at_unit,
        output_at_unit=args.decode_states == "unit",
        load_concurrency=tuple(args.load_concurrency or ()),
        load_capacity_gib=tuple(args.load_capacity_gib or ()),
        load_replicas=args.load_replicas,
        load_routing=args.load_routing,
        max_num_seqs=args.max_num_seqs,
        eviction=args.eviction,
    )
    return options, config


def _capacity_gib(args: argparse.Namespace, header: RecordingHeader | None) -> float:
    """``--capacity-gib``, else a recording header's pool, else the default."""
    from boundary.experiment.harness import GIB

    if args.capacity_gib is not None:
        return float(args.capacity_gib)
    if header is not None:
        return header.geometry.capacity_bytes / GIB
    return DEFAULT_CAPACITY_GIB


def _write(args: argparse.Namespace, result: ExperimentResult, name: str, err: Any) -> None:
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


def _summary(console: Console, result: ExperimentResult) -> None:
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
