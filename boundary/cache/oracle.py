"""The upper bound: infinite capacity and a state at every unit boundary ever computed.

Where it sits: beside ``hybrid``: the bound the experiment compares the cache with.

A request resumes at the deepest unit boundary of its prompt (never the last token) whose
prefix some earlier request computed, prompt or output. Used as the denominator of
"reused tokens over reusable tokens".
"""

from __future__ import annotations

from boundary.cache.request import CacheRequest


class OracleCache:
    """Invariant: ``seen`` is prefix-closed along every hashed sequence (adding a prefix id
    adds all ids before it), so the deepest match is found by bisection."""

    __slots__ = ("_pending", "seen", "unit")

    def __init__(self, unit: int) -> None:
        self.unit = unit
        self.seen: set[int] = set()
        self._pending: dict[int, CacheRequest] = {}

    def admit(self, request: CacheRequest, now: float = 0.0) -> int:
        """The reusable prefix length of ``request``; then its prompt becomes reusable."""
        prefix, seen = request.prefix, self.seen
        top = min((request.num_prompt_tokens - 1) // self.unit, len(prefix))
        lo, hi = 0, top  # invariant: prefix[:lo] are all seen; the match is at most hi units
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if prefix[mid - 1] in seen:
                lo = mid
            else:
                hi = mid - 1
        seen.update(prefix[: request.num_prompt_tokens // self.unit])
        self._pending[request.rid] = request
        return lo * self.unit

    def finish(self, rid: int, now: float = 0.0) -> None:
        request = self._pending.pop(rid)
        self.seen.update(
            request.prefix[: min(request.num_tokens - 1, len(request.prefix) * self.unit) // self.unit]
        )

    def check_invariants(self) -> None:
        assert all(k > 0 for k in self.seen), "prefix ids start at 1"
        assert all(r.rid == rid for rid, r in self._pending.items()), "in-flight table out of step"
