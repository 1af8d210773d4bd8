"""Which cached entry goes when memory is needed: a small protocol and vLLM's LRU.

Where it sits: in the cache model, above ``entry``; ``memory`` evicts through it.

An entry is *evictable* while it is cached (findable by some prefix id) and no in-flight
request holds it. The policy sees entries become evictable (``release``), stop being
evictable (``touch``: a request holds it again) and leave (``discard``), and names the
next ``victim``. A FLOP-aware policy in the style of Marconi (weigh recomputation cost
against bytes freed) implements the same four methods.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from boundary.cache.entry import Entry


class EvictionPolicy(Protocol):
    def release(self, entry: Entry, now: float) -> None:
        """``entry`` became evictable."""

    def touch(self, entry: Entry, now: float) -> None:
        """A request holds ``entry`` again: it is no longer evictable."""

    def discard(self, entry: Entry) -> None:
        """``entry`` left the cache (evicted or dropped)."""

    def victim(self) -> Entry | None:
        """The evictable entry to drop next, or None when there is none."""

    def __len__(self) -> int:
        """How many entries are evictable."""

    def __contains__(self, entry: object) -> bool: ...


# ``LRU`` and ``FreeQueue`` implement ``EvictionPolicy`` with alike bodies by design: each keeps
# its own order (a queue of entries; pages with free ones among them) behind the same methods.
class LRU:
    """Least recently released first: vLLM's free-block queue for cached blocks.

    Released entries join the tail (a finishing request frees its blocks tail first, so its
    deepest blocks go first), a held entry leaves the queue, victims come from the head.
    Invariant: the queue holds each evictable entry once, in release order.
    """

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: dict[Entry, None] = {}

    def release(self, entry: Entry, now: float) -> None:
        self._queue[entry] = None

    def touch(self, entry: Entry, now: float) -> None:
        self._queue.pop(entry, None)

    def discard(self, entry: Entry) -> None:
        self._queue.pop(entry, None)

    def victim(self) -> Entry | None:
        return next(iter(self._queue), None)

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, entry: object) -> bool:
        return entry in self._queue


class FreePage:
    """A free, uncached page in a ``FreeQueue`` (nothing to evict when it is taken)."""

    __slots__ = ()


class FreeQueue:
    """vLLM's ``FreeKVCacheBlockQueue`` over equal-size pages: free pages and evictable cached
    entries in one queue, allocations take the head. An entry may span several pages
    (``pages``): a state of three recurrent groups is three pages; when it is taken for an
    allocation that needs fewer, the rest become free pages at the head (the pages vLLM
    would take next: a state's group pages are freed together and sit side by side, and a
    state missing one group's page can no longer be hit).

    ``BlockPool.free_blocks`` appends a freed cached block to the tail (LRU) and prepends a
    freed uncached one to the head (reused first); ``BlockPool.evict_blocks`` un-keys a block
    where it stands, so an un-cached entry leaves a free page at its place in the queue (the
    cached entries ahead of it are still evicted first). ``get_new_blocks`` pops the head: a
    free page costs nothing, a cached entry is evicted. Invariant: free pages plus evictable
    entries are the pool's free blocks.
    """

    __slots__ = ("_slots", "page_bytes")

    def __init__(self, free_pages: int = 0, page_bytes: int = 0) -> None:
        self._slots: OrderedDict[Entry | FreePage, None] = OrderedDict(
            (FreePage(), None) for _ in range(free_pages)
        )
        self.page_bytes = page_bytes

    def pages(self, nbytes: int) -> int:
        """Pages an entry of ``nbytes`` takes (``page_bytes`` 0: every entry is one page). A
        recurrent state takes one page per recurrent group, an attention block one per
        attention group (vLLM allocates a block id per group from the one pool)."""
        return max(1, nbytes // self.page_bytes) if self.page_bytes else 1

    def release(self, entry: Entry, now: float) -> None:
        self._slots[entry] = None

    def touch(self, entry: Entry, now: float) -> None:
        self._slots.pop(entry, None)

    def discard(self, entry: Entry) -> None:
        self._slots.pop(entry, None)

    def victim(self) -> Entry | None:
        return next((e for e in self._slots if not isinstance(e, FreePage)), None)

    def free_page(self, count: int = 1) -> None:
        """``count`` uncached pages were freed: they are reused first."""
        for _ in range(count):
            page = FreePage()
            self._slots[page] = None
            self._slots.move_to_end(page, last=False)

    def hollow(self, entry: Entry) -> None:
        """``entry`` lost its keys while evictable: its free pages take its place."""
        if entry not in self._slots:
            return
        items = list(self._slots)
        at = items.index(entry)
        items[at : at + 1] = [FreePage() for _ in range(self.pages(entry.nbytes))]
        self._slots = OrderedDict((e, None) for e in items)

    def take(self) -> Entry | FreePage | None:
        """The head: a free page, an entry to evict, or None when nothing is free."""
        if not self._slots:
            return None
        head, _ = self._slots.popitem(last=False)
        return head

    def free_pages(self) -> int:
        return sum(isinstance(e, FreePage) for e in self._slots)

    def evictable(self) -> list[Entry]:
        """The cached entries in the order vLLM would evict them."""
        return [e for e in self._slots if not isinstance(e, FreePage)]

    def __len__(self) -> int:
        return sum(not isinstance(e, FreePage) for e in self._slots)

    def __contains__(self, entry: object) -> bool:
        return entry in self._slots
