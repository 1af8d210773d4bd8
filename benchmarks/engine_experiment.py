"""The experiment executed twice, side by side: by the cache model (``boundary experiment``'s
default executor) and by a running vLLM (its CPU build, ``--executor engine``), with the model's
per-request prediction checked against every request the engine served.

Where it sits: outside the package, at the engine end: a script nobody imports; it builds the
experiment's streams (``boundary.experiment.workloads``), runs ``boundary.experiment.harness``
(the model executor) and ``boundary_vllm.engine_experiment`` (the engine executor) over each, and
writes one row per workload, target block, unit and policy.

Columns: the model executor's reuse (its own arrival schedule, the page-by-page pool at equal
capacity) and the engine's (closed-loop sessions, its own order), each over the prompt tokens;
the model's prediction for the engine's order, and the agreement (requests whose predicted hit is
the engine's). The two executors' schedules differ, so their reuse columns are compared as
figures, and only the agreement column is a per-request check.

Targets: Qwen3-Next-80B-A3B (block 544) and Qwen3.5-35B-A3B (block 1056), each at units 16 and 32
(64 divides neither block, and vLLM refuses a unit that does not divide its block);
workloads tau-bench, BFCL (base) and ShareGPT-like chats (``mt_bench.sharegpt_like``), rendered
with Qwen3.5 (the tiny models' vocabulary). Each policy's figures are printed in a line as its
engine run ends; rows (with the kinds of state that served the hits) are appended to
``--out``/rows.jsonl, and the Markdown table rewritten, as each workload and block ends. Each
engine run is saved under ``--out``/runs/<workload>/ (``boundary_vllm.engine_observations``), and
``--recheck`` checks the cache model as it is now against every saved run without the engine.

Usage (from the repository root, in the engine environment that ``scripts/test`` installs):
    PYTHONPATH=.:integrations/vllm .venv-engine/bin/python benchmarks/engine_experiment.py \\
        --out out/engine-experiment [--workload tau_bench] [--sessions 40] [--block 544] [--unit 16]
    PYTHONPATH=.:integrations/vllm .venv-engine/bin/python benchmarks/engine_experiment.py \
        --out out/engine-experiment --recheck
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from boundary.cache.accounting import CacheGeometry, geometry_for_unit, minimum_block_size
from boundary.checkpoints.retention import Variant
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.harness import ExperimentConfig, GivenGeometry, run_experiment
from boundary.experiment.presets import PRESETS
from boundary.experiment.replay import BudgetMode
from boundary.experiment.stream import Stream
from boundary.experiment.workloads import WorkloadOptions, build_stream
from boundary.experiment.workloads.mt_bench import sharegpt_like
from boundary.experiment.workloads.script import SessionScript, client_history, with_reasoning

TARGETS = {544: "Qwen3-Next-80B-A3B", 1056: "Qwen3.5-35B-A3B"}
WORKLOADS = ("tau_bench", "bfcl", "sharegpt_like")
FAMILY = "qwen3_5"


def sharegpt_trace(path: Path, sessions: int, seed: int = 0) -> Path:
    """A ShareGPT-like trace (chat requests with ``output.message``), reasoning dropped by the client."""
    lines = []
    for shaped in sharegpt_like(sessions, seed):
        script = with_reasoning(SessionScript(shaped.name, shaped.messages), seed, (40, 240))
        for i, m in enumerate(script.messages):
            if m["role"] == "assistant":
                history = client_history(script.messages[:i], "dropped")  # type: ignore[arg-type]
                lines.append({"session": shaped.name, "messages": history, "output": {"message": m}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def stream_for(workload: str, sessions: int, out: Path) -> Stream:
    source = (
        str(sharegpt_trace(out / "sharegpt-like.jsonl", sessions))
        if workload == "sharegpt_like"
        else workload
    )
    options = WorkloadOptions(family=FAMILY, sessions=sessions)
    return build_stream(source, options, PrefillCostModel(PRESETS[TARGETS[1056]]))


def target(block: int) -> CacheGeometry:
    model = PRESETS[TARGETS[block]]
    return geometry_for_unit(model, minimum_block_size(model))


def model_runs(
    stream: Stream, block: int, units: tuple[int, ...], capacity: float, policies: tuple[str, ...]
) -> dict[tuple[int, str], Any]:
    """The model executor at equal capacity: (unit, policy) -> its run's metrics."""
    config = ExperimentConfig(
        policies=policies,
        budgets=(BudgetMode.EQUAL_CAPACITY,),
        units=units,
        capacity_gib=capacity,
        disaggregation=False,
    )
    given = GivenGeometry(target(block), f"{TARGETS[block]} at block {block}")
    result = run_experiment(stream, PRESETS[TARGETS[block]], config, geometry=given)
    return {(u.unit, r["policy"]): r for u in result.units for r in u.runs}


