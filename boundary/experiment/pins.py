"""Session pins: states a policy keeps until the session's next user turn.

Where it sits: between the experiment's drivers (``replay``, ``serving``) and the cache
model: a ``Keep`` with ``until_next_user_turn`` (``boundary.checkpoints.retention.SessionVariant``)
outlives its request, which only a driver that follows sessions can execute.

The state is pinned in the cache that created it (``HybridPrefixCache.pin``: held, never
evicted) when its request is admitted, and unpinned when the session's next user-ended
request has been admitted (after its lookup, so the pinned state can serve it) or when the
session's last request finishes. Invariant: a session holds pins only from its latest
user-ended request.
"""

from __future__ import annotations

from collections.abc import Sequence

from boundary.cache.hybrid import HybridPrefixCache
from boundary.cache.memory import Entry
from boundary.checkpoints.retention import Decision
from boundary.experiment.stream import Continuation, StreamRequest


class SessionPins:
    __slots__ = ("held", "pinned")

    def __init__(self) -> None:
        self.held: dict[str, list[tuple[HybridPrefixCache, Entry]]] = {}
        self.pinned = 0  # states pinned over the replay

    def admitted(
        self,
        cache: HybridPrefixCache,
        request: StreamRequest,
        decision: Decision,
        created: Sequence[Entry],
        now: float,
    ) -> None:
        """``request`` was admitted to ``cache`` under ``decision`` and created ``created``."""
        if request.continuation is not Continuation.TOOL:
            self.release(request.session, now)
        wanted = {k.position for k in decision.keeps if k.until_next_user_turn}
        for state in created:
            if state.position in wanted and state.live:
                cache.pin(state, now)
                self.held.setdefault(request.session, []).append((cache, state))
                self.pinned += 1

    def release(self, session: str, now: float) -> None:
        for cache, state in self.held.pop(session, []):
            cache.unpin(state, now)
