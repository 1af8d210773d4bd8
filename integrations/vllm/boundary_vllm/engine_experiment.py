"""``boundary experiment --executor engine``: the experiment's stream executed by a running vLLM
(its CPU build, in this process) with boundary's plugin, and the cache model checked against it.

Where it sits: the engine end, above ``engine_run``, ``tiny_models`` and ``prediction``: it takes
the stream ``boundary.experiment.workloads`` builds and the target's layout
(``boundary.cache.CacheGeometry``) and runs every policy through one engine per unit;
``boundary.cli.experiment`` imports it lazily, ``benchmarks/engine_experiment.py`` and the engine
tier call it; ``engine_report`` writes its Markdown.

The engine is shaped to the target: a tiny GDN model from which vLLM derives the target's block
(``tiny_models.shaped_kind``; the block is read back from the engine and a mismatch refused),
the target's ``prefix_match_unit``, and a pool of as many pages as the target GPU would have in
``capacity_gib`` (its pool page's bytes, ``CacheGeometry.pool_page_bytes``), forced with
``num_gpu_blocks_override`` (one more: vLLM's null block). Sessions run closed loop, at most as
many in flight as the pool holds at their longest (so nothing is preempted: the pool evicts
cached pages instead). Every hit is the engine's (``num_cached_tokens``), every kind the
plugin's; evictions are vLLM's block pool's, counted as it evicts.

Beside each request the cache model's prediction for the same event order
(``prediction.predicted_hits``, the page-by-page pool); ``model_agreement`` is the fraction of
requests where both are equal, and the first disagreements are kept for the report.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from boundary.cache import CacheGeometry, CacheRequest, OracleCache, PrefixHasher
from boundary.checkpoints.retention import Variant
from boundary.experiment.stream import Stream, StreamRequest
from boundary_vllm.engine_observations import SavedRun, save_run
from boundary_vllm.engine_run import EngineRequest, EngineRun, EngineShape
from boundary_vllm.prediction import ModelShape, Observed, observed, predicted_hits
from boundary_vllm.tiny_models import ATTENTION_TOKEN_BYTES, CPU_BLOCK_ALIGNMENT, model_dir, shaped_kind

GIB = 2**30
SSM_STATE_DTYPE = "bfloat16"  # the tiny models' states on every CPU host (``tiny_models``)
SHOWN_DISAGREEMENTS = 10
Progress = Callable[[str], None]


class EngineExperimentError(ValueError):
    """The engine cannot run this experiment as asked (pool, block or policy); the message says why."""


@dataclass(frozen=True, slots=True)
class EngineExperimentConfig:
    """What the engine runs: engine policies (``Variant`` values), units, the target GPU's cache
    memory, and how many sessions may be in flight (fewer when the pool holds fewer).
    ``record_dir``: each policy run is saved there for re-checking the model without the engine
    (``engine_observations``; ``b<block>-u<unit>-<policy>.json.gz``)."""

    policies: tuple[str, ...] = tuple(v.value for v in Variant)
    units: tuple[int, ...] = (16,)
    capacity_gib: float = 32.0
    concurrency: int = 4
    max_num_batched_tokens: int = 2048
    record_dir: Path | None = None


def engine_policies(names: Sequence[str]) -> tuple[Variant, ...]:
    """The policies an engine runs, in order; ``oracle`` is the model's bound and is left out;
    an experiment-only policy is refused (``EngineExperimentError``)."""
    known = {v.value: v for v in Variant}
    out = []
    for name in names:
        if name == "oracle":
            continue
        if name not in known:
            raise EngineExperimentError(
                f"--policies: {name!r} runs only in the model (the engine runs {', '.join(known)})"
            )
        out.append(known[name])
    return tuple(out)


def stream_sessions(stream: Stream) -> list[list[StreamRequest]]:
    """The stream's sessions in order of their first request."""
    return list(stream.sessions().values())


def engine_request(r: StreamRequest, policy: Variant) -> EngineRequest:
    """The stream request as a frontend sends it: its prompt, hints, and its committed output
    forced (so the next request's prompt is what the engine holds); the stop token is the
    output's last token when the stream's D_end stops before it. No logprobs: the experiment
    reads the cache, and the full-vocabulary logprobs cost a tenth of each engine step."""
    prompt = tuple(r.tokens[: r.num_prompt_tokens])
    output = tuple(r.tokens[r.num_prompt_tokens :])
    return EngineRequest(
        prompt,
        r.u_end,
        max_tokens=len(output),
        stop_token_ids=(output[-1],) if r.d_end < len(r.tokens) else (),
        policy=policy.value,
        round_trip=None if r.round_trip is None else float(r.round_trip),
        horizon=r.horizon,
        forced=output,
        logprobs=None,
    )