def rows_for(
    workload: str, stream: Stream, block: int, units: tuple[int, ...], args: argparse.Namespace
) -> list[dict[str, Any]]:
    from boundary_vllm.engine_experiment import EngineExperimentConfig, run_engine_experiment

    t0 = time.perf_counter()
    policies = tuple(args.policies.split(","))
    model = model_runs(stream, block, units, args.capacity_gib, policies)
    config = EngineExperimentConfig(
        policies=policies,
        units=units,
        capacity_gib=args.capacity_gib,
        concurrency=args.concurrency,
        record_dir=args.out / "runs" / workload,
    )
    engine = run_engine_experiment(stream, target(block), config, progress=lambda m: print(m, flush=True))
    rows = []
    for unit in engine["units"]:
        for r in unit["runs"]:
            m = model[(unit["unit"], r["policy"])]["hit_rate"]
            rows.append(
                {
                    "workload": workload,
                    "requests": len(stream),
                    "block": block,
                    "unit": unit["unit"],
                    "pages": unit["pages"],
                    "policy": r["policy"],
                    "model_executor_reused": m["reused_tokens"],
                    "engine_reused": r["reused_tokens"],
                    "model_in_engine_order": r["model_reused_tokens"],
                    "prompt_tokens": r["prompt_tokens"],
                    "model_agreement": r["model_agreement"],
                    "oracle_tokens": r["oracle_tokens"],
                    "evictions": r["evictions"],
                    "served_by": r["served_by"],
                    "hit_tokens_by_kind": r["hit_tokens_by_kind"],
                    "first_disagreements": r["first_disagreements"],
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def pct(a: int | None, b: int) -> str:
        return "n/a" if a is None or not b else f"{a / b:.1%}"

    out = [
        "| workload | requests | block | unit | pages | policy | model executor | engine "
        "| model, engine order | agreement | evictions |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        agreement = "n/a" if r["model_agreement"] is None else f"{r['model_agreement']:.2%}"
        prompt = r["prompt_tokens"]
        head = (
            f"| {r['workload']} | {r['requests']} | {r['block']} | {r['unit']} | {r['pages']} | {r['policy']}"
        )
        out.append(
            f"{head} | {pct(r['model_executor_reused'], prompt)} | {pct(r['engine_reused'], prompt)} "
            f"| {pct(r['model_in_engine_order'], prompt)} | {agreement} | {r['evictions']:,} |"
        )
    return "\n".join(out)


def recheck_saved(out: Path) -> int:
    """The cache model as it is now against every engine run saved under ``out``/runs: one line
    per run, its first disagreements beside it; 1 when any request differs."""
    from boundary_vllm.engine_observations import load_run, recheck

    paths = sorted((out / "runs").glob("*/*.json.gz"))
    if not paths:
        print(f"no saved runs under {out / 'runs'}", file=sys.stderr)
        return 2
    differ = 0
    for path in paths:
        result = recheck(load_run(path))
        differ += len(result.disagreements)
        first = result.disagreements[:3]
        shown = ", ".join(f"session {si} request {ri}: engine {e:,} model {m:,}" for si, ri, e, m in first)
        name = f"{path.parent.name}/{path.name}"
        print(f"{name}: {result.agreeing}/{result.requests} agree {shown}", flush=True)
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workload", action="append", choices=WORKLOADS)
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--block", type=int, action="append", choices=sorted(TARGETS))
    p.add_argument("--unit", type=int, action="append")
    p.add_argument("--capacity-gib", type=float, default=8.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--policies", default=",".join(v.value for v in Variant))
    p.add_argument("--recheck", action="store_true", help="check the model now against --out's saved runs")
    args = p.parse_args(argv)
    if args.recheck:
        return recheck_saved(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    units = tuple(args.unit or (16, 32))
    rows: list[dict[str, Any]] = []
    for workload in args.workload or WORKLOADS:
        stream = stream_for(workload, args.sessions, args.out)
        print(f"{workload}: {len(stream)} requests in {len(stream.sessions())} sessions", flush=True)
        for block in args.block or sorted(TARGETS):
            here = rows_for(workload, stream, block, units, args)
            rows += here
            with (args.out / "rows.jsonl").open("a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in here)
            (args.out / "agreement.md").write_text(table(rows) + "\n", encoding="utf-8")
            print(table(here), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
