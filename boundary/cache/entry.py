"""One cache allocation: an attention block, a retained recurrent state or a running state.

Where it sits: the bottom of the cache model — ``eviction`` (which entry goes), ``memory``
(the index that finds entries and the byte budgets) and the managers above take ``Entry``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class EntryKind(IntEnum):
    BLOCK = 0  # attention KV of one block of ``block_size`` tokens
    STATE = 1  # a retained recurrent state at a unit boundary
    SCRATCH = 2  # the running recurrent state of an in-flight request (never cached)


@dataclass(slots=True, eq=False)
class Entry:
    """One allocation. ``position``: the prefix length it represents (a block's end, a state's
    position); a state at ``position`` stands for exactly ``tokens[:position]`` and is only
    ever found through the prefix id of that prefix."""

    eid: int
    kind: EntryKind
    nbytes: int
    position: int
    creator: int
    created_at: float
    keys: list[int] = field(default_factory=list)
    refs: int = 0
    labels: tuple[str, ...] = ()
    hits: int = 0
    evicted_at: float | None = None
    live: bool = True
