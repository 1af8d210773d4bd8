"""What the vLLM plugin gains at each ``prefix_match_unit``, measured with vLLM 0.33.0's own
scheduler and KV-cache manager (CPU, no model): reused prompt tokens per policy against
upstream (vLLM without the plugin), at align-mode blocks of 528 and 1088 with units of the
block (vLLM's default), 64 (it must divide the block: 1088 only) and 16.

Where it sits: outside the package, at the engine end: a script nobody imports; it replays
``boundary_vllm.workload`` streams through ``boundary_vllm.replay`` per unit and policy.

The stream: tau-bench airline conversations rendered with Qwen3.5 (thinking on, the
deterministic reasoning of ``boundary_vllm.workload.with_reasoning``), every assistant turn a
request, four sessions in flight, async scheduling as the engine runs it, a pool large enough
that nothing is evicted. The hints are what ``chat_request`` sends (U_end; the round-trip
verdict and horizon as ``tests/vllm/test_vllm_fidelity.py`` derives them).

Usage (from the repository root):
    PYTHONPATH=.:integrations/vllm python benchmarks/vllm_units.py [--geometries 528:528,528:16,...]
"""

from __future__ import annotations

import argparse
import time

from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from boundary_vllm.workload import Turn, conversation_turns, with_reasoning

import boundary
from boundary.checkpoints.retention import Variant
from boundary.prefixes import common_prefix_length
from boundary.shipped.datasets import tau_bench_airline


def session(turns: list[Turn]) -> list[ReplayRequest]:
    out = []
    for k, t in enumerate(turns):
        later = turns[k + 1] if k + 1 < len(turns) else None
        horizon = common_prefix_length(t.tokens, later.prompt.token_ids) if later else t.prompt.u_end
        base = ReplayRequest.from_turn(t)
        out.append(
            ReplayRequest(
                base.prompt_token_ids,
                base.output_token_ids,
                base.input_end,
                base.stop_token_ids,
                round_trip=1.0 if t.next_role == "tool" else 0.0,
                horizon=horizon,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--messages", type=int, default=14)
    parser.add_argument(
        "--geometries", default="528:528,528:16,1088:1088,1088:64,1088:16", help="block:unit,..."
    )
    args = parser.parse_args()
    family = boundary.load_family("qwen3_5")
    sessions = [
        session(
            conversation_turns(
                family, with_reasoning(tau_bench_airline()[c][: args.messages]), enable_thinking=True
            )
        )
        for c in range(args.conversations)
    ]
    requests = sum(len(s) for s in sessions)
    prompt_tokens = sum(len(r.prompt_token_ids) for s in sessions for r in s)
    print(f"{len(sessions)} sessions, {requests} requests, {prompt_tokens:,} prompt tokens")
    header = "| block | unit | upstream | " + " | ".join(p.value for p in Variant) + " |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    started = time.perf_counter()
    for block, unit in (map(int, g.split(":")) for g in args.geometries.split(",")):
        cells = []
        for plugin, policy in [(False, Variant.MAIN_SPARSE), *((True, p) for p in Variant)]:
            shape = EngineShape(
                block_size=block, prefix_match_unit=unit, policy=policy, plugin=plugin, async_scheduling=True
            )
            outcomes = Replay(shape).run_sessions(sessions, concurrency=4)
            reused = sum(o.hit_tokens for s in outcomes for o in s)
            cells.append(f"{reused:,} ({100 * reused / prompt_tokens:.1f}%)")
        print(f"| {block} | {unit} | " + " | ".join(cells) + " |")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
