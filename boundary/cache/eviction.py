"""Which cached entry goes when memory is needed: a small protocol and vLLM's LRU.

Where it sits: in the cache model, above ``entry``; ``memory`` evicts through it.

An entry is *evictable* while it is cached (findable by some prefix id) and no in-flight
request holds it. The policy sees entries become evictable (``release``), stop being
evictable (``touch``: a request holds it again) and leave (``discard``), and names the
next ``victim``. A FLOP-aware policy in the style of Marconi (weigh recomputation cost
against bytes freed) implements the same four methods.
"""

from __future__ import annotations

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
