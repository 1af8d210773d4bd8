"""The attention block pool: KV in blocks of ``block_size`` tokens, found by chained prefix id.

Where it sits: in the cache model, above ``entry`` / ``memory`` / ``hashing`` and below
``lookup`` and ``hybrid``.

Full attention is dense: every block a request computes is cached under the prefix id at its
end. In fine-grained mode (``unit < block_size``) a block can also answer to *aliases*, prefix
ids at unit boundaries inside it (vLLM ``BlockPool.cache_partial_block``: the prompt tail, and
any sub-block checkpoint a policy registers), because a block's KV covers every prefix of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from boundary.cache.accounting import CacheGeometry
from boundary.cache.memory import Entry, PrefixIndex


@dataclass(frozen=True, slots=True)
class AttentionMatch:
    """How far full attention matches a prompt, and the blocks that hold it (in order)."""

    length: int
    blocks: list[Entry]


class AttentionBlocks:
    """Attention blocks by prefix id.

    Invariants: a block's full key is the prefix id at its end ``(i + 1) * block_size``;
    each alias is the prefix id at a unit boundary strictly inside the block; so any key
    found names a prefix this block's KV (with the blocks before it) fully covers.
    """

    __slots__ = ("geometry", "index")

    def __init__(self, geometry: CacheGeometry) -> None:
        self.geometry = geometry
        self.index = PrefixIndex()

    def match(self, prefix: Sequence[int], limit: int) -> AttentionMatch:
        """``FullAttentionManager.find_longest_cache_hit``: the longest run of cached blocks
        from the start (a miss ends it: hashes chain), then, fine-grained, the deepest alias
        inside the next block, probed high to low; never past ``limit`` tokens."""
        g = self.geometry
        unit, per_block = g.unit, g.units_per_block
        found = self.index.entries
        blocks: list[Entry] = []
        count, whole = 0, limit // g.block_size
        while count < whole:
            hit = found.get(prefix[(count + 1) * per_block - 1])
            if not hit:
                break
            blocks.append(hit[0])
            count += 1
        length = count * g.block_size
        if per_block > 1:
            first = count * per_block
            last = min(first + per_block - 1, limit // unit, len(prefix))
            for fine in range(last - 1, first - 1, -1):
                hit = found.get(prefix[fine])
                if hit:
                    blocks.append(hit[0])
                    length = (fine + 1) * unit
                    break
        return AttentionMatch(length, blocks)

    def cache_full(self, block: Entry, prefix: Sequence[int]) -> None:
        """Cache ``block`` under the prefix id at its end."""
        self.index.add(block, prefix[block.position // self.geometry.unit - 1])

    def cache_alias(self, block: Entry, position: int, prefix: Sequence[int]) -> None:
        """Let ``block`` answer for the prefix ending at ``position`` inside it."""
        self.index.add(block, prefix[position // self.geometry.unit - 1])

    def drop(self, block: Entry) -> None:
        self.index.drop(block)
