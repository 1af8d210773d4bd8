"""JSON kept for values held unchanged across requests (a tool list's template form):
``tojson`` of them computed once and replayed, checks included.

Where it sits: inside the render stage's sandbox: the ``tojson`` filter (``filters``) reads
the memo of the render in progress (``ACTIVE_KEPT_JSON``); ``boundary.session.kept_tools``
makes one per kept tool list, and the sessions holding that list set it while they render.

Invariants: a memo answers only for the exact objects it was made over (identity, kept alive
by the memo), never for an equal copy or any other value; nothing changes those objects
while the memo lives (they are private copies, and templates cannot change a value: the
immutable sandbox). A replayed call charges the render's checks exactly as the first call
did. Renders on several threads may share a memo: a result is stored once, under a lock.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import Any

Options = tuple[bool, int | None, Any, bool]  # ensure_ascii, indent, separators, sort_keys
Checks = tuple[tuple[str, int, int, int], ...]  # the ``check`` calls the first call made


class KeptJson:
    """``tojson`` results over the containers reachable from ``roots``, by object identity
    and options; ``nbytes`` counts the texts kept; ``hits`` the replays (renders at once may
    lose a count, never a result)."""

    __slots__ = ("_held", "_lock", "_results", "hits", "nbytes")

    def __init__(self, roots: object) -> None:
        self._held: dict[int, object] = {}
        self._hold(roots)
        self._results: dict[tuple[int, Options], tuple[Checks, str]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.nbytes = 64 * len(self._held)

    def _hold(self, value: object) -> None:
        if isinstance(value, dict):
            self._held[id(value)] = value
            for v in value.values():
                self._hold(v)
        elif isinstance(value, list):
            self._held[id(value)] = value
            for v in value:
                self._hold(v)

    def holds(self, value: object) -> bool:
        return self._held.get(id(value)) is value

    def get(self, value: object, options: Options) -> tuple[Checks, str] | None:
        if not self.holds(value):
            return None
        found = self._results.get((id(value), options))
        if found is not None:
            self.hits += 1
        return found

    def put(self, value: object, options: Options, checks: Checks, result: str) -> None:
        if not self.holds(value):
            return
        with self._lock:
            if (id(value), options) not in self._results:
                self._results[(id(value), options)] = (checks, result)
                self.nbytes += len(result) + 128  # the text (ASCII: a byte a character), its entry


ACTIVE_KEPT_JSON: ContextVar[KeptJson | None] = ContextVar("boundary_kept_json", default=None)
"""The memo of the render in progress on this thread (None: every ``tojson`` computes)."""
