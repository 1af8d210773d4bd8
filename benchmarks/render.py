"""Per-request render cost: boundary vs transformers' apply_chat_template, side by side.

Where it sits: outside the package, at the render and boundaries stages: a script nobody imports;
it times ``Family.render`` against transformers.

Every assistant turn of the tau-bench airline trajectories becomes one request (the
conversation before it, with the generation prompt). For each request, in the same run:

- reference: ``tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)``
  (text + token ids);
- boundary: ``fam.render(messages)`` (validation, text, token ids and U_end from one pass),
  ``fam.render_prepared`` (the same minus request validation), and ``fam.render`` with the
  vocabulary's ``tokenizers`` backend only (no tiktoken segment encoder), the path every
  user-supplied tokenizer takes.

Usage: python benchmarks/render.py [--family qwen3_5] [--trajectories 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import boundary
from boundary.shipped.datasets import tau_bench_airline
from boundary.tokenize.segment_cache import SegmentCache
from boundary.tokenize.segments import SegmentEncoder


def requests(n_trajectories: int) -> list[list[dict]]:
    out = []
    for traj in tau_bench_airline()[:n_trajectories]:
        for i, m in enumerate(traj):
            if m["role"] == "assistant":
                out.append(traj[:i])
    return out


def timed(fns: dict, items: list, repeat: int, segments: SegmentEncoder | None) -> dict[str, list[float]]:
    """Best-of-``repeat`` wall time per item and path, in seconds. The paths are interleaved
    request by request, so load on the machine affects them alike. Each path has its own
    segment cache (``boundary.tokenize.segment_cache``, of ``segments``), empty at each pass: a segment
    is served only by what the same path encoded for another request of the same pass."""
    best = {name: [float("inf")] * len(items) for name in fns}
    for _ in range(repeat):
        caches = {name: SegmentCache() for name in fns}
        for i, item in enumerate(items):
            for name, fn in fns.items():
                if segments is not None:
                    segments.cache = caches[name]
                t0 = time.perf_counter()
                fn(item)
                best[name][i] = min(best[name][i], time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_5")
    ap.add_argument("--variant")
    ap.add_argument("--trajectories", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    fam = boundary.load_family(args.family, variant=args.variant)
    plain = boundary.Tokenizer(fam.tokenizer.backend, special_tokens=fam.tokenizer.special_tokens_map)
    fam_plain = boundary.Family(fam.spec, fam.templates, plain, default_variant=fam.default_variant)
    reqs = requests(args.trajectories)
    prepared = [fam.prepare(m) for m in reqs]
    hf = fam.tokenizer.to_transformers(fam.template(args.variant))
    for msgs, tools in prepared[:20]:  # warm caches (compiled templates) on both sides
        hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=True)
        fam.render_prepared(msgs, tools)
    times = timed(
        {
            "ref": lambda k: hf.apply_chat_template(
                prepared[k][0], tools=prepared[k][1], add_generation_prompt=True, tokenize=True
            ),
            "ours": lambda k: fam.render(reqs[k]),
            "prepared": lambda k: fam.render_prepared(prepared[k][0], prepared[k][1]),
            "plain": lambda k: fam_plain.render(reqs[k]),
        },
        list(range(len(reqs))),
        args.repeat,
        fam.tokenizer.segments,
    )
    ref, ours, ours_prepared, ours_plain = times["ref"], times["ours"], times["prepared"], times["plain"]
    tokens = sum(len(fam.render_prepared(p[0], p[1]).token_ids) for p in prepared)

    def row(name: str, xs: list[float]) -> str:
        return (
            f"| {name} | {statistics.mean(xs) * 1e3:.3f} | {statistics.median(xs) * 1e3:.3f} | "
            f"{sum(xs) / sum(ref):.2f} |"
        )

    print(
        f"{len(reqs)} requests from {args.trajectories} tau-bench trajectories, family {fam.name} "
        f"({args.variant or fam.default_variant}), {tokens / len(reqs):.0f} tokens/request on average, "
        f"best of {args.repeat}"
    )
    print("| path | mean ms/request | median ms/request | ratio vs transformers |")
    print("|---|---:|---:|---:|")
    print(row("transformers apply_chat_template(tokenize=True)", ref))
    print(row("boundary fam.render (validate + render + ids + U_end)", ours))
    print(row("boundary fam.render_prepared (render + ids + U_end)", ours_prepared))
    print(row("boundary fam.render, tokenizers backend only", ours_plain))


if __name__ == "__main__":
    main()
