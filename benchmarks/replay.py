"""Replay cost against stream length: 1k / 10k / 100k requests, side by side in one run.

Where it sits: outside the package, at the report end: a script nobody imports; it times the
experiment's cache-model replay (``boundary.experiment``, ``boundary.cache``) after checkpoints.

Synthetic sessions (token-level, ``boundary.experiment.workloads.synthetic``) at a fixed mean
concurrency and cache capacity, so the cache reaches the same steady state at every length
and only the number of requests changes. For each length, on one core:

- hash: chained prefix ids for every request at the unit (``cache_requests``);
- replay: one policy through ``HybridPrefixCache`` (lookup, admission, retention, eviction,
  release) plus the per-request records;

reported as seconds and microseconds per request, with each length's per-request cost as a
ratio to the shortest stream's (linear cost: ratios near 1). The prepared stream is frozen
out of the garbage collector's view (``gc.freeze``) before replaying, so a long stream's
heap does not make every collection pass slower.

Usage: python benchmarks/replay.py [--lengths 1000,10000,100000] [--unit 16] [--policy main_sparse]
"""

from __future__ import annotations

import argparse
import gc
import time

from boundary.cache import CacheConfig, geometry_for_unit
from boundary.cache.retention import engine_geometry
from boundary.experiment.arrivals import interleave
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.policies import policy
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.replay import BudgetMode, event_order, replay, replay_oracle
from boundary.experiment.stream import Stream, cache_requests
from boundary.experiment.workloads import synthetic

GIB = 2**30


def stream_of(length: int, seed: int, concurrency: float) -> Stream:
    sessions, total = [], 0
    for session in synthetic.sessions(10**9, seed=seed):
        sessions.append(session[: length - total])
        total += len(sessions[-1])
        if total >= length:
            break
    cost = PrefillCostModel(QWEN3_5_35B_A3B)
    return Stream("synthetic", {"seed": seed}, interleave(sessions, cost, concurrency=concurrency, seed=seed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1000,10000,100000")
    ap.add_argument("--unit", type=int, default=16)
    ap.add_argument("--policies", default="main_sparse,both")
    ap.add_argument("--capacity-gib", type=float, default=32.0)
    ap.add_argument("--concurrency", type=float, default=32.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    geometry = geometry_for_unit(QWEN3_5_35B_A3B, args.unit)
    cost = PrefillCostModel(QWEN3_5_35B_A3B)
    print(
        f"Qwen3.5-35B-A3B, unit {geometry.unit}, block {geometry.block_size}, "
        f"capacity {args.capacity_gib} GiB, concurrency {args.concurrency}; one core"
    )
    header = (
        f"{'requests':>9} {'tokens/req':>10} {'policy':>12} {'hash s':>8} {'replay s':>9} {'us/req':>8} "
        f"{'ratio':>6} {'evictions':>10}"
    )
    print(header)
    base: dict[str, float] = {}
    for length in (int(x) for x in args.lengths.split(",")):
        stream = stream_of(length, args.seed, args.concurrency)
        gc.collect()
        t0 = time.perf_counter()
        requests = cache_requests(stream, geometry.unit)
        hashing = time.perf_counter() - t0
        events = event_order(requests)
        oracle = replay_oracle(requests, geometry.unit, events)
        tokens = sum(len(r.tokens) for r in stream) / len(stream)
        gc.collect()
        gc.freeze()  # the stream is static: keep the collector from rescanning it during replays
        for name in args.policies.split(","):
            config = CacheConfig(geometry, args.capacity_gib * GIB)
            gc.collect()
            run = replay(
                stream,
                requests,
                policy(name),
                config,
                cost,
                oracle,
                budget=BudgetMode.EQUAL_CAPACITY,
                events=events,
                geometry=engine_geometry(geometry),
            )
            per = run.wall_seconds / len(stream) * 1e6
            base.setdefault(name, per)
            print(
                f"{len(stream):>9,} {tokens:>10,.0f} {name:>12} {hashing:>8.2f} {run.wall_seconds:>9.2f} "
                f"{per:>8.1f} {per / base[name]:>6.2f} {sum(run.stats.evictions.values()):>10,}"
            )
        del stream, requests, events, oracle
        gc.unfreeze()


if __name__ == "__main__":
    main()
