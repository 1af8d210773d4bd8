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
experiment`` here; its options are ``boundary.cli.experiment_options``', its output
``boundary.cli.experiment_output``'s; it calls ``boundary.experiment`` (workloads, harness) or,
with ``--executor engine``, ``boundary.cli.experiment_engine``, and nothing calls it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from boundary.cli import experiment_engine, experiment_output
from boundary.cli.experiment_options import (
    DEFAULT_CAPACITY_GIB,
    add_arguments,
    budget_mode,
    chosen_family,
    comma_list,
    validate,
)
from boundary.cli.options import FamilySource, template_kwargs

if TYPE_CHECKING:
    from boundary.cache.accounting import ModelDescription
    from boundary.experiment.harness import ExperimentConfig, GivenGeometry
    from boundary.experiment.workloads import WorkloadOptions
    from boundary.trace.header import RecordingHeader


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
    add_arguments(p)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from boundary.cache.accounting import geometry_for_unit, minimum_block_size
    from boundary.experiment.cost import PrefillCostModel
    from boundary.experiment.harness import run_experiment
    from boundary.experiment.workloads import SHIPPED, build_stream
    from boundary.trace.reader import STDIN, read_header, read_recording

    validate(args)
    experiment_engine.check(args)  # with --executor engine: no CPU engine is one line, exit 2
    err = Console(stderr=True, highlight=False)
    if args.workload not in (*SHIPPED, STDIN) and not Path(args.workload).exists():
        raise ValueError(
            f"--workload {args.workload!r}: neither a shipped workload ({', '.join(SHIPPED)}) nor a file"
        )
    source = chosen_family(args)
    model = _geometry(source, args.model)
    # stdin can be read once: its header and requests together, here
    header, trace = read_recording(STDIN) if args.workload == STDIN else (None, None)
    if args.workload not in (*SHIPPED, STDIN):
        header = read_header(args.workload)
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
            trace=trace,
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
    experiment_output.write(args, result, stream.name, err)
    experiment_output.summary(err, result)
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
        bfcl_categories=tuple(comma_list(args.bfcl_categories)),
        synthetic_sessions=args.synthetic_sessions,
        synthetic_history="append_only"
        if args.client == "kept" and kwargs.get("preserve_thinking")
        else "drop_before_last_user",
        concurrency=args.concurrency,
        arrivals="synthesised" if args.synthesise_arrivals else "recorded",
    )
    config = ExperimentConfig(
        policies=tuple(comma_list(args.policies)),
        budgets=tuple(budget_mode(b) for b in comma_list(args.budget)),
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
