"""The LRU eviction policy: vLLM's free-block queue order."""

from __future__ import annotations

import pytest

from boundary.cache import LRU, Entry, EntryKind
from boundary.cache.eviction import FreeQueue
from boundary.cache.memory import Arena


def entry(eid: int) -> Entry:
    return Entry(eid, EntryKind.BLOCK, 1, 8, 0, 0.0)


def pool(pages: int, evicted: list[Entry]) -> Arena:
    """A pool of `pages` pages of 100 bytes that records what it evicts."""
    return Arena(
        "pool", 100 * pages, FreeQueue(pages, page_bytes=100), lambda e, now, cause: evicted.append(e)
    )


def hold(arena: Arena, *entries: Entry) -> None:
    """Allocate each entry as its own kind, held by one request."""
    for e in entries:
        arena.allocate(e, 0.0, e.kind)
        e.refs = 1


def test_victims_come_in_release_order_and_a_held_entry_leaves_the_queue():
    lru = LRU()
    a, b, c = entry(1), entry(2), entry(3)
    for e in (a, b, c):
        lru.release(e, 0.0)
    assert lru.victim() is a and len(lru) == 3
    lru.touch(a, 1.0)  # a request holds it again
    assert lru.victim() is b and a not in lru
    lru.release(a, 2.0)  # released again: now the most recent
    lru.discard(b)
    assert [lru.victim()] == [c]
    lru.discard(c)
    assert lru.victim() is a
    lru.discard(a)
    assert lru.victim() is None


def test_a_state_spanning_pages_is_evicted_whole_and_its_spare_pages_are_reused_first():
    """A pool of 4 pages of 100 bytes; a state is 2 pages (two recurrent groups), a block 1.
    S (2 pages) and B (1) leave 1 free page. S is cached and released: the queue is [free, S].
    X (1 page) takes the free page. Y (1 page) reaches S's first page: S is evicted whole, Y
    takes that page and the other stays free where it stood, now the head, so Z (2 pages) takes
    it, then finds nothing more: one overcommit."""
    evicted: list[Entry] = []
    arena = pool(4, evicted)
    s, b = Entry(1, EntryKind.STATE, 200, 8, 0, 0.0), Entry(2, EntryKind.BLOCK, 100, 8, 0, 0.0)
    hold(arena, s, b)
    s.keys.append(7)
    arena.release(s, 1.0)
    x, y, z = (Entry(i, EntryKind.BLOCK, n, 8, 0, 2.0) for i, n in ((3, 100), (4, 100), (5, 200)))
    arena.allocate(x, 2.0, EntryKind.BLOCK)
    assert not evicted and arena.policy.free_pages() == 0 and s in arena.policy
    arena.allocate(y, 3.0, EntryKind.BLOCK)
    assert evicted == [s] and arena.policy.free_pages() == 1 and arena.used == 300
    arena.allocate(z, 4.0, EntryKind.BLOCK)
    assert arena.overcommits == 1 and arena.policy.free_pages() == 0


def test_an_uncached_multi_page_entry_frees_all_its_pages():
    """An uncached 3-page entry released to a 3-page pool gives back 3 free pages."""
    arena = pool(3, [])
    s = Entry(1, EntryKind.STATE, 300, 8, 0, 0.0)
    hold(arena, s)
    assert arena.policy.free_pages() == 0
    arena.release(s, 1.0)
    assert arena.policy.free_pages() == 3 and arena.used == 0


@pytest.mark.parametrize("together", [True, False], ids=["freed_together", "one_after_the_other"])
def test_two_states_freed_together_interleave_group_by_group_and_one_allocation_ends_both(together):
    """vLLM frees blocks of several KV-cache groups manager by manager, so two states of three
    recurrent groups freed in one go (B asked first) sit in the queue as [B.g0, A.g0, B.g1,
    A.g1, B.g2, A.g2]. An allocation of two pages takes B.g0 and A.g0: each state lost a
    group's page and both are evicted; their other four pages stay free where they stand.
    Freed one after the other they would sit whole ([B.g0, B.g1, B.g2, A...]) and the same
    allocation would end B alone. Found on the engine: BFCL, block 1056, two requests' partial
    hits copied in one scheduling step."""
    evicted: list[Entry] = []
    arena = pool(8, evicted)
    b, a = Entry(1, EntryKind.STATE, 300, 8, 0, 0.0), Entry(2, EntryKind.STATE, 300, 8, 0, 0.0)
    hold(arena, b, a)
    for e in (b, a):
        e.keys.append(e.eid)
    if together:
        arena.release_together([b, a], 1.0)
        assert arena.policy.page_owners() == [None, None, b, a, b, a, b, a]
    else:
        arena.release(b, 1.0)
        arena.release(a, 1.0)
        assert arena.policy.page_owners() == [None, None, b, b, b, a, a, a]
    arena.allocate(Entry(3, EntryKind.BLOCK, 400, 8, 0, 2.0), 2.0, EntryKind.BLOCK)
    if together:
        assert evicted == [b, a] and arena.policy.page_owners() == [None] * 4
    else:
        assert evicted == [b] and arena.policy.page_owners() == [None, a, a, a]
    assert arena.used == sum(e.nbytes for e in arena.charged) and not arena.overcommits
