"""What the plugin keys and un-keys agrees with vLLM's own hash table: the KV events a router
reads, ``reset_prefix_cache``, two requests keeping a state under one chained hash, and the
un-keying of a sub-block prompt tail. vLLM 0.33.0's real scheduler and block pool throughout."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from vllm.v1.core.kv_cache_utils import get_block_hash, get_group_id, maybe_convert_block_hash

from boundary.checkpoints.retention import Variant
from tests.vllm.streams import BLOCK, turn, turns

pytestmark = pytest.mark.vllm

SESSIONS = (11, 5, 0)  # 3 sessions x 4 turns, in flight together


class CapturedEvents:
    """A KV-event publisher that keeps what the scheduler publishes."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def publish(self, batch) -> None:
        self.events.extend(batch.events)

    def shutdown(self) -> None:
        pass


def router_keys(events) -> set[tuple[object, int]]:
    """The keys a KV-aware router holds after reading ``events`` in order."""
    keys: set[tuple[object, int]] = set()
    for event in events:
        if isinstance(event, BlockStored):
            keys.update((h, event.group_idx) for h in event.block_hashes)
        elif isinstance(event, BlockRemoved):
            keys.difference_update((h, event.group_idx) for h in event.block_hashes)
        elif isinstance(event, AllBlocksCleared):
            keys.clear()
    return keys


def pool_keys(run: Replay) -> set[tuple[object, int]]:
    table = run.scheduler.kv_cache_manager.block_pool.cached_block_hash_to_block._cache
    return {(maybe_convert_block_hash(get_block_hash(k)), get_group_id(k)) for k in table}


def evented_run(policy: Variant | None) -> tuple[Replay, CapturedEvents]:
    shape = EngineShape(
        block_size=528,
        prefix_match_unit=16,
        plugin=policy is not None,
        policy=policy or Variant.BOTH,
        async_scheduling=True,
        kv_events=True,
    )
    run = Replay(shape)
    captured = CapturedEvents()
    run.scheduler.kv_event_publisher = captured
    sessions = [[ReplayRequest.from_turn(t) for t in turns(c)[:4]] for c in SESSIONS]
    run.run_sessions(sessions, concurrency=len(SESSIONS))
    captured.events.extend(run.scheduler.kv_cache_manager.take_events())  # the last step's
    return run, captured


@pytest.mark.parametrize("policy", [None, *Variant], ids=lambda p: "upstream" if p is None else p.value)
def test_a_router_reading_the_kv_events_holds_exactly_the_pool_keys(policy):
    run, captured = evented_run(policy)
    held = pool_keys(run)
    assert held
    assert router_keys(captured.events) == held  # no phantom entry, none missing
    if policy is not None:
        run.scheduler.boundary_retention.check_invariants()


def test_reset_prefix_cache_empties_the_ledger_and_the_retained_bytes():
    from prometheus_client import REGISTRY

    run, captured = evented_run(Variant.BOTH)
    retention = run.scheduler.boundary_retention
    assert sum(retention.retained_bytes().values()) > 0 and len(retention.ledger) > 0
    labels = run.scheduler.boundary_metric_labels
    assert run.scheduler.reset_prefix_cache()
    assert retention.retained_bytes() == {} and len(retention.ledger) == 0
    captured.events.extend(run.scheduler.kv_cache_manager.take_events())
    assert router_keys(captured.events) == pool_keys(run) == set()
    assert run.counters.retained_bytes == {}  # the report pushes the gauge too
    for kind in ("input_end", "decode_end", "prompt_end_block"):
        value = REGISTRY.get_sample_value("boundary_retained_bytes", {**labels, "kind": kind})
        assert value in (None, 0.0), kind
    # the engine keeps serving; what is kept from now on is attributed again
    run.run(ReplayRequest.from_turn(turn(11, 2)))
    retention.check_invariants()
    assert retention.retained_bytes()["input_end"] > 0


def longer(request: ReplayRequest, extra: int) -> ReplayRequest:
    """The same prompt, the same committed output, then ``extra`` more tokens and no stop (a
    regenerate with a larger ``max_tokens``)."""
    output = request.output_token_ids[:-1]
    more = tuple(output[k % len(output)] for k in range(extra))
    return dataclasses.replace(request, output_token_ids=(*output, *more), stop_token_ids=())


def test_a_state_kept_by_one_request_survives_another_releasing_the_same_key():
    # b decodes through a's kept D_end block under the same chained hash, holds it tentatively
    # and releases it; only b's own block goes, so c still hits a's D_end state.
    a, c = turn(11, 4), turn(11, 6)
    first = ReplayRequest.from_turn(a)
    d_end = len(a.tokens) - 1
    run = Replay(EngineShape(policy=Variant.DECODE_END))
    outcomes = run.run_all([first, longer(first, 4 * BLOCK), ReplayRequest.from_turn(c)])
    assert outcomes[2].hit_tokens == d_end // BLOCK * BLOCK
    assert outcomes[2].hit_kind == "decode_end"  # attributed, not "untracked"
    run.scheduler.boundary_retention.check_invariants()


def test_identical_requests_in_flight_each_hold_their_own_state():
    a = turn(11, 4)
    same = ReplayRequest.from_turn(a)
    run = Replay(EngineShape(policy=Variant.DECODE_END, async_scheduling=True))
    run.run_sessions([[same], [same]], concurrency=2)
    retention = run.scheduler.boundary_retention
    retention.check_invariants()
    one = sum(group.state_bytes for group in retention.groups)
    assert retention.retained_bytes()["decode_end"] == 2 * one  # each request's own block, both keyed
    outcome = run.run(ReplayRequest.from_turn(turn(11, 6)))
    assert outcome.hit_kind == "decode_end"
    retention.check_invariants()


def test_unkeying_a_blocks_own_hash_promotes_its_deepest_alias_and_emits_the_removal():
    run = Replay(EngineShape(block_size=64, prefix_match_unit=16, kv_events=True))
    request = run.request(ReplayRequest.from_turn(turn(11, 2)))
    retention = run.scheduler.boundary_retention
    pool = retention.pool
    group = retention.groups[0].group_id
    (block,) = pool.get_new_blocks(1)
    deep = pool.cache_partial_block(request, block, 48, group, 64)  # the block's own hash
    shallow = pool.cache_partial_block(request, block, 32, group, 64)  # an alias beside it
    assert block.block_hash == deep and pool.cached_block_hashes_by_block[block.block_id] == {shallow}
    pool.take_events()

    retention.kept.unkey(block, deep, request)
    table = pool.cached_block_hash_to_block
    assert not table.contain(deep, block.block_id) and table.contain(shallow, block.block_id)
    assert block.block_hash == shallow and block.block_hash_num_tokens == 32
    assert block.block_id not in pool.cached_block_hashes_by_block
    (removed,) = pool.take_events()
    assert isinstance(removed, BlockRemoved)
    assert removed.block_hashes == [maybe_convert_block_hash(get_block_hash(deep))]

    retention.kept.unkey(block, shallow, request)  # the last key: the block is uncached
    assert block.block_hash is None and not table.contain(shallow, block.block_id)
