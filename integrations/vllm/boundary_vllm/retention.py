"""Which recurrent states vLLM keeps, extended by boundary's checkpoints.

At ``prefix_cache_retention_interval=0`` each Mamba manager hashes (keeps) only the state
blocks at the ``replay_boundaries`` the coordinator passes (P_end) and at the request's
``shared_prefix_boundary`` (a reactive junction); every other state block is recycled.
``CheckpointRetention`` wraps each Mamba manager's ``cache_blocks`` to pass two more
boundaries for requests that carry checkpoints:

- the materialized U_end, whose state exists because the scheduler ends a prefill chunk there
  (when hits may land inside blocks, also the unit-aligned U_end: a partial entry on the
  running state block, copied aside by vLLM's copy-on-write, and on the attention block);
- while decoding, the latest block boundary, held tentatively: at finish only the block at the
  aligned D_end is kept and the others are released.

Invariants: a kept state at position ``n`` is the state after exactly ``tokens[0:n]`` and is
reachable only through the chained hash of those tokens, so it is never reused beyond that
prefix; upstream boundaries are always passed through unchanged, so requests without
checkpoints are cached exactly as upstream.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.core.kv_cache_coordinator import KVCacheCoordinator
from vllm.v1.core.kv_cache_utils import (
    BlockHashWithGroupId,
    KVCacheBlock,
    get_group_id,
    make_block_hash_with_group_id,
)
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager, MambaManager
from vllm.v1.kv_cache_interface import KVCacheConfig, get_mamba_prefill_checkpoint_position
from vllm.v1.request import Request

from boundary.checkpoints import CheckpointKind
from boundary_vllm.counters import MISS, UNTRACKED, CheckpointCounters
from boundary_vllm.decode_end import committed_end


@dataclass(frozen=True, slots=True)
class MambaGroup:
    group_id: int
    manager: MambaManager
    state_bytes: int  # one state block across every layer of the group


@dataclass(frozen=True, slots=True)
class HeldState:
    """One kept state block of one Mamba group, and the hash key it was kept under."""

    group: MambaGroup
    block: KVCacheBlock
    key: BlockHashWithGroupId

    def is_held(self) -> bool:
        pool = self.group.manager.block_pool
        return self.block.block_hash == self.key or pool.cached_block_hash_to_block.contain(
            self.key, self.block.block_id
        )

    def release(self) -> None:
        if self.is_held():
            self.group.manager.block_pool.evict_blocks({self.block.block_id})


@dataclass(slots=True)
class RequestCheckpoints:
    """The checkpoints one request carries, as materialized token positions.

    ``input_end`` is the block-aligned U_end state (kept through the reachable-block mask);
    ``input_end_unit`` the ``prefix_match_unit``-aligned one inside the next block, when hits
    can land inside blocks (kept as a partial alias on both groups). None when not kept.
    """

    input_end: int | None
    input_end_unit: int | None
    keep_decode_end: bool
    decode_states: OrderedDict[int, list[HeldState]] = field(default_factory=OrderedDict)  # oldest first

    @property
    def stops(self) -> tuple[int, ...]:
        """Where prefill chunks must end so that these states exist."""
        return tuple(p for p in (self.input_end, self.input_end_unit) if p)

    def holds_decode_states(self, retention_interval: int | None) -> bool:
        """Decode states are held tentatively only under sparse retention (interval 0): with
        periodic or dense retention vLLM keeps its own decode states, which are not ours to drop."""
        return self.keep_decode_end and retention_interval == 0

    def boundaries(
        self, num_tokens: int, num_prompt_tokens: int, block_size: int, retention_interval: int | None
    ) -> tuple[int, ...]:
        extra = [] if self.input_end is None else [self.input_end]
        latest = num_tokens // block_size * block_size
        if self.holds_decode_states(retention_interval) and latest >= num_prompt_tokens and latest > 0:
            extra.append(latest)
        return tuple(extra)


class CheckpointRetention:
    """Installs the boundary-aware ``cache_blocks`` on every caching Mamba manager of a
    coordinator and keeps the ledger that attributes each kept state to its checkpoint kind."""

    def __init__(
        self,
        coordinator: KVCacheCoordinator,
        kv_cache_config: KVCacheConfig,
        counters: CheckpointCounters,
        *,
        use_eagle: bool,
        num_hash_lookahead_tokens: int,
        ledger_capacity: int,
    ) -> None:
        self.groups = tuple(
            MambaGroup(gid, manager, manager.kv_cache_spec.page_size_bytes * len(spec_group.layer_names))
            for gid, (manager, spec_group) in enumerate(
                zip(coordinator.single_type_managers, kv_cache_config.kv_cache_groups, strict=True)
            )
            if isinstance(manager, MambaManager) and manager.enable_caching
        )
        if not self.groups:
            raise ValueError("no caching Mamba group: nothing to retain")
        sizes = {g.manager.block_size for g in self.groups}
        if len(sizes) != 1:
            raise ValueError(f"Mamba groups disagree on block size: {sorted(sizes)}")
        self.block_size = sizes.pop()
        self.hash_block_size = coordinator.block_pool.hash_block_size
        self.hit_unit = self.hash_block_size if coordinator.enable_partial_hash_hits else self.block_size
        self.attention = tuple(
            (gid, manager)
            for gid, manager in enumerate(coordinator.single_type_managers)
            if isinstance(manager, FullAttentionManager) and manager.enable_caching
        )
        self.use_eagle = use_eagle
        self.num_hash_lookahead_tokens = num_hash_lookahead_tokens
        self.decode_depth = 2 + int(use_eagle)  # how many recent decode boundaries stay held
        self.counters = counters
        self.plans: dict[str, RequestCheckpoints] = {}
        self.ledger: OrderedDict[BlockHashWithGroupId, CheckpointKind] = OrderedDict()
        self.ledger_capacity = ledger_capacity
        self._first_group_id = self.groups[0].group_id
        for group in self.groups:
            upstream = group.manager.cache_blocks
            group.manager.cache_blocks = functools.partial(self._cache_blocks, group, upstream)
        if self.hit_unit < self.block_size:
            for gid, manager in self.attention:
                upstream = manager.cache_blocks
                manager.cache_blocks = functools.partial(self._cache_attention_blocks, gid, manager, upstream)

    # -- per request ---------------------------------------------------------------------------
    def materialize_input_end(self, input_end: int) -> int:
        """Where a later request's hit on logical U_end lands: the deepest hit unit at or before
        it (``prefix_match_unit`` when hits may end inside a block, else the block), one unit
        lower with EAGLE, exactly as vLLM places its own prompt checkpoint."""
        return get_mamba_prefill_checkpoint_position(
            input_end + 1,
            self.hit_unit,
            self.use_eagle,
            num_hash_lookahead_tokens=self.num_hash_lookahead_tokens,
        )

    def admit(
        self, request: Request, *, input_end: int | None, keep_decode_end: bool
    ) -> RequestCheckpoints | None:
        unit_position = 0 if input_end is None else self.materialize_input_end(input_end)
        block_position = unit_position // self.block_size * self.block_size
        if not unit_position and not keep_decode_end:
            return None
        plan = RequestCheckpoints(
            block_position or None,
            unit_position if unit_position % self.block_size else None,
            keep_decode_end,
        )
        self.plans[request.request_id] = plan
        return plan

    def plan(self, request_id: str) -> RequestCheckpoints | None:
        return self.plans.get(request_id)

    def finish(self, request: Request, *, completed: bool) -> None:
        """Keep the aligned D_end state of a completed request; release every other held one."""
        plan = self.plans.pop(request.request_id, None)
        if plan is None or not plan.decode_states:
            return
        kept: list[HeldState] = []
        if completed and request.sampling_params is not None:
            end = committed_end(
                request.num_prompt_tokens,
                request.output_token_ids,
                request.sampling_params.all_stop_token_ids,
            )
            target = end // self.block_size * self.block_size - (self.block_size if self.use_eagle else 0)
            kept = plan.decode_states.pop(target, [])
        for held in plan.decode_states.values():
            self._release(held)
        if kept and all(h.is_held() for h in kept):
            for held in kept:
                self.counters.record_created(
                    CheckpointKind.DECODE_END, held.group.state_bytes, new_checkpoint=held is kept[0]
                )
        elif kept:
            self._release(kept)

    # -- lookups -------------------------------------------------------------------------------
    def classify_hit(self, request: Request, num_hit_tokens: int) -> CheckpointKind | str:
        """The kind of checkpoint whose state served a joint hit of ``num_hit_tokens``."""
        if num_hit_tokens <= 0:
            return MISS
        index = num_hit_tokens // self.hash_block_size - 1
        if num_hit_tokens % self.hash_block_size or index >= len(request.block_hashes):
            return UNTRACKED
        key = make_block_hash_with_group_id(request.block_hashes[index], self._first_group_id)
        return self.ledger.get(key, UNTRACKED)

    def retained_bytes(self) -> dict[str, int]:
        """Bytes of state currently kept, by kind (entries whose block was recycled are skipped)."""
        by_group = {g.group_id: g for g in self.groups}
        out: dict[str, int] = {}
        for key, kind in list(self.ledger.items()):
            group = by_group.get(get_group_id(key))
            if (
                group is None
                or group.manager.block_pool.cached_block_hash_to_block.get_one_block(key) is None
            ):
                continue
            out[kind.value] = out.get(kind.value, 0) + group.state_bytes
        return out

    # -- the wrapped cache_blocks ----------------------------------------------------------------
    def _cache_blocks(
        self,
        group: MambaGroup,
        upstream: Callable[..., None],
        request: Request,
        num_tokens: int,
        retention_interval: int | None = None,
        *,
        replay_boundaries: Sequence[int],
    ) -> None:
        plan = self.plans.get(request.request_id)
        extra = (
            plan.boundaries(num_tokens, request.num_prompt_tokens, self.block_size, retention_interval)
            if plan
            else ()
        )
        manager = group.manager
        before = manager.num_cached_block.get(request.request_id, 0)
        upstream(request, num_tokens, retention_interval, replay_boundaries=(*replay_boundaries, *extra))
        after = manager.num_cached_block.get(request.request_id, 0)
        if after > before:
            held = plan is not None and plan.holds_decode_states(retention_interval)
            self._attribute(group, request, before, after, replay_boundaries, plan, hold_decode=held)
        self._attribute_partial_tail(group, request, num_tokens)
        if plan is not None and plan.input_end_unit is not None and num_tokens == plan.input_end_unit:
            self._keep_sub_block_state(group, request, plan.input_end_unit)

    def _keep_sub_block_state(self, group: MambaGroup, request: Request, position: int) -> None:
        """Key the running state block at ``position`` (this chunk's end, inside a block) and
        have vLLM copy it aside before the next chunk overwrites it: the same partial-entry and
        copy-on-write path vLLM uses for the prompt's own sub-block tail."""
        manager = group.manager
        index = position // self.block_size
        blocks = manager.req_to_blocks[request.request_id]
        if index >= len(blocks) or blocks[index].is_null or blocks[index].block_hash_num_tokens == position:
            return
        key = manager.block_pool.cache_partial_block(
            request=request,
            block=blocks[index],
            num_tokens=position,
            kv_cache_group_id=group.group_id,
            block_size=self.block_size,
        )
        if key is None:
            return
        manager.cached_blocks_this_step.add(key)
        manager._partial_hit_reqs[request.request_id] = (index, blocks[index])
        manager.num_cached_block[request.request_id] = min(
            manager.num_cached_block.get(request.request_id, 0), index
        )
        self._record(group, key, CheckpointKind.INPUT_END)

    def _cache_attention_blocks(
        self,
        group_id: int,
        manager: FullAttentionManager,
        upstream: Callable[..., None],
        request: Request,
        num_tokens: int,
        retention_interval: int | None = None,
        *,
        replay_boundaries: Sequence[int],
    ) -> None:
        """Upstream caching, then keep the attention alias at a sub-block U_end: vLLM drops a
        block's partial entries when a deeper one is registered or the block fills, although the
        block's KV still covers that prefix; re-adding it beside them keeps U_end reachable."""
        upstream(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)
        plan = self.plans.get(request.request_id)
        if plan is None or plan.input_end_unit is None or num_tokens < plan.input_end_unit:
            return
        position = plan.input_end_unit
        blocks = manager.req_to_blocks.get(request.request_id, [])
        index = position // self.block_size
        if index >= len(blocks) or blocks[index].is_null:
            return
        key = make_block_hash_with_group_id(
            request.block_hashes[position // self.hash_block_size - 1], group_id
        )
        if not manager.block_pool.cached_block_hash_to_block.contain(key, blocks[index].block_id):
            manager.block_pool.cache_partial_block(
                request=request,
                block=blocks[index],
                num_tokens=position,
                kv_cache_group_id=group_id,
                block_size=self.block_size,
            )

    def _block_end(self, position: int, alignment: int) -> int:
        """The end of the state block ``reachable_block_mask`` keeps for a boundary at ``position``."""
        return position // alignment * alignment // self.block_size * self.block_size

    def _attribute(
        self,
        group: MambaGroup,
        request: Request,
        before: int,
        after: int,
        replay_boundaries: Sequence[int],
        plan: RequestCheckpoints | None,
        *,
        hold_decode: bool,
    ) -> None:
        alignment = group.manager.cache_hit_alignment_tokens or self.block_size
        prompt_ends = {self._block_end(b, alignment) for b in replay_boundaries}
        junction = request.shared_prefix_boundary
        junctions = {self._block_end(junction, alignment)} if junction else set()
        if junction and group.manager.use_eagle:
            junctions.add(self._block_end(junction - self.block_size, alignment))
        blocks = group.manager.req_to_blocks[request.request_id]
        for index in range(before, after):
            block = blocks[index]
            if block.is_null or block.block_hash is None:
                continue
            position = (index + 1) * self.block_size
            if position in prompt_ends:
                kind = CheckpointKind.PROMPT_END
            elif position in junctions:
                kind = CheckpointKind.REACTIVE
            elif plan is not None and position == plan.input_end:
                kind = CheckpointKind.INPUT_END
            elif plan is not None and hold_decode and position >= request.num_prompt_tokens:
                self._remember(block.block_hash, CheckpointKind.DECODE_END)
                self._hold_decode_state(plan, position, HeldState(group, block, block.block_hash))
                continue
            else:
                continue  # dense or periodic retention: not a checkpoint of ours to attribute
            self._record(group, block.block_hash, kind)

    def _attribute_partial_tail(self, group: MambaGroup, request: Request, num_tokens: int) -> None:
        """Upstream's sub-block prompt-tail state (``prefix_match_unit`` < block size)."""
        if self.hash_block_size >= self.block_size:
            return
        tail = get_mamba_prefill_checkpoint_position(
            request.num_prompt_tokens,
            self.hash_block_size,
            group.manager.drop_eagle_checkpoint_block,
            num_hash_lookahead_tokens=self.num_hash_lookahead_tokens,
        )
        if (
            tail <= 0
            or tail % self.block_size == 0
            or num_tokens != tail
            or tail > len(request.block_hashes) * self.hash_block_size
        ):
            return
        key = make_block_hash_with_group_id(
            request.block_hashes[tail // self.hash_block_size - 1], group.group_id
        )
        if (
            key in self.ledger
            or group.manager.block_pool.cached_block_hash_to_block.get_one_block(key) is None
        ):
            return
        self._record(group, key, CheckpointKind.PROMPT_END)

    def _hold_decode_state(self, plan: RequestCheckpoints, position: int, held: HeldState) -> None:
        plan.decode_states.setdefault(position, []).append(held)
        plan.decode_states.move_to_end(position)
        while len(plan.decode_states) > self.decode_depth:
            _, oldest = plan.decode_states.popitem(last=False)
            self._release(oldest)

    def _release(self, held: list[HeldState]) -> None:
        for state in held:
            state.release()
            self.ledger.pop(state.key, None)

    def _record(self, group: MambaGroup, key: BlockHashWithGroupId, kind: CheckpointKind) -> None:
        """Attribute the state ``group`` keeps under ``key`` to ``kind`` and count its bytes; the
        checkpoint itself counts once, on the first Mamba group."""
        self._remember(key, kind)
        self.counters.record_created(
            kind, group.state_bytes, new_checkpoint=group.group_id == self._first_group_id
        )

    def _remember(self, key: BlockHashWithGroupId, kind: CheckpointKind) -> None:
        self.ledger[key] = kind
        self.ledger.move_to_end(key)
        while len(self.ledger) > self.ledger_capacity:
            self.ledger.popitem(last=False)


def install(scheduler: Any, counters: CheckpointCounters, *, ledger_capacity: int) -> CheckpointRetention:
    """A ``CheckpointRetention`` over a vLLM scheduler's KV-cache manager."""
    manager = scheduler.kv_cache_manager
    return CheckpointRetention(
        manager.coordinator,
        scheduler.kv_cache_config,
        counters,
        use_eagle=scheduler.use_eagle_block_drop,
        num_hash_lookahead_tokens=scheduler.num_hash_lookahead_tokens,
        ledger_capacity=ledger_capacity,
    )
