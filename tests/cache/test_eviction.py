"""The LRU eviction policy: vLLM's free-block queue order."""

from __future__ import annotations

from boundary.cache import LRU, Entry, EntryKind


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
