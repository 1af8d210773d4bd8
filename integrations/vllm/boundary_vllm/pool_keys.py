# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""Un-keying a block in vLLM's block pool the way the pool itself does it.

Where it sits: the engine end, at the bottom of the plugin's bookkeeping: ``kept_states`` un-keys
blocks through it; it imports only ``pin`` and vLLM.

vLLM's ``BlockPool`` removes a key from its hash table together with the block's own hash
(``block_hash``) or alias entry (``cached_block_hashes_by_block``) and emits a ``BlockRemoved``
KV event for it (``_maybe_evict_cached_block``). When the plugin drops a key vLLM stored (a
sub-block prompt tail its policy does not keep), it must do all three, or KV-aware routers keep
a phantom entry and the block keeps a hash nothing finds.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # edits the non-public BlockPool tables

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import (
    BlockHashWithGroupId,
    KVCacheBlock,
    get_group_id,
    make_block_hash_with_group_id,
)
from vllm.v1.request import Request


def unkey(
    pool: BlockPool, block: KVCacheBlock, key: BlockHashWithGroupId, request: Request
) -> list[BlockHashWithGroupId]:
    """Un-key ``key`` on ``block``; return the other keys that left it. Where ``key`` was the
    block's own hash, the deepest alias on it that names a prefix of ``request`` (the block's
    writer) takes its place with that prefix's length, as if it had been stored first; aliases
    that do not are un-keyed too (a block with aliases but no own hash would count as writable
    and be freed as uncached). Every key that leaves the table goes out as ``BlockRemoved``."""
    table = pool.cached_block_hash_to_block
    removed = [key] if table.pop(key, block.block_id) is not None else []
    aliases = pool.cached_block_hashes_by_block.pop(block.block_id, set())
    aliases.discard(key)
    dropped: list[BlockHashWithGroupId] = []
    if block.block_hash == key:
        block.reset_hash()
        promoted = deepest_prefix(request, aliases, get_group_id(key), pool.hash_block_size)
        if promoted is not None:
            aliases.discard(promoted[0])
            block.set_block_hash(promoted[0], num_tokens=promoted[1])
        else:
            for alias in aliases:
                if table.pop(alias, block.block_id) is not None:
                    removed.append(alias)
                dropped.append(alias)
            aliases = set()
    if aliases:
        pool.cached_block_hashes_by_block[block.block_id] = aliases
    pool._emit_block_removed_events(removed)
    return dropped


def deepest_prefix(
    request: Request, keys: set[BlockHashWithGroupId], group_id: int, hash_block_size: int
) -> tuple[BlockHashWithGroupId, int] | None:
    """The deepest of ``keys`` that names a prefix of ``request``, and that prefix's length."""
    for index in range(len(request.block_hashes) - 1, -1, -1):
        if not keys:
            return None
        key = make_block_hash_with_group_id(request.block_hashes[index], group_id)
        if key in keys:
            return key, (index + 1) * hash_block_size
    return None
