"""What the cache model (``boundary.cache``) predicts vLLM serves, fed an engine's own event order.

Where it sits: the report end beside the engine: it runs the checkpoints' retention policy through
boundary's cache model (``boundary.cache``) for an engine's event order; ``scenarios``,
``integrations/vllm/gpu_check.py`` and the fidelity and engine tests compare it with vLLM.

Given each request's tokens and hints, and when the engine admitted, advanced and freed it
(from ``boundary_vllm.replay`` or a real engine's step log, ``boundary_vllm.step_log``), this
runs the same retention decisions (``boundary.checkpoints.policies.decide``) through
``HybridPrefixCache`` and returns each request's predicted joint hit. Comparing that with what
vLLM reported is the fidelity check; nothing here reads vLLM's hits.

Event order: within a step vLLM allocates for the requests it schedules in order; a request is
freed when the step's output is processed, after the next step was scheduled (async), so a free
at step ``s`` sorts after the admissions of step ``s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from boundary.cache import CacheConfig, CacheGeometry, CacheRequest, HybridPrefixCache, PrefixHasher
from boundary.checkpoints.policies import decide, may_keep_decode
from boundary.checkpoints.retention import EngineGeometry, RequestBoundaries, Variant
from boundary_vllm.decode_end import final_d_end

if TYPE_CHECKING:
    from boundary_vllm.engine_run import EngineOutcome, EngineRequest


@dataclass(frozen=True, slots=True)
class Observed:
    """One request as an engine ran it: tokens, hints, and the scheduler steps it took.

    ``steps``: (step, order in the step, computed tokens after it) per step that scheduled it;
    ``admitted``: the step that first scheduled it; ``finished``: the steps scheduled when it
    was freed."""

    prompt_token_ids: tuple[int, ...]
    output_token_ids: tuple[int, ...]
    input_end: int | None
    stop_token_ids: tuple[int, ...]
    round_trip: float | None
    horizon: int | None
    admitted: int
    finished: int
    steps: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The model's geometry and mode. ``capacity_bytes`` finite with ``engine_steps``: the pool
    runs each request's steps page by page, as vLLM's block pool does. ``async_scheduling``: the
    engine schedules a step before the previous one's output arrives (vLLM's async scheduler),
    so pages behind a request are freed one step later and decode blocks are cached one token
    late; the CPU build schedules synchronously. ``recurrent_groups_first``: the engine's
    KV-cache groups put the recurrent ones before attention (``CacheLayout``)."""

    block_size: int
    unit: int
    page_bytes: int = 4096
    attention_groups: int = 1
    recurrent_groups: int = 1
    capacity_bytes: float = float("inf")
    exported_twin: bool = False
    engine_steps: bool = False
    async_scheduling: bool = False
    recurrent_groups_first: bool = True


def _model(shape: ModelShape) -> HybridPrefixCache:
    geometry = CacheGeometry(
        block_size=shape.block_size,
        unit=shape.unit,
        page_bytes=shape.page_bytes,
        group_size=1,
        attention_groups=shape.attention_groups,
        recurrent_groups=shape.recurrent_groups,
    )
    config = CacheConfig(
        geometry,
        capacity_bytes=shape.capacity_bytes,
        engine_steps=shape.engine_steps,
        async_lag=shape.engine_steps and shape.async_scheduling,
        recurrent_groups_first=shape.recurrent_groups_first,
    )
    return HybridPrefixCache(config)


def predicted_hits(
    sessions: Sequence[Sequence[Observed]],
    variant: Variant,
    shape: ModelShape,
    *,
    models: list[HybridPrefixCache] | None = None,
) -> list[list[int]]:
    """The model's joint hit per request, sessions as given (``models`` receives the model)."""
    engine = EngineGeometry(shape.block_size, shape.unit, exported_twin=shape.exported_twin)
    model = _model(shape)
    if models is not None:
        models.append(model)
    hasher = PrefixHasher(shape.unit)
    events = sorted(
        [
            (step, 0, order, si, ri, end)
            for si, session in enumerate(sessions)
            for ri, o in enumerate(session)
            for step, order, end in (o.steps if shape.engine_steps else ((o.admitted, 0, 0),))
        ]
        + [
            (o.finished, 1, 0, si, ri, 0)
            for si, session in enumerate(sessions)
            for ri, o in enumerate(session)
        ]
    )
    rids: dict[tuple[int, int], int] = {}
    hits: dict[tuple[int, int], int] = {}
    for step, phase, _, si, ri, computed in events:
        r = sessions[si][ri]
        n = len(r.prompt_token_ids)
        if phase == 0 and (si, ri) not in rids:
            rid = rids[(si, ri)] = len(rids)
            tokens = [*r.prompt_token_ids, *r.output_token_ids]
            boundaries = RequestBoundaries(n, r.input_end, None, r.round_trip, r.horizon)
            hits[(si, ri)] = model.admit(
                CacheRequest.from_tokens(rid, tokens, n, hasher),
                decide(variant, boundaries, engine),
                now=float(step),
                run_prefill=not shape.engine_steps,
                tentative_decode=may_keep_decode(variant, boundaries, engine),
            ).hit.joint
        if phase == 0 and shape.engine_steps:
            model.step(rids[(si, ri)], computed, now=float(step))
        elif phase == 1:
            d_end = final_d_end(n, r.output_token_ids, set(r.stop_token_ids), n + len(r.output_token_ids))
            final = decide(variant, RequestBoundaries(n, r.input_end, d_end, r.round_trip, r.horizon), engine)
            model.finish(rids[(si, ri)], now=step + 0.5, decision=final)
        model.check_invariants()
    return [[hits[(si, ri)] for ri in range(len(s))] for si, s in enumerate(sessions)]


def observed(
    requests: Sequence[Sequence[EngineRequest]], outcomes: Sequence[Sequence[EngineOutcome]]
) -> list[list[Observed]] | None:
    """The requests as the engine ran them (the tokens it generated, its scheduler's steps);
    None without a step log or after a preemption, which the cache model does not reproduce."""
    out = []
    for session, outs in zip(requests, outcomes, strict=True):
        row = []
        for r, o in zip(session, outs, strict=True):
            log = o.logged
            if log is None or log.finished is None or log.preemptions:
                return None
            row.append(
                Observed(
                    r.prompt_token_ids,
                    log.output_token_ids,
                    r.input_end,
                    r.stop_token_ids,
                    r.round_trip,
                    r.horizon,
                    log.admitted,
                    log.finished,
                    tuple(log.steps),
                )
            )
        out.append(row)
    return out
