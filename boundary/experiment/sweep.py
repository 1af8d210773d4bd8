"""The load sweep: concurrency × capacity, every policy, one unit, equal total capacity.

Where it sits: in the experiment, after checkpoints: runs the serving model (``serving``) and
summarises it (``load``) per concurrency and capacity; ``harness`` calls it.

For each concurrency, ``concurrency`` closed-loop users run the stream's sessions through
the serving model (``boundary.experiment.serving``: a router, replicas with continuous
batching and chunked prefill, one prefix cache per replica of ``capacity`` each), once per
policy; ``boundary.experiment.load`` summarizes each run (TTFT p50 / p95 / p99, throughput,
offered load against capacity, saturated or not). A point also carries the reuse (over the
oracle replayed on the uncontended schedule of ``arrivals.interleave``), the cache residency
and, for ``both``, the second checkpoint's verdict over ``input_end``
(``plan.second_checkpoint_verdict``): where its eviction cost overtakes its reuse.

A workload has a fixed number of sessions; to reach a concurrency near or above it, the sweep
adds *tenants*: ``ceil(2 * concurrency / sessions)`` copies of every session, each copy's first
token replaced by a tenant sentinel id, so a tenant's sessions share prefixes (its system
prompt and tools) with each other and with nothing of another tenant — as separate
deployments with their own system prompts on one engine would.

On a trace with recorded arrivals (``provenance["arrivals"]["source"] == "recorded"``) the
uncontended schedule is the recorded one (``arrivals.recorded``) and the users keep each
session's recorded client delays (``LoadModel.recorded_delays``): the users and tenants still
set the load, the trace sets the gaps within a session.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from boundary.cache.accounting import CacheGeometry
from boundary.cache.hybrid import CacheConfig
from boundary.cache.request import CacheRequest
from boundary.cache.retention import engine_geometry
from boundary.checkpoints.retention import DecodeStates, EngineGeometry
from boundary.experiment.arrivals import interleave, recorded
from boundary.experiment.calibration import step_constants
from boundary.experiment.cost import PrefillCostModel, StepCostModel
from boundary.experiment.load import summary
from boundary.experiment.plan import second_checkpoint_verdict
from boundary.experiment.policies import policy
from boundary.experiment.replay import event_order, replay_oracle
from boundary.experiment.scheduler import SchedulerConfig
from boundary.experiment.serving import LoadModel, Routing, ServingRun, serve
from boundary.experiment.stream import Stream, StreamRequest, cache_requests

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
    ``max_chunk_tokens`` (the scheduler's token budget), ``max_num_seqs``, ``output_at_unit``,
    ``load_replicas`` and ``load_routing`` as in ``ExperimentConfig``; ``capacity_gib`` is
    each replica's cache."""
    base = list(stream.sessions().values())
    seed = int(stream.provenance.get("seed") or 0)
    states = DecodeStates.UNIT if options["output_at_unit"] else DecodeStates.BLOCK
    steps = StepCostModel(cost, step_constants(cost.model.name))
    scheduler = SchedulerConfig(
        max_num_batched_tokens=options["max_chunk_tokens"], max_num_seqs=options["max_num_seqs"]
    )
    points: list[dict[str, Any]] = []
    on_record = (stream.provenance.get("arrivals") or {}).get("source") == "recorded"
    for c in concurrency:
        sessions = tenants(base, math.ceil(2 * c / max(len(base), 1)))
        timed, requests, oracle = _timed(stream, sessions, geometry.unit, cost, c, seed, on_record)
        outputs = [r.output_tokens for r in timed.requests]
        model = LoadModel(
            int(c),
            options["load_replicas"],
            Routing(options["load_routing"]),
            scheduler,
            seed=seed,
            recorded_delays=on_record,
        )
        for cap in capacity_gib:
            say(f"  load: concurrency {c:g}, {cap:g} GiB")
            config = CacheConfig(
                geometry,
                cap * GIB,
                engine_steps=options["eviction"] == "engine_steps" and not options["output_at_unit"],
                junction_at_unit=options["junction_at_unit"],
                max_chunk_tokens=options["max_chunk_tokens"],
            )
            serving = _Serving(
                timed.requests, requests, config, engine_geometry(geometry, states), steps, model, oracle
            )
            points += _policy_points(serving, names, c, cap, outputs)
    return points


@dataclass(frozen=True)
class _Serving:
    """What every policy at one (concurrency, capacity) point is served with."""

    timed: Sequence[StreamRequest]
    requests: Sequence[CacheRequest]
    config: CacheConfig
    engine: EngineGeometry
    steps: StepCostModel
    model: LoadModel
    oracle: Sequence[int]


def _policy_points(
    serving: _Serving, names: Sequence[str], c: float, cap: float, outputs: list[int]
) -> list[dict[str, Any]]:
    """One point per policy; ``both`` also gets the second-checkpoint verdict against
    ``input_end`` when that ran first."""
    s = serving
    points: list[dict[str, Any]] = []
    runs: dict[str, ServingRun] = {}
    for name in names:
        run = serve(s.timed, s.requests, policy(name), s.config, s.engine, s.steps, s.model, s.oracle)
        runs[name] = run
        points.append(_point(run, c, cap, sum(s.oracle), summary(run, outputs, s.steps)))
        if name == "both" and "input_end" in runs:
            points[-1]["second_checkpoint_verdict"] = second_checkpoint_verdict(run, runs["input_end"])
    return points


def _timed(
    stream: Stream,
    sessions: list[list[StreamRequest]],
    unit: int,
    cost: PrefillCostModel,
    concurrency: float,
    seed: int,
    on_record: bool = False,
) -> tuple[Stream, list[CacheRequest], list[int]]:
    """``sessions`` on the uncontended schedule (``rid`` == index; the recorded one when
    ``on_record``), as the cache sees them, and the oracle's reuse replayed on that schedule."""
    if on_record:
        schedule = recorded(sessions, cost).requests
    else:
        schedule = interleave(sessions, cost, concurrency=concurrency, seed=seed)
    timed = Stream(stream.name, stream.provenance, schedule)
    requests = cache_requests(timed, unit)
    return timed, requests, replay_oracle(requests, unit, event_order(requests))


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


def _point(
    run: ServingRun, concurrency: float, capacity_gib: float, oracle_tokens: int, load: dict[str, Any]
) -> dict[str, Any]:
    reused = sum(r.joint for r in run.records)
    evictions = [
        v for cache in run.caches for (victim, _), v in cache.stats.evictions.items() if victim == "state"
    ]
    elapsed = max(run.elapsed, 1e-9)
    state_bytes = sum(cache.stats.state_byte_seconds for cache in run.caches) / elapsed
    block_bytes = sum(cache.stats.block_byte_seconds for cache in run.caches) / elapsed
    capacity = capacity_gib * GIB * run.model.replicas
    return {
        "concurrency": concurrency,
        "capacity_gib": capacity_gib,
        "replicas": run.model.replicas,
        "routing": run.model.routing.value,
        "policy": run.policy,
        "requests": len(run.records),
        "sessions": len({r.session for r in run.records}),
        "reused_tokens": reused,
        "reused_over_oracle": reused / oracle_tokens if oracle_tokens else None,
        "hit_rate": sum(r.joint > 0 for r in run.records) / len(run.records) if run.records else None,
        "load": load,
        "residency": {"state_fraction": state_bytes / capacity, "block_fraction": block_bytes / capacity},
        "state_evictions": sum(evictions),
        "overcommits": sum(
            c.working.overcommits + (c.checkpoints.overcommits if c.checkpoints is not c.working else 0)
            for c in run.caches
        ),
    }
