"""State contents: with vLLM 0.33.0's real scheduler and KV-cache manager driving a model of
how the worker moves recurrent states between blocks (``boundary_vllm.worker_states``), every
state a request reads is the state of exactly its own token prefix, and every cached state
holds the prefix its key names — for every variant, with sub-block hits, several sessions in
flight, async ordering, eviction and preemption. Planted faults are caught."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

from boundary.checkpoints.retention import Variant
from tests.vllm.streams import turn, turns

pytestmark = pytest.mark.vllm


def requests(*ts) -> list[ReplayRequest]:
    return [ReplayRequest.from_turn(t) for t in ts]


def sessions(*conversations: int) -> list[list[ReplayRequest]]:
    return [requests(*turns(c)) for c in conversations]


@pytest.mark.parametrize("policy", list(Variant))
def test_every_state_read_is_of_the_readers_own_tokens_one_request_at_a_time(policy):
    run = Replay(EngineShape(block_size=16, prefix_match_unit=4, policy=policy), check_states=True)
    outcomes = run.run_all(requests(*turns(11)))
    assert run.states.violations == []
    assert run.states.reads > 0 and run.states.checked_keys > 0
    assert sum(o.hit_tokens % 16 != 0 for o in outcomes) or policy in (Variant.DECODE_END,)


@pytest.mark.parametrize("async_scheduling", [pytest.param(False, marks=pytest.mark.slow), True])
@pytest.mark.parametrize(
    ("block", "unit", "num_blocks"),
    [(16, 4, 360), pytest.param(528, 16, 14, marks=pytest.mark.slow)],
    ids=["b16-u4", "b528-u16"],
)
@pytest.mark.parametrize("policy", list(Variant))
def test_under_concurrency_eviction_and_preemption_every_read_state_is_its_own_prefix(
    policy, block, unit, num_blocks, async_scheduling
):
    shape = EngineShape(
        block_size=block,
        prefix_match_unit=unit,
        policy=policy,
        num_blocks=num_blocks,
        async_scheduling=async_scheduling,
    )
    run = Replay(shape, check_states=True)
    outcomes = run.run_sessions(sessions(11, 5, 7, 0), concurrency=3)
    assert run.states.violations == []
    flat = [o for session in outcomes for o in session]
    assert sum(o.preemptions for o in flat) > 0  # the pool is small enough to preempt
    assert any(o.hit_tokens for o in flat)


def test_a_sub_block_state_keyed_one_unit_shallower_than_it_is_is_caught():
    # U_end's state (sub-block, unit 4) keyed at U_end - 4: a hit there would resume from a
    # state that has seen one unit too many.
    run = Replay(EngineShape(block_size=16, prefix_match_unit=4, policy=Variant.INPUT_END), check_states=True)
    retention = run.scheduler.boundary_retention
    keep = retention.hook._keep_sub_block_state

    def one_unit_shallower(group, request, position, plan):
        keep(group, request, position, plan)
        block = group.manager.req_to_blocks[request.request_id][position // 16]
        shallower = request.block_hashes[position // retention.hash_block_size - 2]
        retention.pool.cached_block_hash_to_block.insert(
            make_block_hash_with_group_id(shallower, group.group_id), block
        )

    retention.hook._keep_sub_block_state = one_unit_shallower
    run.run_all(requests(turn(11, 2), turn(11, 4)))
    assert {v.kind for v in run.states.violations} == {"rest"}
    assert all(v.found.length == v.expected.length + 4 for v in run.states.violations)


def test_a_kept_state_labelled_one_block_shallower_is_caught_when_a_request_reads_it():
    # The fault: every state the Mamba manager keys is also keyed under the previous block's
    # hash — a later request that shares only that shorter prefix resumes from a state that
    # has seen one block too many.
    a = turn(11, 2)
    run = Replay(EngineShape(block_size=16, policy=Variant.MAIN_SPARSE), check_states=True)
    (group,) = run.scheduler.boundary_retention.groups
    manager, pool = group.manager, group.manager.block_pool
    upstream = manager.cache_blocks

    def also_one_block_shallower(request, num_tokens, *args, **kwargs):
        before = set(pool.cached_block_hash_to_block._cache)
        upstream(request, num_tokens, *args, **kwargs)
        hashes = {
            make_block_hash_with_group_id(h, group.group_id): i for i, h in enumerate(request.block_hashes)
        }
        for key in set(pool.cached_block_hash_to_block._cache) - before:
            index = hashes.get(key)
            if index:
                block = pool.cached_block_hash_to_block.get_one_block(key)
                shallower = make_block_hash_with_group_id(request.block_hashes[index - 1], group.group_id)
                pool.cached_block_hash_to_block.insert(shallower, block)

    manager.cache_blocks = functools.partial(also_one_block_shallower)
    twin = (a.prompt.p_end - 1) // 16 * 16
    prompt = a.prompt.token_ids
    b = ReplayRequest((*prompt[: twin - 16], *prompt[: twin - 16][:40]), (prompt[0],))
    run.run_all([ReplayRequest.from_turn(a), b])
    kinds = {v.kind for v in run.states.violations}
    assert kinds == {"rest", "read"}
    (read,) = [v for v in run.states.violations if v.kind == "read"]
    assert read.expected.length == twin - 16 and read.found.length == twin
