# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""The plugin's kept states against vLLM's block pool: recording, holding and releasing them.

Where it sits: the engine end, under ``retention`` and ``cache_blocks`` (which both call it): the
one writer of ``ledger``, against vLLM's block pool (un-keying through ``pool_keys``, counting into
``counters``).

``KeptStates`` is the one writer of the ledger (``boundary_vllm.ledger``): it records a state
vLLM keyed for a request, holds the latest decode states tentatively, releases (un-keys) a
request's own block and never another block under the same key, and follows the pool: a block
vLLM un-keys is pruned from the ledger, a copy-on-write move re-points its holders, and
``reset_prefix_cache`` empties the ledger. Every event costs O(1), however many states are held.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # wraps non-public BlockPool methods

import functools
from collections.abc import Callable
from typing import Any

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import BlockHashWithGroupId, KVCacheBlock
from vllm.v1.request import Request

from boundary.checkpoints.kinds import CheckpointKind
from boundary_vllm.counters import CheckpointCounters
from boundary_vllm.ledger import HeldState, Holder, Ledger, MambaGroup, RequestCheckpoints
from boundary_vllm.pool_keys import unkey


class KeptStates:
    """The ledger of one engine's kept states, kept in step with its block pool.

    ``first_group_id``: a checkpoint counts once, on this Mamba group; ``decode_depth``: how
    many recent decode boundaries a request holds while it decodes."""

    def __init__(
        self,
        pool: BlockPool,
        counters: CheckpointCounters,
        *,
        ledger_capacity: int,
        first_group_id: int,
        decode_depth: int,
    ) -> None:
        self.pool = pool
        self.counters = counters
        self.ledger = Ledger(ledger_capacity)
        self.first_group_id = first_group_id
        self.decode_depth = decode_depth
        self._moving = False
        self._follow_pool()

    def _follow_pool(self) -> None:
        """Keep the ledger in step with the block pool: un-keyed blocks, copy-on-write moves,
        and prefix-cache resets."""
        remove = self.pool._remove_cached_block_hashes
        self.pool._remove_cached_block_hashes = functools.partial(self._removed, remove)
        move = self.pool.move_block_hashes
        self.pool.move_block_hashes = functools.partial(self._moved, move)
        reset = self.pool.reset_prefix_cache
        self.pool.reset_prefix_cache = functools.partial(self._reset, reset)

    # -- recording, holding, releasing -----------------------------------------------------------
    def record(
        self,
        group: MambaGroup,
        block: KVCacheBlock,
        key: BlockHashWithGroupId,
        kinds: tuple[CheckpointKind, ...],
    ) -> Holder:
        """Attribute the state ``block`` keeps under ``key`` to ``kinds`` and count its bytes; the
        checkpoint itself counts once, on the first Mamba group."""
        holder = self.ledger.remember(key, block.block_id, kinds, group.state_bytes, counted=True)
        self.counters.record_created(
            holder.kind, group.state_bytes, new_checkpoint=group.group_id == self.first_group_id
        )
        return holder

    def keep_prefill(
        self,
        group: MambaGroup,
        block: KVCacheBlock,
        key: BlockHashWithGroupId,
        position: int,
        plan: RequestCheckpoints,
        kinds: tuple[CheckpointKind, ...] | None = None,
    ) -> HeldState:
        holder = self.record(group, block, key, kinds or plan.kinds_at(position))
        held = HeldState(group, key, holder)
        plan.prefill_states.setdefault(position, []).append(held)
        return held

    def hold_decode_state(self, plan: RequestCheckpoints, position: int, held: HeldState) -> None:
        plan.decode_states.setdefault(position, []).append(held)
        plan.decode_states.move_to_end(position)
        while len(plan.decode_states) > self.decode_depth:
            _, oldest = plan.decode_states.popitem(last=False)
            self.release(oldest)

    def release(self, held: list[HeldState]) -> None:
        """Un-key each state's own block (never another block under the same key)."""
        for state in held:
            block = state.current()
            if block is not None:
                self.pool.evict_blocks({block.block_id})  # prunes the ledger through _removed
            self.ledger.drop(state.key, state.holder.block_id)

    def unkey(self, block: KVCacheBlock, key: BlockHashWithGroupId, request: Request) -> None:
        """Un-key ``key`` on ``block`` as vLLM un-keys an evicted block (``pool_keys.unkey``)."""
        for removed in (key, *unkey(self.pool, block, key, request)):
            self.ledger.drop(removed, block.block_id)

    # -- following the pool ----------------------------------------------------------------------
    def _removed(
        self, remove: Callable[[KVCacheBlock], list[BlockHashWithGroupId]], block: KVCacheBlock
    ) -> Any:
        """vLLM un-keyed ``block`` (eviction, reuse, an explicit evict): it holds none of the
        removed keys' states any more."""
        removed = remove(block)
        if not self._moving:  # else re-pointed to a copy (``_moved``), not evicted
            for key in removed:
                self.ledger.drop(key, block.block_id)
        return removed

    def _moved(
        self, move: Callable[[KVCacheBlock, KVCacheBlock], None], src: KVCacheBlock, dst: KVCacheBlock
    ) -> None:
        """A copy-on-write re-pointed ``src``'s keys to ``dst``: so do their holders."""
        keys = [src.block_hash, *self.pool.cached_block_hashes_by_block.get(src.block_id, ())]
        self._moving = True
        try:
            move(src, dst)
        finally:
            self._moving = False
        for key in keys:
            if key is not None:
                self.ledger.moved(key, src.block_id, dst.block_id)

    def _reset(self, reset: Callable[[], bool]) -> bool:
        """vLLM's ``reset_prefix_cache`` empties the hash table: the ledger goes with it."""
        done = reset()
        if done:
            self.ledger.clear()
        return done
