"""The plugin at vLLM's real align-mode block sizes: what it costs where it gains nothing, its
counters under eviction, and what it offers to connectors. vLLM's own scheduler is the reference."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.replay import EngineShape, Replay, ReplayRequest, replay

from boundary.checkpoints.retention import Variant
from tests.vllm.streams import turn, turns

pytestmark = pytest.mark.vllm


def requests(*ts) -> list[ReplayRequest]:
    return [ReplayRequest.from_turn(t) for t in ts]


def chunks(outcomes) -> int:
    return sum(len(o.prefill_chunks) for o in outcomes)


EIGHT = [turn(c, 2) for c in (0, 1, 2, 3)] + list(turns(11)[:4])


@pytest.mark.parametrize("exported", [False, True])
def test_at_the_block_unit_input_end_costs_no_chunk_where_it_lands_on_p_end(exported):
    # At unit = block = 528, U_end and P_end floor to one block in these turns: nothing to gain.
    upstream = replay(
        requests(*EIGHT), EngineShape(block_size=528, plugin=False, exported_checkpoints=exported)
    )
    plugin = replay(
        requests(*EIGHT), EngineShape(block_size=528, policy=Variant.INPUT_END, exported_checkpoints=exported)
    )
    same_block = [t.prompt.u_end // 528 == (t.prompt.p_end - 1) // 528 for t in EIGHT]
    for t, up, mine, same in zip(EIGHT, upstream, plugin, same_block, strict=True):
        if same:
            assert mine.prefill_chunks == up.prefill_chunks, t.index
    assert [o.hit_tokens for o in plugin] == [o.hit_tokens for o in upstream]


def test_with_exported_checkpoints_a_split_is_forced_only_where_a_kept_state_needs_one():
    shape = dict(block_size=528, prefix_match_unit=16, exported_checkpoints=True)
    upstream = replay(requests(*EIGHT), EngineShape(plugin=False, **shape))
    same = replay(requests(*EIGHT), EngineShape(policy=Variant.MAIN_SPARSE, **shape))  # P_end: exported
    assert [(o.hit_tokens, o.prefill_chunks) for o in same] == [
        (o.hit_tokens, o.prefill_chunks) for o in upstream
    ]
    run = Replay(EngineShape(policy=Variant.INPUT_END, **shape))
    outcomes = run.run_all(requests(*EIGHT))
    needed = sum(
        t.prompt.u_end // 16 * 16 not in {(t.prompt.p_end - 1) // 16 * 16, (t.prompt.p_end - 1) // 528 * 528}
        for t in EIGHT
    )
    # a stop inside P_end's block also costs the tail its export (the next chunk starts mid-block)
    assert 0 < run.counters.forced_splits <= needed
    assert run.counters.forced_splits <= chunks(outcomes) - chunks(upstream) <= 2 * run.counters.forced_splits
    assert run.counters.retained_bytes["input_end"] > 0


def test_under_eviction_the_ledger_is_pruned_and_retained_bytes_match_the_pool():
    run = Replay(EngineShape(block_size=16, num_blocks=900, policy=Variant.BOTH))
    run.run_all(requests(*turns(11), *turns(0), *turns(5)))
    retention = run.scheduler.boundary_retention
    pool = retention.pool.cached_block_hash_to_block
    assert all(pool.get_one_block(key) is not None for key in retention.ledger)  # pruned on eviction
    by_pool: dict[str, int] = {}
    for key in retention.ledger:
        for holder in retention.ledger.holders(key):
            assert pool.contain(key, holder.block_id)
            if holder.counted:
                by_pool[holder.kind.value] = by_pool.get(holder.kind.value, 0) + holder.nbytes
    assert retention.retained_bytes() == {k: v for k, v in by_pool.items() if v}
    retention.check_invariants()
    assert run.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() < 900  # the pool was used up


def test_tentative_decode_states_are_not_offered_to_connectors():
    a = turn(11, 4)
    run = Replay(EngineShape(block_size=16, policy=Variant.DECODE_END))
    offered: list[int] = []
    for group in run.scheduler.boundary_retention.groups:
        manager = group.manager
        original = manager.cache_blocks

        def spy(*args, _m=manager, _orig=original, **kw):
            _orig(*args, **kw)
            offered.extend(o[3] for o in _m._pending_boundary_state_offloads)
            _m._pending_boundary_state_offloads.clear()

        manager.cache_blocks = spy
    run.run(ReplayRequest.from_turn(a))
    assert offered and all(p < a.prompt.p_end for p in offered)
    assert run.counters.created["decode_end"] == 1
