"""Fidelity: the experiment's cache model (``boundary.cache``) and vLLM 0.33.0's real scheduler and
KV-cache manager, running the same policy decisions (``boundary.checkpoints.retention``) on the same
request streams, agree on every request's joint hit — for every variant, at vLLM's align-mode
block sizes and at the units one would run.

vLLM side: ``boundary_vllm.replay`` (the boundary scheduler over the real ``Scheduler`` and
``KVCacheManager``, hints in ``vllm_xargs`` as the chat endpoint delivers them). Model side:
``HybridPrefixCache`` with the same geometry, admission and finish decisions from the same
hints. Neither side's numbers are compared with themselves: the expected values are vLLM's.

Under concurrency the model is fed vLLM's own event order (each request admitted at the step
that first scheduled it, finished at the step whose output finished it), with async
scheduling driven as the engine runs it. With a pool small enough to evict, the model runs in
``engine_steps`` mode (vLLM's block pool page by page: the free queue, Mamba pages released
behind the running position, blocks allocated step by step) and, with sessions in flight, is
fed each request's steps as vLLM scheduled them.
With kernel-exported prompt checkpoints at a unit finer than the block, upstream's twin is
P_end's unit tail (``EngineGeometry.exported_twin``).
"""

from __future__ import annotations

import itertools
from functools import cache

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.cache_layout import CacheLayout
from boundary_vllm.decode_end import committed_end
from boundary_vllm.prediction import ModelShape, Observed, predicted_hits
from boundary_vllm.replay import EngineShape, Replay, ReplayRequest, replay

from boundary.cache import CacheConfig, CacheGeometry, CacheRequest, HybridPrefixCache, PrefixHasher
from boundary.checkpoints.policies import decide
from boundary.checkpoints.retention import EngineGeometry, RequestBoundaries, Variant
from tests.vllm.streams import shared, turn, turns

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

STREAMS = {
    # one session: reasoning turns, tool loops, a user turn after a tool loop
    "session": lambda: turns(11),
    # four conversations sharing the airline policy prompt: a reactive junction
    "junction": lambda: tuple(turn(c, 2) for c in (0, 1, 2, 3)),
    # two sessions interleaved
    "interleaved": lambda: tuple(itertools.chain.from_iterable(zip(turns(5), turns(7), strict=False))),
}


@cache
def stream(name: str) -> tuple[ReplayRequest, ...]:
    """The turns with the policy hints a frontend would send: the round-trip verdict (here the
    tool-loop rule) and a horizon (here how far the next request of the session really shares)."""
    ts = STREAMS[name]()
    out = []
    for t in ts:
        later = next(
            (n for n in ts if n.index > t.index and n.prompt.token_ids[:10] == t.prompt.token_ids[:10]), None
        )
        horizon = shared(t.tokens, later.prompt.token_ids) if later is not None else t.prompt.u_end
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
    return tuple(out)


def model_hits(requests: tuple[ReplayRequest, ...], variant: Variant, block: int, unit: int) -> list[int]:
    geometry = CacheGeometry(
        block_size=block, unit=unit, page_bytes=4096, group_size=1, attention_groups=1, recurrent_groups=1
    )
    engine = EngineGeometry(block, unit)
    model = HybridPrefixCache(CacheConfig(geometry, capacity_bytes=float("inf")))
    hasher = PrefixHasher(unit)
    joint = []
    for rid, r in enumerate(requests):
        n = len(r.prompt_token_ids)
        tokens = [*r.prompt_token_ids, *r.output_token_ids]
        d_end = max(min(committed_end(n, r.output_token_ids, set(r.stop_token_ids)), len(tokens) - 1), n)
        b = RequestBoundaries(n, r.input_end, None, r.round_trip, r.horizon)
        request = CacheRequest.from_tokens(rid, tokens, n, hasher)
        joint.append(model.admit(request, decide(variant, b, engine), now=float(rid)).hit.joint)
        final = decide(variant, RequestBoundaries(n, r.input_end, d_end, r.round_trip, r.horizon), engine)
        model.finish(rid, now=rid + 0.5, decision=final)
        model.check_invariants()
    return joint


GEOMETRIES = [(528, 528), (528, 16), (1088, 64)]  # align-mode blocks and the units one runs them with
CASES = [(name, block, unit, v) for name in STREAMS for block, unit in GEOMETRIES for v in Variant] + [
    # at block 2096 only the long session reaches a second block: the shorter streams reuse nothing
    ("session", 2096, 2096, v)
    for v in Variant
]


@pytest.mark.parametrize(
    ("name", "block", "unit", "variant"), CASES, ids=[f"{n}-b{b}-u{u}-{v.value}" for n, b, u, v in CASES]
)
def test_the_cache_model_and_vllm_agree_on_every_joint_hit(name, block, unit, variant):
    requests = stream(name)
    shape = EngineShape(block_size=block, prefix_match_unit=unit, policy=variant, max_num_batched_tokens=8192)
    vllm = [o.hit_tokens for o in replay(requests, shape)]
    assert vllm == model_hits(requests, variant, block, unit)
    assert any(vllm)  # the stream exercises reuse at all


SESSIONS = {
    # four sessions in flight: one long session, two interleaved ones, the junction turns
    "four": lambda: [
        list(stream("session")),
        list(stream("interleaved"))[0::2],
        list(stream("interleaved"))[1::2],
        list(stream("junction")),
    ],
}


