"""What recording production traces costs the scheduler thread: the time ``_record`` takes per
finished request inside vLLM 0.33.0's own async scheduler (CPU, no model), with the recorder's
writer thread running in the same process, so the GIL contention of a running engine is in it
(an engine adds its own threads; this replay has only the two).

Where it sits: outside the package, at the engine end: a script nobody imports; it times
``boundary_vllm.recording`` inside ``boundary_vllm.replay``'s scheduler.

The stream: tau-bench airline conversations rendered with Qwen3.5 (thinking on), every
assistant turn a request, four sessions in flight, block 528 / unit 16, policy ``both``.

Usage (from the repository root):
    PYTHONPATH=.:integrations/vllm python benchmarks/vllm_recorder.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from boundary_vllm.workload import conversation_turns, with_reasoning

import boundary
from boundary.checkpoints.retention import Variant
from boundary.shipped.datasets import tau_bench_airline


def sessions(conversations: int, messages: int) -> list[list[ReplayRequest]]:
    family = boundary.load_family("qwen3_5")
    out = []
    for c in range(conversations):
        conv = with_reasoning(tau_bench_airline()[c][:messages])
        turns = conversation_turns(family, conv, enable_thinking=True)
        out.append([dataclasses.replace(ReplayRequest.from_turn(t), session=f"tau-{c}") for t in turns])
    return out


def one_round(stream: list[list[ReplayRequest]], directory: Path) -> list[int]:
    """Nanoseconds ``_record`` took for each finished request of one replay."""
    shape = EngineShape(
        block_size=528,
        prefix_match_unit=16,
        policy=Variant.BOTH,
        async_scheduling=True,
        settings={"record_path": str(directory / "recorded.jsonl")},
    )
    run = Replay(shape)
    scheduler = run.scheduler
    record = scheduler._record
    costs: list[int] = []

    def timed(request: object) -> None:
        started = time.perf_counter_ns()
        record(request)
        costs.append(time.perf_counter_ns() - started)

    scheduler._record = timed
    run.run_sessions(stream, concurrency=4)
    scheduler.shutdown()
    written = scheduler.boundary_recorder.stats.written
    assert written == sum(len(s) for s in stream), scheduler.boundary_recorder.stats
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--messages", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    stream = sessions(args.conversations, args.messages)
    costs: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            directory = Path(tmp) / str(k)
            directory.mkdir()
            costs += one_round(stream, directory)
    us = sorted(c / 1000 for c in costs)
    print(
        f"{len(us)} finished requests ({args.rounds} rounds): _record on the scheduler thread "
        f"median {statistics.median(us):.1f} µs, p90 {us[int(0.9 * len(us))]:.1f} µs, max {us[-1]:.1f} µs"
    )


if __name__ == "__main__":
    main()