def pool_pages(geometry: CacheGeometry, capacity_gib: float) -> int:
    """The pages the target GPU's pool has in ``capacity_gib`` (one block id: a page in each
    shared tensor, ``pool_page_bytes``), as the cache model counts them."""
    return int(capacity_gib * GIB // geometry.pool_page_bytes)


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """The engine's pool for one unit: ``pages`` usable (vLLM adds its null block), the longest
    request's ``max_model_len``, and how many sessions run at once so that all fit."""

    pages: int
    max_model_len: int
    per_request: int
    concurrency: int

    @classmethod
    def of(
        cls,
        geometry: CacheGeometry,
        sessions: Sequence[Sequence[StreamRequest]],
        config: EngineExperimentConfig,
    ) -> PoolPlan:
        pages = pool_pages(geometry, config.capacity_gib)
        longest = max(len(r.tokens) for s in sessions for r in s) + 1
        max_len = math.ceil(longest / geometry.block_size) * geometry.block_size
        # align mode: a running request holds its running state and the one before it per group
        per_request = (
            geometry.attention_groups * (max_len // geometry.block_size) + 2 * geometry.recurrent_groups
        )
        if pages < per_request:
            raise EngineExperimentError(
                f"--capacity-gib {config.capacity_gib:g}: {pages} pages of "
                f"{geometry.pool_page_bytes:,} bytes; "
                f"the longest request ({longest:,} tokens) needs {per_request}"
            )
        return cls(pages, max_len, per_request, max(1, min(config.concurrency, pages // per_request)))


class EvictionCount:
    """Counts the cached pages vLLM's block pool evicts (its ``_maybe_evict_cached_block``,
    wrapped on the running engine's pool: the pool's own decision, observed)."""

    def __init__(self, run: EngineRun) -> None:
        pool = run.scheduler.kv_cache_manager.block_pool
        self.count = 0
        evict = pool._maybe_evict_cached_block

        def counted(block: Any) -> bool:
            evicted = bool(evict(block))
            self.count += evicted
            return evicted

        pool._maybe_evict_cached_block = counted


def start_engine(geometry: CacheGeometry, plan: PoolPlan, config: EngineExperimentConfig) -> EngineRun:
    """An engine at the target's block and unit with ``plan``'s pool (``EngineExperimentError``
    when vLLM derives another block)."""
    tiny_page = geometry.block_size * ATTENTION_TOKEN_BYTES
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil((plan.pages + 1) * tiny_page / GIB)))
    shape = EngineShape(
        prefix_match_unit=geometry.unit,
        num_blocks=plan.pages + 1,  # and vLLM's null block
        max_num_seqs=plan.concurrency,
        max_num_batched_tokens=max(config.max_num_batched_tokens, geometry.block_size),
        max_model_len=plan.max_model_len,
        ssm_state_dtype=SSM_STATE_DTYPE,
        block_size=CPU_BLOCK_ALIGNMENT,
    )
    run = EngineRun(model_dir(shaped_kind(geometry.block_size)), shape)
    layout = run.layout
    if layout.block_size != geometry.block_size or layout.num_blocks != plan.pages + 1:
        run.close()
        raise EngineExperimentError(
            f"the engine derived block {layout.block_size} with {layout.num_blocks} pages; the target has "
            f"block {geometry.block_size}, {plan.pages} pages and the null block"
        )
    return run


def oracle_hits(seen: Sequence[Sequence[Observed]], unit: int) -> list[list[int]]:
    """Each request's oracle hit in the engine's event order: the longest prefix, at ``unit``,
    of anything computed before it was admitted (the model's ``OracleCache``)."""
    oracle = OracleCache(unit)
    hasher = PrefixHasher(unit)
    events = sorted(
        [(o.admitted, 1, si, ri) for si, s in enumerate(seen) for ri, o in enumerate(s)]
        + [(o.finished, 0, si, ri) for si, s in enumerate(seen) for ri, o in enumerate(s)]
    )
    ids: dict[tuple[int, int], int] = {}
    hits: dict[tuple[int, int], int] = {}
    for _, admitted, si, ri in events:
        o = seen[si][ri]
        if admitted:
            rid = ids[(si, ri)] = len(ids)
            tokens = [*o.prompt_token_ids, *o.output_token_ids]
            request = CacheRequest.from_tokens(rid, tokens, len(o.prompt_token_ids), hasher)
            hits[(si, ri)] = oracle.admit(request, float(o.admitted))
        else:
            oracle.finish(ids[(si, ri)], o.finished + 0.5)
    return [[hits[(si, ri)] for ri in range(len(s))] for si, s in enumerate(seen)]


def model_shape(run: EngineRun, unit: int) -> ModelShape:
    """The cache model at the engine's own layout: its pool page by page (``engine_steps``)."""
    layout = run.layout
    return ModelShape(
        layout.block_size,
        unit,
        page_bytes=layout.page_bytes,
        attention_groups=layout.attention_groups,
        recurrent_groups=layout.recurrent_groups,
        capacity_bytes=(layout.num_blocks - 1) * layout.page_bytes,  # less vLLM's null block
        engine_steps=True,
        async_scheduling=run.shape.async_scheduling,
        recurrent_groups_first=layout.recurrent_groups_first,
    )


def run_policy(
    run: EngineRun,
    sessions: Sequence[Sequence[StreamRequest]],
    policy: Variant,
    plan: PoolPlan,
    evictions: EvictionCount,
    record_dir: Path | None = None,
) -> dict[str, Any]:
    """One policy through the engine from an empty cache: per request the engine's hit and kind,
    the model's prediction and the oracle, summed into one run (``run_summary``); saved under
    ``record_dir`` when given (``engine_observations``)."""
    requests = [[engine_request(r, policy) for r in s] for s in sessions]
    run.reset_prefix_cache()
    before_evictions = evictions.count
    before = run.scheduler.boundary_report().snapshot()
    outcomes = run.run_sessions(requests, concurrency=plan.concurrency)
    after = run.scheduler.boundary_report().snapshot()
    seen = observed(requests, outcomes)
    rows = []
    unit = run.shape.prefix_match_unit or run.block_size
    shape = model_shape(run, unit)
    predicted = None if seen is None else predicted_hits(seen, policy, shape)
    oracle = None if seen is None else oracle_hits(seen, unit)
    if seen is not None and record_dir is not None:
        hits = tuple(tuple(o.num_cached_tokens for o in outs) for outs in outcomes)
        what = (
            f"{_vllm_version()} engine, {policy.value}, block {run.block_size}, unit {unit}, "
            f"{plan.pages} pages, {plan.concurrency} sessions in flight"
        )
        saved = SavedRun(policy, shape, tuple(map(tuple, seen)), hits, what)
        save_run(record_dir / f"b{run.block_size}-u{unit}-{policy.value}.json.gz", saved)
    for si, (session, outs) in enumerate(zip(sessions, outcomes, strict=True)):
        for ri, (r, o) in enumerate(zip(session, outs, strict=True)):
            rows.append(
                RequestRow(
                    r.rid,
                    r.session,
                    r.turn,
                    r.num_prompt_tokens,
                    o.num_cached_tokens,
                    None if predicted is None else predicted[si][ri],
                    None if oracle is None else oracle[si][ri],
                    "n/a" if o.logged is None else o.logged.kind,
                )
            )
    counters = {
        "kept_states": dict(after.created - before.created),
        "kept_state_bytes": dict(after.created_bytes - before.created_bytes),
        "hits_by_kind": dict(after.hits - before.hits),
        "hit_tokens_by_kind": dict(after.hit_tokens - before.hit_tokens),
        "forced_splits": after.forced_splits - before.forced_splits,
    }
    return run_summary(policy, rows, counters, evictions.count - before_evictions, preempted=seen is None)


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One request of a run: the engine's hit and the kind it served, the model's prediction
    (None when the run cannot be predicted: a preemption) and the oracle."""

    rid: int
    session: str
    turn: int
    prompt_tokens: int
    engine_hit: int
    model_hit: int | None
    oracle_hit: int | None
    kind: str


def run_summary(
    policy: Variant, rows: Sequence[RequestRow], counters: dict[str, Any], evictions: int, *, preempted: bool
) -> dict[str, Any]:
    """One run as the JSON carries it: the engine's figures, the model's beside them, the
    agreement and the first disagreements (request order)."""
    prompt = sum(r.prompt_tokens for r in rows)
    reused = sum(r.engine_hit for r in rows)
    oracle = None if preempted else sum(r.oracle_hit or 0 for r in rows)
    differ = [r for r in rows if r.model_hit is not None and r.model_hit != r.engine_hit]
    agreement = None if preempted or not rows else 1 - len(differ) / len(rows)
    return {
        "policy": policy.value,
        "budget": "equal_capacity",
        "executor": "engine",
        "requests": len(rows),
        "prompt_tokens": prompt,
        "reused_tokens": reused,
        "reused_over_prompt": reused / prompt if prompt else None,
        "oracle_tokens": oracle,
        "reused_over_oracle": reused / oracle if oracle else None,
        "model_reused_tokens": None if preempted else sum(r.model_hit or 0 for r in rows),
        "model_agreement": agreement,
        "disagreements": len(differ),
        "first_disagreements": [
            {
                "request": r.rid,
                "session": r.session,
                "turn": r.turn,
                "engine_hit": r.engine_hit,
                "model_hit": r.model_hit,
                "engine_kind": r.kind,
            }
            for r in differ[:SHOWN_DISAGREEMENTS]
        ],
        "served_by": dict(Counter(r.kind for r in rows)),
        "evictions": evictions,
        **counters,
        "preempted": preempted,
    }


def run_line(run: dict[str, Any]) -> str:
    """One run's figures in a line: reuse over the prompt, the model's agreement, evictions."""
    prompt = run["prompt_tokens"] or 1
    agreement = "n/a" if run["model_agreement"] is None else f"{run['model_agreement']:.2%}"
    return (
        f"reused {run['reused_tokens']:,} of {run['prompt_tokens']:,} prompt tokens "
        f"({run['reused_tokens'] / prompt:.1%}), model {run['model_reused_tokens'] or 0:,}, "
        f"agreement {agreement} ({run['disagreements']} differ), {run['evictions']:,} evictions"
    )


def run_unit(
    stream: Stream, geometry: CacheGeometry, config: EngineExperimentConfig, say: Progress
) -> dict[str, Any]:
    """Every policy through one engine at ``geometry`` (its unit), the cache reset between them."""
    sessions = stream_sessions(stream)
    plan = PoolPlan.of(geometry, sessions, config)
    say(f"unit {geometry.unit} (block {geometry.block_size}): starting the engine, {plan.pages} pages")
    run = start_engine(geometry, plan, config)
    try:
        evictions = EvictionCount(run)
        runs = []
        for policy in engine_policies(config.policies):
            say(f"  {policy.value}: {len(stream)} requests on the engine")
            began = time.perf_counter()
            ran = run_policy(run, sessions, policy, plan, evictions, config.record_dir)
            runs.append({**ran, "unit": geometry.unit})
            say(f"  {policy.value}: {run_line(runs[-1])} in {time.perf_counter() - began:.0f} s")
        layout = run.layout
    finally:
        run.close()
    return {
        "unit": geometry.unit,
        "block_size": layout.block_size,
        "pages": plan.pages,
        "concurrency": plan.concurrency,
        "max_model_len": plan.max_model_len,
        "engine_layout": {
            "block_size": layout.block_size,
            "page_bytes": layout.page_bytes,
            "attention_groups": layout.attention_groups,
            "recurrent_groups": layout.recurrent_groups,
            "state_bytes": layout.state_bytes,
            "num_blocks": layout.num_blocks,
        },
        "runs": runs,
    }


def run_engine_experiment(
    stream: Stream, geometry: CacheGeometry, config: EngineExperimentConfig, progress: Progress | None = None
) -> dict[str, Any]:
    """The stream through the engine at every unit of ``config`` (``geometry``: the target's
    layout, its unit replaced by each); the result's runs each carry ``"executor": "engine"``."""
    say = progress or (lambda _msg: None)
    engine_policies(config.policies)  # refuse before starting anything
    units = [run_unit(stream, replace(geometry, unit=u), config, say) for u in config.units]
    return {
        "executor": "engine",
        "stream": {
            **stream.provenance,
            "name": stream.name,
            "requests": len(stream),
            "sessions": len(stream.sessions()),
            "prompt_tokens": sum(r.num_prompt_tokens for r in stream.requests),
            "output_tokens": sum(r.output_tokens for r in stream.requests),
        },
        "target": {
            "block_size": geometry.block_size,
            "page_bytes": geometry.page_bytes,
            "group_size": geometry.group_size,
            "pool_page_bytes": geometry.pool_page_bytes,
            "attention_groups": geometry.attention_groups,
            "recurrent_groups": geometry.recurrent_groups,
            "capacity_gib": config.capacity_gib,
        },
        "engine": {
            "model": shaped_kind(geometry.block_size),
            "vllm": _vllm_version(),
            "ssm_state_dtype": SSM_STATE_DTYPE,
        },
        "units": units,
    }


def _vllm_version() -> str:
    from boundary_vllm.pin import installed_vllm

    return str(installed_vllm())
