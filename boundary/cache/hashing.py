"""Chained prefix ids: the model's stand-in for vLLM's chained block hashes.

vLLM hashes a request's tokens every ``hash_block_size`` tokens (``prefix_match_unit``), each
hash over its parent and the unit's tokens (``kv_cache_utils.hash_block_tokens``), so one hash
names a whole prefix; coarser blocks reuse the hash at their last unit. Here an intern table
plays the hash function, exactly: ``(parent id, unit tokens) -> id``, so two sequences share
the id at a unit boundary iff they share every token before it. No collisions, small ints,
dict lookups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NewType

from boundary.prefixes import common_prefix_length

PrefixId = NewType("PrefixId", int)

EMPTY = PrefixId(0)


class PrefixHasher:
    """Interns chained prefixes at one unit.

    Invariant: for ids ``h.prefix_ids(t)``, ``ids[i]`` names exactly ``t[:(i + 1) * unit]``;
    for any two sequences ``a`` and ``b`` hashed by the same hasher, ``ids_a[i] == ids_b[i]``
    iff ``a[:(i + 1) * unit] == b[:(i + 1) * unit]``. Ids are never reused.
    """

    __slots__ = ("_table", "unit")

    def __init__(self, unit: int) -> None:
        if unit < 1:
            raise ValueError(f"prefix_match_unit must be >= 1, got {unit}")
        self.unit = unit
        self._table: dict[tuple[int, object], PrefixId] = {}

    def __len__(self) -> int:
        return len(self._table)

    def prefix_ids(self, tokens: Sequence[int], *, reuse: PrefixReuse | None = None) -> list[PrefixId]:
        """The id of every whole-unit prefix of ``tokens`` (a trailing partial unit has none).

        ``reuse`` names an earlier sequence and its ids: the shared leading units are taken
        from it instead of being hashed again (a session's requests share most of their prefix).
        """
        unit = self.unit
        ids: list[PrefixId] = []
        start = 0
        if reuse is not None:
            shared = common_prefix_length(tokens, reuse.tokens) // unit
            shared = min(shared, len(reuse.ids))
            ids = list(reuse.ids[:shared])
            start = shared * unit
        table = self._table
        parent = ids[-1] if ids else EMPTY
        end = len(tokens) - unit + 1
        if unit == 1:
            for pos in range(start, len(tokens)):
                key: tuple[int, object] = (parent, tokens[pos])
                parent = table.get(key)  # type: ignore[assignment]
                if parent is None:
                    parent = table[key] = PrefixId(len(table) + 1)
                ids.append(parent)
            return ids
        for pos in range(start, end, unit):
            key = (parent, tuple(tokens[pos : pos + unit]))
            parent = table.get(key)  # type: ignore[assignment]
            if parent is None:
                parent = table[key] = PrefixId(len(table) + 1)
            ids.append(parent)
        return ids


class PrefixReuse:
    """An earlier token sequence and its prefix ids, offered to ``PrefixHasher.prefix_ids``."""

    __slots__ = ("ids", "tokens")

    def __init__(self, tokens: Sequence[int], ids: Sequence[PrefixId]) -> None:
        self.tokens = tokens
        self.ids = ids
