"""Per-request cost with sessions: transformers vs boundary cold vs boundary sessions.

Where it sits: outside the package, at the render and boundaries stages: a script nobody imports;
it times ``SessionCache.render`` against ``Family.render`` and transformers.

The tau-bench airline replay: every assistant turn of every trajectory is one request (the
conversation before it, generation prompt on), sent in conversation order. For each request,
side by side and interleaved (so machine load hits all paths alike):

- transformers ``apply_chat_template(tokenize=True)`` (text + ids);
- boundary cold: ``fam.render`` (validation, text, ids, U_end);
- boundary sessions: ``SessionCache.render(session_id, ...)``, same result, reusing the
  previous request's ids up to the last provable cut (results are checked equal to cold).

Reported per request and by conversation length (messages in the request).

Usage: python benchmarks/sessions.py [--family qwen3_5] [--trajectories 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import boundary
from boundary.datasets import tau_bench_airline

BUCKETS = [(1, 4), (5, 9), (10, 19), (20, 39), (40, 10**9)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_5")
    ap.add_argument("--variant")
    ap.add_argument("--trajectories", type=int, default=200)
    ap.add_argument("--template-kwargs", default="{}")
    args = ap.parse_args()
    import json

    kwargs = json.loads(args.template_kwargs)
    fam = boundary.load_family(args.family, variant=args.variant)
    hf = fam.tokenizer.to_transformers(fam.template(args.variant))
    cache = fam.sessions(capacity=64)
    rows: list[tuple[int, float, float, float, int]] = []  # (messages, transformers, cold, session, encoded)
    for t, traj in enumerate(tau_bench_airline()[: args.trajectories]):
        for i, m in enumerate(traj):
            if m["role"] != "assistant":
                continue
            request = traj[:i]
            prepared, _ = fam.prepare(request)
            t0 = time.perf_counter()
            hf.apply_chat_template(prepared, add_generation_prompt=True, tokenize=True, **kwargs)
            t1 = time.perf_counter()
            cold = fam.render(request, **kwargs)
            t2 = time.perf_counter()
            encoded_before = cache.get(f"traj-{t}").stats.encoded_tokens
            t3 = time.perf_counter()
            warm = cache.render(f"traj-{t}", request, **kwargs)
            t4 = time.perf_counter()
            encoded = cache.get(f"traj-{t}").stats.encoded_tokens - encoded_before
            if warm.token_ids != cold.token_ids or warm.u_end != cold.u_end:
                raise SystemExit(f"session result differs from a cold render at trajectory {t}, message {i}")
            rows.append((len(request), t1 - t0, t2 - t1, t4 - t3, encoded))
        cache.drop(f"traj-{t}")

    def ms(xs: list[float]) -> str:
        return f"{statistics.mean(xs) * 1e3:.2f}"

    print(
        f"{len(rows)} requests from {args.trajectories} tau-bench trajectories, family {fam.name} "
        f"({args.variant or fam.default_variant}), kwargs {kwargs or '{}'}; mean ms/request; "
        "speed-up = transformers / path"
    )
    print(
        "| messages in request | requests | transformers | boundary cold | boundary sessions | "
        "cold speed-up | sessions speed-up | tokens encoded per session request |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for lo, hi in [*BUCKETS, (1, 10**9)]:
        sel = [r for r in rows if lo <= r[0] <= hi]
        if not sel:
            continue
        label = "all" if (lo, hi) == (1, 10**9) else (f"{lo}–{hi}" if hi < 10**9 else f"{lo}+")
        t, c, s = ([r[k] for r in sel] for k in (1, 2, 3))
        encoded = statistics.mean(r[4] for r in sel)
        print(
            f"| {label} | {len(sel)} | {ms(t)} | {ms(c)} | {ms(s)} | {sum(t) / sum(c):.1f}× | "
            f"{sum(t) / sum(s):.1f}× | {encoded:.0f} |"
        )
    mid = [r[3] for r in rows if 5 <= r[0] <= 9]
    late = [r[3] for r in rows if 30 <= r[0] <= 40]
    if mid and late:
        print(
            f"\nsessions, 30–40 messages vs 5–9 messages: {statistics.mean(late) / statistics.mean(mid):.2f}×"
        )


if __name__ == "__main__":
    main()
