"""The LRU eviction policy: vLLM's free-block queue order."""

from __future__ import annotations

from boundary.cache import LRU, Entry, EntryKind
from boundary.cache.eviction import FreeQueue
from boundary.cache.memory import Arena


def entry(eid: int) -> Entry:
    return Entry(eid, EntryKind.BLOCK, 1, 8, 0, 0.0)


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
    X (1 page) takes the free page. Y (1 page) reaches S: S is evicted whole (both pages), Y
    takes one and the other goes back to the head as a free page, so Z (2 pages) takes it, then
    finds nothing more: one overcommit."""
    evicted: list[Entry] = []
    arena = Arena("pool", 400, FreeQueue(4, page_bytes=100), lambda e, now, cause: evicted.append(e))
    s, b = Entry(1, EntryKind.STATE, 200, 8, 0, 0.0), Entry(2, EntryKind.BLOCK, 100, 8, 0, 0.0)
    for e in (s, b):
        arena.allocate(e, 0.0, e.kind)
        e.refs = 1
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
    arena = Arena("pool", 300, FreeQueue(3, page_bytes=100), lambda e, now, cause: None)
    s = Entry(1, EntryKind.STATE, 300, 8, 0, 0.0)
    arena.allocate(s, 0.0, EntryKind.STATE)
    s.refs = 1
    assert arena.policy.free_pages() == 0
    arena.release(s, 1.0)
    assert arena.policy.free_pages() == 3 and arena.used == 0
