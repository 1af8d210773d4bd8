"""Entries (one allocation each), the prefix-id index that finds them, and byte budgets.

Where it sits: in the cache model, above ``entry`` and ``eviction``; the block pool and state
store allocate through it.

An ``Entry`` is an attention block, a retained recurrent state, or a running state (scratch).
It is *cached* while it has keys (prefix ids it answers to), *held* while in-flight requests
reference it, and *evictable* when cached and not held. An ``Arena`` is a byte budget: it
charges entries, frees them, and evicts through its ``EvictionPolicy`` when an allocation
would not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from boundary.cache.entry import Entry, EntryKind
from boundary.cache.eviction import EvictionPolicy, FreeQueue

__all__ = ["Arena", "Entry", "EntryKind", "PrefixIndex"]


class PrefixIndex:
    """Prefix id -> the live entries that answer to it, oldest first (vLLM does not
    de-duplicate: a recomputed block or state is cached again under the same id, and a
    lookup takes the first). Invariant: ``e in index[k]`` iff ``e.live and k in e.keys``."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[int, list[Entry]] = {}

    def find(self, key: int) -> Entry | None:
        found = self.entries.get(key)
        return found[0] if found else None

    def __contains__(self, key: int) -> bool:
        return key in self.entries

    def add(self, entry: Entry, key: int) -> None:
        if key in entry.keys:
            return
        entry.keys.append(key)
        self.entries.setdefault(key, []).append(entry)

    def drop(self, entry: Entry) -> None:
        for key in entry.keys:
            found = self.entries[key]
            found.remove(entry)
            if not found:
                del self.entries[key]
        entry.keys.clear()

    def __len__(self) -> int:
        return len(self.entries)


EvictHook = Callable[[Entry, float, EntryKind], None]


class Arena:
    """A byte budget.

    Invariants: ``used`` is the sum of ``nbytes`` over the live entries charged here; the
    policy holds exactly the charged entries that are cached and not held; ``used <=
    capacity`` unless held entries alone exceed it (each such allocation is counted in
    ``overcommits``: a real engine would have made the request wait).
    """

    __slots__ = ("capacity", "charged", "name", "on_evict", "overcommits", "peak", "policy", "used")

    def __init__(self, name: str, capacity: float, policy: EvictionPolicy, on_evict: EvictHook) -> None:
        self.name = name
        self.capacity = capacity
        self.policy = policy
        self.on_evict = on_evict
        self.used = 0
        self.peak = 0
        self.overcommits = 0
        self.charged: set[Entry] = set()

    def allocate(self, entry: Entry, now: float, cause: EntryKind) -> None:
        """Charge ``entry``, evicting victims first until it fits (with a ``FreeQueue``: take
        the queue's head page, evicting it if it is a cached entry, as vLLM's block pool does)."""
        if isinstance(self.policy, FreeQueue):
            self._take_pages(self.policy, entry, now, cause)
            self._charge(entry)
            return
        need = self.used + entry.nbytes - self.capacity
        while need > 0:
            victim = self.policy.victim()
            if victim is None:
                self.overcommits += 1
                break
            self.evict(victim, now, cause)
            need -= victim.nbytes
        self._charge(entry)

    def _take_pages(self, queue: FreeQueue, entry: Entry, now: float, cause: EntryKind) -> None:
        """Take ``entry``'s pages from the queue's head, evicting the cached entry a taken page
        belongs to (its other pages stay free where they stand)."""
        for _ in range(queue.pages(entry.nbytes)):
            head = queue.take()
            if head is None:
                self.overcommits += 1
                return
            if head.entry is not None:
                self.evict(head.entry, now, cause)

    def _charge(self, entry: Entry) -> None:
        self.used += entry.nbytes
        self.peak = max(self.peak, self.used)
        self.charged.add(entry)

    def evict(self, entry: Entry, now: float, cause: EntryKind) -> None:
        self.policy.discard(entry)
        entry.evicted_at = now
        self.on_evict(entry, now, cause)
        self.free(entry)

    def free(self, entry: Entry) -> None:
        self.charged.remove(entry)
        self.used -= entry.nbytes
        entry.live = False

    def hold(self, entry: Entry, now: float) -> None:
        if entry.refs == 0:
            self.policy.touch(entry, now)
        entry.refs += 1

    def release(self, entry: Entry, now: float) -> None:
        """Drop one hold; an unheld entry becomes evictable if cached, else is freed."""
        self.release_together([entry], now)

    def release_together(self, entries: Sequence[Entry], now: float) -> None:
        """Drop one hold on each of ``entries`` (one kind, in vLLM's order), freed in one go:
        the cached ones become evictable group by group (``FreeQueue.release_group_major``)."""
        cached = []
        for entry in entries:
            entry.refs -= 1
            if entry.refs:
                continue
            if entry.keys:
                cached.append(entry)
                continue
            self.free(entry)
            if isinstance(self.policy, FreeQueue):
                self.policy.free_page(self.policy.pages(entry.nbytes))
        if isinstance(self.policy, FreeQueue):
            self.policy.release_group_major(cached, now)
        else:
            for entry in cached:
                self.policy.release(entry, now)

    def uncache(self, entry: Entry) -> None:
        """An unheld entry lost its keys (vLLM ``evict_blocks`` on a free block): freed where it
        stands in the queue."""
        self.policy.discard(entry)
        self.free(entry)
