"""The load sweep: concurrency × capacity, every policy, one unit, equal total capacity.

Where it sits: in the experiment, after checkpoints: replays and the prefill queue (``load``)
per concurrency and capacity; ``harness`` calls it.

For each concurrency the stream's sessions are interleaved again (``arrivals.interleave``:
a Poisson session start rate giving that many active sessions); for each
capacity every policy replays the result, and its records go through the prefill queue
(``boundary.experiment.load``). A point carries the reuse, the queued TTFT, request and
input-token throughput, the cache residency and, for ``both``, the second checkpoint's
verdict over ``input_end`` (``plan.second_checkpoint_verdict``): where its eviction cost
overtakes its reuse.

A workload has a fixed number of sessions; to reach a concurrency near or above it, the sweep
adds *tenants*: ``ceil(2 * concurrency / sessions)`` copies of every session, each copy's first
token replaced by a tenant sentinel id, so a tenant's sessions share prefixes (its system
prompt and tools) with each other and with nothing of another tenant — as separate
deployments with their own system prompts on one engine would.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from boundary.cache.accounting import CacheGeometry
from boundary.cache.hybrid import CacheConfig
from boundary.cache.retention import engine_geometry
from boundary.experiment.arrivals import interleave
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.load import prefill_queue
from boundary.experiment.plan import second_checkpoint_verdict
from boundary.experiment.policies import policy
from boundary.experiment.replay import BudgetMode, Run, event_order, replay, replay_oracle
from boundary.experiment.stream import Stream, StreamRequest, cache_requests
from boundary.retention_policy import DecodeStates

GIB = 2**30


def load_sweep(
    stream: Stream,
    geometry: CacheGeometry,
    cost: PrefillCostModel,
    names: Sequence[str],
    *,
    concurrency: Sequence[float],
    capacity_gib: Sequence[float],
    options: dict[str, Any],
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """One point per (concurrency, capacity, policy). ``options``: ``junction_at_unit``,
    ``max_chunk_tokens``, ``output_at_unit`` as in ``ExperimentConfig``."""
    base = list(stream.sessions().values())
    seed = int(stream.provenance.get("seed") or 0)
    states = DecodeStates.UNIT if options["output_at_unit"] else DecodeStates.BLOCK
    points: list[dict[str, Any]] = []
    for c in concurrency:
        sessions = tenants(base, math.ceil(2 * c / max(len(base), 1)))
        timed = Stream(stream.name, stream.provenance, interleave(sessions, cost, concurrency=c, seed=seed))
        requests = cache_requests(timed, geometry.unit)
        events = event_order(requests)
        oracle = replay_oracle(requests, geometry.unit, events)
        for cap in capacity_gib:
            say(f"  load: concurrency {c:g}, {cap:g} GiB")
            config = CacheConfig(
                geometry,
                cap * GIB,
                junction_at_unit=options["junction_at_unit"],
                max_chunk_tokens=options["max_chunk_tokens"],
            )
            runs: dict[str, Run] = {}
            for name in names:
                runs[name] = replay(
                    timed,
                    requests,
                    policy(name),
                    config,
                    cost,
                    oracle,
                    budget=BudgetMode.EQUAL_CAPACITY,
                    events=events,
                    geometry=engine_geometry(geometry, states),
                )
                points.append(_point(runs[name], c, cap, sum(oracle)))
            if "both" in runs and "input_end" in runs:
                verdict = second_checkpoint_verdict(runs["both"], runs["input_end"])
                next(p for p in reversed(points) if p["policy"] == "both")["second_checkpoint_verdict"] = (
                    verdict
                )
    return points


TENANT_SENTINEL = 2**31


def tenants(sessions: Sequence[Sequence[StreamRequest]], count: int) -> list[list[StreamRequest]]:
    """``count`` tenants of ``sessions`` (tenant 0 is the workload as it is)."""
    out = [list(s) for s in sessions]
    for k in range(1, count):
        for session in sessions:
            copy = []
            for r in session:
                tokens = array("I", r.tokens)
                tokens[0] = TENANT_SENTINEL + k
                copy.append(replace(r, session=f"{r.session}#tenant{k}", tokens=tokens))
            out.append(copy)
    return out


def _point(run: Run, concurrency: float, capacity_gib: float, oracle_tokens: int) -> dict[str, Any]:
    reused = sum(r.joint for r in run.records)
    evicted_states = sum(v for (victim, _), v in run.stats.evictions.items() if victim == "state")
    return {
        "concurrency": concurrency,
        "capacity_gib": capacity_gib,
        "policy": run.policy,
        "requests": len(run.records),
        "sessions": len({r.session for r in run.records}),
        "reused_tokens": reused,
        "reused_over_oracle": reused / oracle_tokens if oracle_tokens else None,
        "hit_rate": sum(r.joint > 0 for r in run.records) / len(run.records) if run.records else None,
        "load": prefill_queue(run.records).summary(),
        "residency": {
            "state_fraction": run.mean_state_bytes / run.capacity_bytes,
            "block_fraction": run.mean_block_bytes / run.capacity_bytes,
        },
        "state_evictions": evicted_states,
        "overcommits": run.overcommits,
    }
