"""The equal checkpoint-byte budget inside vLLM's one block pool.

Where it sits: in the cache model, beside ``memory`` and under ``hybrid`` / ``engine_steps``:
``HybridPrefixCache`` asks it before a state is kept, and tells it when a kept state is held,
let go, or gone.

The plan's budget: every variant admits at most the same recurrent-state bytes ``capacity``,
and nothing else changes: blocks and running states keep the whole pool the equal-capacity run
has. A state to be kept is *admitted* when it fits beside the admitted ones; otherwise the
admitted states no request holds are evicted, least recently let go first, until it fits; when
the held ones alone leave no room it is refused (the caller does not keep it and counts the
refusal under its kind). A decode boundary the request holds only tentatively (the plugin's
hold until finish decides) is admitted when finish keeps it.

Invariants: ``used`` is the sum of ``nbytes`` over the admitted states, each live and keyed;
``unheld`` is exactly the admitted states with no holder, in the order they were let go;
``exceedances`` counts admissions that left ``used`` above ``capacity`` (0 by the rule above,
counted rather than assumed).
"""

from __future__ import annotations

from collections import OrderedDict

from boundary.cache.entry import Entry


class StateBudget:
    """Admitted recurrent-state bytes under a cap (see the module docstring)."""

    __slots__ = ("_admitted", "capacity", "exceedances", "peak", "unheld", "used")

    def __init__(self, capacity: float) -> None:
        if not capacity > 0:
            raise ValueError(f"a checkpoint budget must be positive bytes, got {capacity}")
        self.capacity = capacity
        self.used = 0
        self.peak = 0
        self.exceedances = 0
        self._admitted: set[int] = set()
        self.unheld: OrderedDict[Entry, None] = OrderedDict()

    def __contains__(self, entry: Entry) -> bool:
        return entry.eid in self._admitted

    def fits(self, nbytes: int) -> bool:
        return self.used + nbytes <= self.capacity

    def victim(self) -> Entry | None:
        """The admitted state let go longest ago that no request holds (None: all are held)."""
        return next(iter(self.unheld), None)

    def admit(self, entry: Entry) -> None:
        """``entry`` is kept from now on (the caller checked ``fits`` or evicted to make room)."""
        self._admitted.add(entry.eid)
        self.used += entry.nbytes
        self.peak = max(self.peak, self.used)
        if self.used > self.capacity:
            self.exceedances += 1
        if entry.refs == 0:
            self.unheld[entry] = None

    def held(self, entry: Entry) -> None:
        self.unheld.pop(entry, None)

    def released(self, entry: Entry) -> None:
        """``entry`` lost its last holder: evictable from the budget when admitted and keyed."""
        if entry.eid in self._admitted and entry.refs == 0 and entry.keys:
            self.unheld[entry] = None

    def forget(self, entry: Entry) -> None:
        """``entry`` is no longer kept (un-keyed, evicted or freed)."""
        if entry.eid in self._admitted:
            self._admitted.discard(entry.eid)
            self.used -= entry.nbytes
            self.unheld.pop(entry, None)
