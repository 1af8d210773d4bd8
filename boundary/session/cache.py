"""Sessions kept by id for a frontend: at most ``capacity`` of them, holding at most
``max_bytes`` together (``Session.nbytes``), the least recently used dropped first.

Where it sits: beside ``boundary.session.session``, whose sessions it keeps; the ``Family``
facade offers it (``Family.sessions``).

Threads: the table is guarded by one lock that is never held while a session renders; a
cache may be shared by a frontend's threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from boundary.renderer import Renderer
from boundary.session.session import Session
from boundary.tokenize.rendering import Rendering

DEFAULT_MAX_BYTES = 256 * 1024 * 1024  # a ``SessionCache``'s default bound on the bytes its sessions hold


@dataclass(frozen=True, slots=True)
class SessionCacheStats:
    """A ``SessionCache`` at one moment: the sessions kept, the bytes they hold (each as of
    its last render), its bounds and the sessions evicted so far."""

    sessions: int
    bytes: int
    max_bytes: int
    capacity: int
    evictions: int


@dataclass(slots=True)
class _Kept:
    """A session in a ``SessionCache`` and the bytes the cache counts for it."""

    session: Session
    counted: int


class SessionCache:
    """Sessions by id, the least recently used dropped first once more than ``capacity``
    are kept or they hold more than ``max_bytes`` (default 256 MiB). A session holding more
    than ``max_bytes`` on its own is served but not kept: its next request starts a new one.

    Invariant (between operations): ``stats.bytes`` is the sum of the kept sessions'
    ``nbytes`` as of their last render or ``get`` and is at most ``max_bytes``, and at most
    ``capacity`` sessions are kept. A render in flight is not bounded until it ends.

    Threads: every operation is atomic under one lock, which is never held while a session
    renders: ``render`` takes the session out under it, renders under the session's own
    lock, then counts its bytes under it again. A session dropped or evicted while a render
    of it is in flight is not put back; that render finishes on its own object.
    """

    def __init__(self, family: Renderer, capacity: int = 1024, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.family = family
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.evictions = 0
        self._sessions: OrderedDict[str, _Kept] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, session_id: str) -> Session:
        """The session for ``session_id``, created when new; marks it most recently used and
        counts its bytes again (a session rendered directly is counted here)."""
        with self._lock:
            kept = self._sessions.get(session_id)
            if kept is None:
                session = Session(self.family)
                kept = self._sessions[session_id] = _Kept(session, session.nbytes)
                self._bytes += kept.counted
            else:
                self._sessions.move_to_end(session_id)
            self._settle(session_id, kept)
            return kept.session

    def render(self, session_id: str, messages: Sequence[Any], *args: Any, **kwargs: Any) -> Rendering:
        """``Session.render`` of ``session_id``'s session (``get``), then its bytes counted and
        the least recently used sessions evicted past the bounds."""
        session = self.get(session_id)
        try:
            return session.render(messages, *args, **kwargs)
        finally:
            with self._lock:
                kept = self._sessions.get(session_id)
                if kept is not None and kept.session is session:
                    self._settle(session_id, kept)

    def drop(self, session_id: str) -> bool:
        """Forget a session (e.g. when the conversation ends); True if it was cached."""
        with self._lock:
            kept = self._sessions.pop(session_id, None)
            if kept is None:
                return False
            self._bytes -= kept.counted
            return True

    def clear(self) -> None:
        with self._lock:
            self._sessions.clear()
            self._bytes = 0

    @property
    def stats(self) -> SessionCacheStats:
        with self._lock:
            return SessionCacheStats(
                len(self._sessions), self._bytes, self.max_bytes, self.capacity, self.evictions
            )

    def ids(self) -> list[str]:
        """The ids of the sessions kept, least recently used first."""
        with self._lock:
            return list(self._sessions)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._sessions

    def _settle(self, session_id: str, kept: _Kept) -> None:
        """Count ``kept`` again (its ``nbytes``, set by its last render under its own lock),
        drop it if it alone is past ``max_bytes``, then evict the least recently used past
        the bounds. Under the cache's lock."""
        counted = kept.session.nbytes
        self._bytes += counted - kept.counted
        kept.counted = counted
        sessions = self._sessions
        if counted > self.max_bytes:
            del sessions[session_id]
            self._bytes -= counted
            self.evictions += 1
        # ends: each pass drops one session, and with none left both bounds hold
        while len(sessions) > self.capacity or self._bytes > self.max_bytes:
            _, oldest = sessions.popitem(last=False)
            self._bytes -= oldest.counted
            self.evictions += 1
