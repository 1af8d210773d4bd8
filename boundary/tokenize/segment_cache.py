"""The ids of long plain segments, kept across requests by their exact text.

Where it sits: below the tokenizer, inside ``encoding.SegmentEncoder``, which asks it before
encoding a plain segment (the text between two added tokens); it imports nothing of the package.

The conversations of one deployment repeat long segments: one system prompt (a policy of
thousands of characters) opens every conversation, one tool block every request. A plain
segment encodes on its own, whatever lies around it (``boundary.tokenize.segments``), so its ids are a
function of its text alone and may be kept by that text: ``str`` equality is exact (code points,
no ``1 == 1.0``), and the ids kept are the encoder's own for that string. Every request gains,
a session's first one and cold renders alike.

Admission: a segment is kept only the second time it is seen (the hash of each segment seen
once is remembered, a bounded number of them), so text seen once (a user's prose, a tool's
result) neither fills the cache nor pushes out the shared segments. Bounded by the characters
and the ids held (at most about 14 MB with the defaults: 2^20 characters, up to 4 bytes each,
and 2^18 ids, an int and a pointer each), least recently used dropped first; one lock makes
it safe to share between threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

MIN_CHARS = 1024  # a shorter segment encodes in a few µs; keeping it would spend the bound on many small ones
MAX_CHARS = 1 << 20  # characters held in all
MAX_IDS = 1 << 18  # ids held in all
MAX_SEEN = 4096  # hashes of segments seen once


class SegmentCache:
    """Ids by exact segment text, for segments of at least ``min_chars`` characters.

    Invariant: ``get(s)`` is None or the ids ``put(s, ids)`` was given for that very string,
    which the caller's encoder produced for it; at most ``max_chars`` characters and
    ``max_ids`` ids are held, and a segment over a sixteenth of either is never kept (no one
    segment takes the cache over).
    """

    __slots__ = (
        "_chars",
        "_held",
        "_ids",
        "_lock",
        "_seen",
        "hits",
        "max_chars",
        "max_ids",
        "max_seen",
        "min_chars",
    )

    def __init__(
        self,
        *,
        min_chars: int = MIN_CHARS,
        max_chars: int = MAX_CHARS,
        max_ids: int = MAX_IDS,
        max_seen: int = MAX_SEEN,
    ) -> None:
        self.min_chars, self.max_chars, self.max_ids, self.max_seen = min_chars, max_chars, max_ids, max_seen
        self.hits = 0
        self._ids: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._chars = self._held = 0  # characters and ids held
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, segment: str) -> tuple[int, ...] | None:
        """The ids kept for exactly ``segment``, or None."""
        with self._lock:
            ids = self._ids.get(segment)
            if ids is not None:
                self._ids.move_to_end(segment)
                self.hits += 1
            return ids

    def put(self, segment: str, ids: Sequence[int]) -> None:
        """Offer ``segment``'s ids (its encoding): kept if the segment was seen before."""
        if len(segment) > self.max_chars // 16 or len(ids) > self.max_ids // 16:
            return
        key = hash(segment)
        with self._lock:
            if key not in self._seen:
                self._seen[key] = None
                if len(self._seen) > self.max_seen:
                    self._seen.popitem(last=False)
                return
            del self._seen[key]
            if segment in self._ids:
                return
            self._ids[segment] = tuple(ids)
            self._chars += len(segment)
            self._held += len(ids)
            while self._chars > self.max_chars or self._held > self.max_ids:
                dropped, dropped_ids = self._ids.popitem(last=False)
                self._chars -= len(dropped)
                self._held -= len(dropped_ids)
