"""The recurrent-state store: states that exist only where retained, one per unit boundary.

Where it sits: in the cache model, above ``entry`` / ``memory``; ``lookup`` and ``hybrid`` read
it.

A recurrent state is a fixed-size summary of a whole prefix; it cannot be trimmed or
extended without recomputation, so a hit needs a state at exactly the resume position.
vLLM align mode with ``prefix_cache_retention_interval=0`` keeps a state only at the
positions its reachable-block mask marks (the prompt's replay boundary, shared-prefix
junctions) and recycles every other state a request passes through.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from boundary.cache.accounting import CacheGeometry
from boundary.cache.memory import Entry, PrefixIndex


@dataclass(frozen=True, slots=True)
class RecurrentMatch:
    """``recurrent``: the deepest state matching the prompt at all; ``joint``: the deepest one
    at or below the attention match (``state`` serves it; None when ``joint == 0``)."""

    recurrent: int
    joint: int
    state: Entry | None


class RecurrentStates:
    """Retained states by prefix id.

    Invariant: a state at ``position`` (a positive multiple of ``unit``) has exactly one key,
    the prefix id of ``tokens[:position]``: it represents exactly that prefix and is never
    reused beyond it.
    """

    __slots__ = ("geometry", "index")

    def __init__(self, geometry: CacheGeometry) -> None:
        self.geometry = geometry
        self.index = PrefixIndex()

    def match(self, prefix: Sequence[int], limit: int, attention: int) -> RecurrentMatch:
        """``MambaManager.find_longest_cache_hit``: scan unit boundaries right to left for the
        latest cached state, bounded by the attention match (``max_length``); the unbounded
        scan above it gives the per-group recurrent match."""
        unit = self.geometry.unit
        found = self.index.entries
        top = min(limit // unit, len(prefix))
        bound = attention // unit
        recurrent = 0
        for fine in range(top - 1, bound - 1, -1):
            if prefix[fine] in found:
                recurrent = (fine + 1) * unit
                break
        for fine in range(min(bound, top) - 1, -1, -1):
            hit = found.get(prefix[fine])
            if hit:
                joint = (fine + 1) * unit
                return RecurrentMatch(max(recurrent, joint), joint, hit[0])
        return RecurrentMatch(recurrent, 0, None)

    def cache(self, state: Entry, prefix: Sequence[int]) -> None:
        self.index.add(state, prefix[state.position // self.geometry.unit - 1])

    def drop(self, state: Entry) -> None:
        self.index.drop(state)
