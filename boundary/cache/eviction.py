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


class Page:
    """One page in a ``FreeQueue``: free (``entry`` None: nothing to evict when it is taken)
    or one group's page of an evictable cached entry."""

    __slots__ = ("entry",)

    def __init__(self, entry: Entry | None = None) -> None:
        self.entry = entry


class FreeQueue:
    """vLLM's ``FreeKVCacheBlockQueue`` over equal-size pages: free pages and the pages of
    evictable cached entries in one queue, allocations take the head. An entry spans one page
    per group of its kind (``pages``: a state of three recurrent groups is three pages), each
    with its own place in the queue, as vLLM frees a group's blocks: entries freed together go
    back group by group (``release_group_major``), so two states freed in one step interleave.
    Taking one of an entry's pages evicts it (a state or block missing one group's page can
    no longer be hit); its other pages stay where they stand, free.

    ``BlockPool.free_blocks`` appends a freed cached block to the tail (LRU) and prepends a
    freed uncached one to the head (reused first); ``BlockPool.evict_blocks`` un-keys a block
    where it stands, so an un-cached entry leaves free pages at its places in the queue (the
    cached entries ahead of it are still evicted first). ``get_new_blocks`` pops the head: a
    free page costs nothing, a cached entry's page evicts it. Invariants: free pages plus the
    evictable entries' pages are the pool's free blocks; an evictable entry has all its pages
    in the queue.
    """

    __slots__ = ("_of", "_queue", "page_bytes")

    def __init__(self, free_pages: int = 0, page_bytes: int = 0) -> None:
        self._queue: OrderedDict[Page, None] = OrderedDict((Page(), None) for _ in range(free_pages))
        self._of: dict[Entry, list[Page]] = {}
        self.page_bytes = page_bytes

    def pages(self, nbytes: int) -> int:
        """Pages an entry of ``nbytes`` takes (``page_bytes`` 0: every entry is one page). A
        recurrent state takes one page per recurrent group, an attention block one per
        attention group (vLLM allocates a block id per group from the one pool)."""
        return max(1, nbytes // self.page_bytes) if self.page_bytes else 1

    def release(self, entry: Entry, now: float) -> None:
        self.release_group_major([entry], now)

    def release_group_major(self, entries: list[Entry], now: float) -> None:
        """``entries`` (of one kind, in the order vLLM lists them) became evictable together:
        their first group's pages join the tail, then their second group's, and so on, as
        vLLM frees a request's blocks or a step's copy endpoints manager by manager."""
        for entry in entries:
            self._of[entry] = [Page(entry) for _ in range(self.pages(entry.nbytes))]
        for group in range(max((len(self._of[e]) for e in entries), default=0)):
            for entry in entries:
                own = self._of[entry]
                if group < len(own):
                    self._queue[own[group]] = None

    def touch(self, entry: Entry, now: float) -> None:
        for page in self._of.pop(entry, ()):
            del self._queue[page]

    def discard(self, entry: Entry) -> None:
        """``entry`` left the cache (evicted, or un-keyed while free): its pages still in the
        queue are free where they stand."""
        for page in self._of.pop(entry, ()):
            page.entry = None

    def victim(self) -> Entry | None:
        return next((p.entry for p in self._queue if p.entry is not None), None)

    def free_page(self, count: int = 1) -> None:
        """``count`` uncached pages were freed: they are reused first."""
        for _ in range(count):
            page = Page()
            self._queue[page] = None
            self._queue.move_to_end(page, last=False)

    def take(self) -> Page | None:
        """The head page (its ``entry``, if any, is to be evicted), or None when nothing is free."""
        if not self._queue:
            return None
        head, _ = self._queue.popitem(last=False)
        if head.entry is not None:
            self._of[head.entry].remove(head)
        return head

    def free_pages(self) -> int:
        return sum(p.entry is None for p in self._queue)

    def page_owners(self) -> list[Entry | None]:
        """Each page's entry (None: free), head first: the order ``get_new_blocks`` takes them."""
        return [p.entry for p in self._queue]

    def evictable(self) -> list[Entry]:
        """The cached entries in the order vLLM would evict them (by their first page)."""
        return list(dict.fromkeys(p.entry for p in self._queue if p.entry is not None))

    def __len__(self) -> int:
        return len(self._of)

    def __contains__(self, entry: object) -> bool:
        return entry in self._of