def model_hits_in_engine_order(
    sessions: list[list[ReplayRequest]],
    outcomes: list[list],
    variant: Variant,
    block: int,
    unit: int,
    *,
    capacity: float = float("inf"),
    exported_twin: bool = False,
    engine_steps: bool = False,
    async_scheduling: bool = True,
    recurrent_groups_first: bool = True,
    models: list[HybridPrefixCache] | None = None,
) -> list[list[int]]:
    """The model's joint hits with admissions and finishes in vLLM's order (``engine_steps``:
    the model's pool runs each request's steps as vLLM's block pool does, its copy-on-write
    endpoints let go in the engine's group order; ``models`` receives the model)."""
    observed = [
        [
            Observed(
                r.prompt_token_ids,
                r.output_token_ids,
                r.input_end,
                r.stop_token_ids,
                r.round_trip,
                r.horizon,
                o.admitted,
                o.finished,
                o.steps,
            )
            for r, o in zip(session, outs, strict=True)
        ]
        for session, outs in zip(sessions, outcomes, strict=True)
    ]
    shape = ModelShape(
        block,
        unit,
        capacity_bytes=capacity,
        exported_twin=exported_twin,
        engine_steps=engine_steps,
        async_scheduling=async_scheduling,
        recurrent_groups_first=recurrent_groups_first,
    )
    return predicted_hits(observed, variant, shape, models=models)


def concurrent(
    block: int,
    unit: int,
    variant: Variant,
    *,
    concurrency: int = 4,
    models: list[HybridPrefixCache] | None = None,
    async_scheduling: bool = True,
    **shape,
) -> tuple[list[list[int]], list[list[int]]]:
    """vLLM's and the model's joint hits; with ``num_blocks`` (a pool that evicts) the model's
    one pool has the same pages and runs each request's steps as vLLM's block pool does."""
    sessions = SESSIONS["four"]()
    engine = EngineShape(
        block_size=block, prefix_match_unit=unit, policy=variant, async_scheduling=async_scheduling, **shape
    )
    replay = Replay(engine)
    outcomes = replay.run_sessions(sessions, concurrency=concurrency)
    assert not any(o.preemptions for s in outcomes for o in s)  # the model does not preempt
    exported = shape.get("exported_checkpoints", False)
    model = model_hits_in_engine_order(
        sessions,
        outcomes,
        variant,
        block,
        unit,
        capacity=(shape["num_blocks"] - 1) * 4096 if "num_blocks" in shape else float("inf"),
        exported_twin=exported and unit < block,
        engine_steps="num_blocks" in shape,
        async_scheduling=async_scheduling,
        recurrent_groups_first=CacheLayout.of(replay.scheduler).recurrent_groups_first,
        models=models,
    )
    return [[o.hit_tokens for o in s] for s in outcomes], model


CONCURRENT = [(block, unit, v) for block, unit in GEOMETRIES for v in Variant]


@pytest.mark.parametrize(
    ("block", "unit", "variant"), CONCURRENT, ids=[f"b{b}-u{u}-{v.value}" for b, u, v in CONCURRENT]
)
def test_with_four_sessions_in_flight_and_async_ordering_they_agree_on_every_joint_hit(block, unit, variant):
    vllm, model = concurrent(block, unit, variant)
    assert vllm == model
    assert sum(map(any, vllm)) == len(vllm)


EXPORTED = [(block, unit, v) for block, unit in ((528, 528), (528, 16)) for v in Variant]


@pytest.mark.parametrize(
    ("block", "unit", "variant"), EXPORTED, ids=[f"b{b}-u{u}-{v.value}" for b, u, v in EXPORTED]
)
def test_with_kernel_exported_prompt_checkpoints_they_agree_on_every_joint_hit(block, unit, variant):
    vllm, model = concurrent(block, unit, variant, exported_checkpoints=True)
    assert vllm == model


EVICTING = [(block, unit, v) for block, unit in ((528, 528), (528, 16)) for v in Variant]


ONE_AT_A_TIME = [
    pytest.param(
        block,
        unit,
        v,
        num_blocks,
        id=f"b{block}-u{unit}-{v.value}-{num_blocks}",
    )
    for num_blocks in (12, 10)
    for block, unit, v in EVICTING
]


@pytest.mark.parametrize(("block", "unit", "variant", "num_blocks"), ONE_AT_A_TIME)
def test_one_request_at_a_time_with_a_pool_small_enough_to_evict_they_agree_on_every_joint_hit(
    block, unit, variant, num_blocks
):
    models: list[HybridPrefixCache] = []
    vllm, model = concurrent(block, unit, variant, concurrency=1, num_blocks=num_blocks, models=models)
    assert vllm == model
    assert sum(models[0].stats.evictions.values()) > 0  # the pool did evict


# With sessions in flight the model is fed vLLM's steps (``ReplayOutcome.steps``).
EVICTING_IN_FLIGHT = [
    pytest.param(
        block,
        unit,
        v,
        id=f"b{block}-u{unit}-{v.value}",
    )
    for block, unit, v in EVICTING
]


@pytest.mark.parametrize("scheduling", ["async", "sync"])  # sync: the CPU build's
@pytest.mark.parametrize(("block", "unit", "variant"), EVICTING_IN_FLIGHT)
def test_with_sessions_in_flight_and_a_pool_small_enough_to_evict_they_agree_on_every_joint_hit(
    block, unit, variant, scheduling
):
    models: list[HybridPrefixCache] = []
    vllm, model = concurrent(
        block, unit, variant, num_blocks=20, models=models, async_scheduling=scheduling == "async"
    )
    assert vllm == model
    assert sum(models[0].stats.evictions.values()) > 0
