"""The equal checkpoint-byte budget inside the one pool, worked by hand: kept states are
admitted up to B, evicted least recently let go first, refused when held ones fill it; blocks
keep the whole pool."""

from __future__ import annotations

import pytest

from boundary.cache import CacheRequest, PrefixHasher
from boundary.cache.budget import StateBudget
from boundary.cache.hybrid import CacheConfig
from boundary.checkpoints.policies import decide
from boundary.checkpoints.retention import DecodeStates, EngineGeometry, RequestBoundaries
from tests.cache.conftest import geometry

# block 8 = unit 8; a block and a state are one page of 100 bytes each
GEOMETRY = geometry(block=8, unit=8, state_pages=1)
ENGINE = EngineGeometry(8, 8, DecodeStates.BLOCK, True)
HASHER = PrefixHasher(8)  # one hasher for every request: prefix ids are interned by it


def _request(rid: int, first: int, length: int) -> CacheRequest:
    """A prompt of ``length`` tokens from ``first`` on, one output token."""
    return CacheRequest.from_tokens(rid, list(range(first, first + length + 1)), length, HASHER)


def _admit(cache, rid: int, first: int, now: float, length: int = 20):
    """main_sparse: a 20-token prompt keeps P_end at floor(19 / 8) * 8 = 16 (its twin too)."""
    decision = decide("main_sparse", RequestBoundaries(length, None, None, 1.0), ENGINE)
    return cache.admit(_request(rid, first, length), decision, now)


def test_a_kept_state_past_the_budget_evicts_the_one_let_go_longest_ago(make_cache):
    """B = 200 bytes = two states, pool 2,000 bytes. Requests 0, 1, 2 (disjoint prompts) each
    keep one state at 16, one after another: the third evicts request 0's (let go first), never
    request 1's; admitted bytes stay at 200 and nothing is refused or exceeded."""
    cache = make_cache(GEOMETRY, 2000.0, engine_steps=True, checkpoint_budget_bytes=200.0)
    kept = []
    for rid, first in enumerate((0, 300, 600)):
        kept.append(_admit(cache, rid, first, 2.0 * rid).created)
        cache.finish(rid, 2.0 * rid + 1)
        cache.check_invariants()
    assert [[s.position for s in states] for states in kept] == [[16], [16], [16]]
    assert cache.stats.evictions[("state", "state")] == 1
    assert not kept[0][0].live and kept[1][0].live and kept[2][0].live
    assert cache.budget is not None
    assert (cache.budget.used, cache.budget.peak, cache.budget.exceedances) == (200, 200, 0)
    assert not cache.stats.budget_refusals


def test_a_kept_state_is_refused_when_the_states_held_in_flight_fill_the_budget(make_cache):
    """B = 100 bytes = one state. Request 0 keeps its state at 16 and is still running (its
    running page there is the kept state, held); request 1 arrives: nothing unheld to evict,
    so its state is refused and counted under its kind (P_end; the twin shares the position).
    Once request 0 finishes, request 2's state evicts request 0's."""
    cache = make_cache(GEOMETRY, 2000.0, engine_steps=True, checkpoint_budget_bytes=100.0)
    assert [s.position for s in _admit(cache, 0, 0, 0.0).created] == [16]
    assert _admit(cache, 1, 300, 0.5).created == ()
    assert cache.stats.budget_refusals == {"prompt_end": 1}
    cache.finish(0, 1.0)
    cache.finish(1, 1.5)
    assert [s.position for s in _admit(cache, 2, 600, 2.0).created] == [16]
    cache.finish(2, 3.0)
    assert cache.stats.evictions[("state", "state")] == 1
    assert cache.budget is not None and cache.budget.exceedances == 0


def test_blocks_keep_the_whole_pool_under_the_budget(make_cache):
    """Pool 20 pages, B one state. A 144-token prompt runs as 18 blocks beside its running
    pages (at most two: the page behind is freed as it moves on) and its kept state: 20 pages,
    all the pool's. Carving B out of the pool (1,900 bytes for blocks) would over-commit."""
    cache = make_cache(GEOMETRY, 2000.0, engine_steps=True, checkpoint_budget_bytes=100.0)
    _admit(cache, 0, 0, 0.0, length=144)
    cache.finish(0, 1.0)
    assert cache.working.capacity == 2000.0 and cache.working.overcommits == 0
    assert cache.working.peak == 2000


def test_a_budget_above_the_pool_is_refused_and_a_budget_must_be_positive():
    with pytest.raises(ValueError, match="must be inside"):
        CacheConfig(GEOMETRY, 2000.0, engine_steps=True, checkpoint_budget_bytes=2100.0)
    with pytest.raises(ValueError, match="positive"):
        StateBudget(0.0)
