# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""Which recurrent states vLLM keeps, decided by boundary's retention policy.

At ``prefix_cache_retention_interval=0`` each Mamba manager keeps (hashes) only the state
blocks at the ``replay_boundaries`` the coordinator passes (P_end, whose block floor is the
*twin*) and at the request's ``shared_prefix_boundary`` (a reactive junction), plus, with
sub-block hits, P_end's unit-aligned tail (a partial entry). For a request that carries hints,
``CheckpointRetention`` executes ``boundary.retention_policy.decide`` instead:

- block-aligned prefill keeps are passed as the reachable boundaries (replacing upstream's, so a
  variant runs without P_end where it asks to); sub-block ones are keyed as partial entries on
  the state block and on the attention block (vLLM's own tail path, with copy-on-write);
  upstream's sub-block tail is un-keyed when the decision does not keep it;
- a prefill chunk ends at a kept position only where vLLM would not produce that state itself:
  not at P_end's checkpoint (its tail or twin: a native chunk end, or exported from inside the
  last chunk by kernels with prefill-checkpoint blocks);
- while decoding, the latest block boundaries are held tentatively (keyed, not offered to
  offloading connectors); at finish the finish-phase decision (D_end known) keeps at most one
  of them and may drop a prompt-side stand-in it no longer needs.

Invariants: a kept state at position ``n`` is the state after exactly ``tokens[0:n]`` and is
reachable only through the chained hash of those tokens, so it is never reused beyond that
prefix; requests without hints are cached exactly as upstream. The ledger
(``boundary_vllm.ledger``: key and block -> kinds) is pruned when vLLM un-keys a block and
emptied when vLLM resets its prefix cache; retained bytes are running sums: every event costs
O(1), however many states are held. Whatever the plugin un-keys itself goes out as a
``BlockRemoved`` KV event, as vLLM's own evictions do, so KV-aware routers see vLLM's hash table.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # the engine side extends non-public vLLM classes

import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vllm.v1.core.kv_cache_coordinator import KVCacheCoordinator
from vllm.v1.core.kv_cache_utils import BlockHashWithGroupId, KVCacheBlock, make_block_hash_with_group_id
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager, MambaManager
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.request import Request

from boundary.retention_policy import (
    Decision,
    DecodeStates,
    EngineGeometry,
    Phase,
    RequestBoundaries,
    StateKind,
    Variant,
    decide,
    prompt_end_position,
    twin_position,
)
from boundary_vllm.compat import hash_lookahead_tokens, prefill_checkpoint_position
from boundary_vllm.counters import MISS, UNTRACKED, CheckpointCounters
from boundary_vllm.decode_end import request_d_end
from boundary_vllm.ledger import Holder, Ledger, serving_kind
from boundary_vllm.pool_keys import unkey


@dataclass(frozen=True, slots=True)
class MambaGroup:
    group_id: int
    manager: MambaManager
    state_bytes: int  # one state block across every layer of the group


@dataclass(frozen=True, slots=True)
class HeldState:
    """One kept state block of one Mamba group: the hash key it was kept under and its ledger
    holder (whose ``block_id`` follows copy-on-write moves)."""

    group: MambaGroup
    key: BlockHashWithGroupId
    holder: Holder

    def current(self) -> KVCacheBlock | None:
        """This state's block while it still answers to ``key`` (another request's block under
        the same key is not this state)."""
        pool = self.group.manager.block_pool
        block_id = self.holder.block_id
        return pool.blocks[block_id] if pool.cached_block_hash_to_block.contain(self.key, block_id) else None

    def is_held(self) -> bool:
        return self.current() is not None


@dataclass(slots=True)
class RequestCheckpoints:
    """What one request keeps: the admission-phase decision and how it maps onto vLLM.

    ``stops``: prefill positions where a chunk must end (states vLLM would not produce itself);
    ``block_keeps``: block-aligned prefill keeps (the reachable boundaries passed for it);
    ``unit_keeps``: sub-block prefill keeps keyed as partial entries; ``decode``: a decode
    state may be kept at finish, so block boundaries crossed while decoding are held.
    """

    variant: Variant
    request: RequestBoundaries
    geometry: EngineGeometry
    admission: Decision
    stops: tuple[int, ...]
    block_keeps: tuple[int, ...]
    unit_keeps: tuple[int, ...]
    decode: bool
    decode_states: OrderedDict[int, list[HeldState]] = field(default_factory=OrderedDict)  # oldest first
    prefill_states: dict[int, list[HeldState]] = field(default_factory=dict)

    def kinds_at(self, position: int) -> tuple[StateKind, ...]:
        keep = self.admission.at(position)
        return () if keep is None else keep.kinds

    def boundaries(self, num_tokens: int, num_prompt_tokens: int, block_size: int) -> tuple[int, ...]:
        """The reachable boundaries for this step: the block keeps, and while decoding the
        latest block boundary (held tentatively)."""
        latest = num_tokens // block_size * block_size
        if self.decode and latest >= num_prompt_tokens and latest > 0:
            return (*self.block_keeps, latest)
        return self.block_keeps


def holds_decode_states(variant: Variant, boundaries: RequestBoundaries, *, decode_states: bool) -> bool:
    """Whether a request may keep a decode state at finish, so that its latest decode block
    boundaries are held (keyed) while it decodes."""
    return decode_states and (
        variant in (Variant.DECODE_END, Variant.BOTH)
        or (
            variant is Variant.CHAT_AWARE
            and ((boundaries.round_trip or 0) > 0 or (boundaries.horizon or 0) >= boundaries.p_end)
        )
        or (variant is Variant.HORIZON and (boundaries.horizon or 0) >= boundaries.p_end)
    )


class CheckpointRetention:
    """Installs the policy-executing ``cache_blocks`` on every caching Mamba manager (and, with
    sub-block hits, the attention managers) and keeps the ledger that attributes each kept state
    to its kinds."""

    def __init__(
        self,
        coordinator: KVCacheCoordinator,
        kv_cache_config: KVCacheConfig,
        counters: CheckpointCounters,
        *,
        use_eagle: bool,
        num_hash_lookahead_tokens: int,
        ledger_capacity: int,
        exported_checkpoints: bool = False,
        upstream_twin: bool = True,
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
        self.pool = coordinator.block_pool
        self.hash_block_size = self.pool.hash_block_size
        self.hit_unit = self.hash_block_size if coordinator.enable_partial_hash_hits else self.block_size
        self.attention = tuple(
            (gid, manager)
            for gid, manager in enumerate(coordinator.single_type_managers)
            if isinstance(manager, FullAttentionManager) and manager.enable_caching
        )
        self.use_eagle = use_eagle
        self.num_hash_lookahead_tokens = num_hash_lookahead_tokens
        self.exported_checkpoints = exported_checkpoints
        fine = self.hit_unit < self.block_size
        self.upstream_twin = upstream_twin
        # With exported checkpoints and sub-block hits the kernels re-key the twin's block at
        # P_end's unit tail: that tail is what upstream keeps.
        self.exported_twin = fine and exported_checkpoints
        self.decode_depth = 2 + int(use_eagle)  # how many recent decode boundaries stay held
        self.counters = counters
        self.plans: dict[str, RequestCheckpoints] = {}
        self.ledger = Ledger(ledger_capacity)
        self._first_group_id = self.groups[0].group_id
        for group in self.groups:
            upstream = group.manager.cache_blocks
            group.manager.cache_blocks = functools.partial(self._cache_blocks, group, upstream)
        if fine:
            for gid, manager in self.attention:
                upstream = manager.cache_blocks
                manager.cache_blocks = functools.partial(self._cache_attention_blocks, gid, manager, upstream)
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

    # -- geometry --------------------------------------------------------------------------------
    def geometry(self, *, decode_states: bool) -> EngineGeometry:
        """The policy's view of this engine."""
        states = DecodeStates.BLOCK if decode_states else DecodeStates.NONE
        return EngineGeometry(self.block_size, self.hit_unit, states, self.upstream_twin, self.exported_twin)

    def native_positions(self, num_prompt_tokens: int) -> set[int]:
        """Prefill positions whose state vLLM produces by itself: P_end's checkpoint (its
        unit tail and block twin; a chunk end, or exported from inside the last chunk)."""
        return {
            prompt_end_position(num_prompt_tokens, self.hit_unit),
            twin_position(num_prompt_tokens, self.block_size),
        }

    # -- per request ---------------------------------------------------------------------------
    def admit(
        self, request: Request, variant: Variant, boundaries: RequestBoundaries, *, decode_states: bool
    ) -> RequestCheckpoints:
        geometry = self.geometry(decode_states=decode_states)
        decision = decide(variant, boundaries, geometry)
        prefill = [k.position for k in decision.keeps if k.phase is Phase.PREFILL]
        native = self.native_positions(request.num_prompt_tokens)
        may_decode = holds_decode_states(variant, boundaries, decode_states=decode_states)
        plan = RequestCheckpoints(
            variant,
            boundaries,
            geometry,
            decision,
            stops=tuple(p for p in prefill if p not in native),
            block_keeps=tuple(p for p in prefill if p % self.block_size == 0),
            unit_keeps=tuple(p for p in prefill if p % self.block_size),
            decode=bool(may_decode),
        )
        self.plans[request.request_id] = plan
        return plan

    def plan(self, request_id: str) -> RequestCheckpoints | None:
        return self.plans.get(request_id)

    def finish(self, request: Request, *, completed: bool) -> None:
        """Apply the finish-phase decision: keep its decode state, drop the prompt-side states
        it no longer keeps, release every other held decode state."""
        plan = self.plans.pop(request.request_id, None)
        if plan is None:
            return
        final = plan.admission
        if completed and request.sampling_params is not None:
            final = decide(plan.variant, replace(plan.request, d_end=request_d_end(request)), plan.geometry)
        kept_prefill = set(final.prefill_positions)
        for position, held in plan.prefill_states.items():
            if position not in kept_prefill:
                self._release(held)
                self.counters.dropped += 1
        target = next((k.position for k in final.keeps if k.phase is Phase.DECODE), None)
        kept = plan.decode_states.pop(target, []) if target is not None else []
        for held in plan.decode_states.values():
            self._release(held)
        if kept and all(h.is_held() for h in kept):
            kinds = (
                final.at(target).kinds if target is not None and final.at(target) else (StateKind.DECODE_END,)
            )
            for held in kept:
                if self.ledger.holder(held.key, held.holder.block_id) is held.holder:
                    self.ledger.keep(held.holder, kinds)
                self.counters.record_created(
                    serving_kind(kinds), held.group.state_bytes, new_checkpoint=held is kept[0]
                )
        elif kept:
            self._release(kept)

    # -- lookups -------------------------------------------------------------------------------
    def classify_hit(self, request: Request, num_hit_tokens: int) -> StateKind | str:
        """The kind of checkpoint whose state served a joint hit of ``num_hit_tokens``."""
        if num_hit_tokens <= 0:
            return MISS
        index = num_hit_tokens // self.hash_block_size - 1
        if num_hit_tokens % self.hash_block_size or index >= len(request.block_hashes):
            return UNTRACKED
        key = make_block_hash_with_group_id(request.block_hashes[index], self._first_group_id)
        block = self.pool.cached_block_hash_to_block.get_one_block(key)  # the block the lookup answers
        kind = self.ledger.kind(key, block.block_id if block is not None else None)
        return UNTRACKED if kind is None else kind

    def retained_bytes(self) -> dict[str, int]:
        """Bytes of state currently kept, by kind: running sums, O(number of kinds)."""
        return self.ledger.retained_bytes()

    def check_invariants(self) -> None:
        """The ledger agrees with vLLM's hash table (tests call it after a run)."""
        self.ledger.check(self.pool.cached_block_hash_to_block.contain)

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
        sparse = retention_interval == 0
        boundaries = (
            plan.boundaries(num_tokens, request.num_prompt_tokens, self.block_size)
            if plan is not None and sparse
            else replay_boundaries
        )
        manager = group.manager
        before = manager.num_cached_block.get(request.request_id, 0)
        offers = len(manager._pending_boundary_state_offloads)
        upstream(request, num_tokens, retention_interval, replay_boundaries=boundaries)
        after = manager.num_cached_block.get(request.request_id, 0)
        if sparse and after > before:
            self._attribute(group, request, before, after, replay_boundaries, plan)
            if plan is not None and plan.decode:
                self._withhold_tentative(manager, offers, request.num_prompt_tokens)
        if sparse:
            self._attribute_partial_tail(group, request, num_tokens, plan)
        if plan is not None and sparse and num_tokens in plan.unit_keeps:
            self._keep_sub_block_state(group, request, num_tokens, plan)

    def _withhold_tentative(self, manager: MambaManager, offers: int, num_prompt_tokens: int) -> None:
        """Tentative decode states are not offered to offloading connectors (most are dropped
        at finish)."""
        pending = manager._pending_boundary_state_offloads
        pending[offers:] = [o for o in pending[offers:] if o[3] < num_prompt_tokens]

    def _keep_sub_block_state(
        self, group: MambaGroup, request: Request, position: int, plan: RequestCheckpoints
    ) -> None:
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
        self._keep_prefill(group, blocks[index], key, position, plan)

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
        """Upstream caching, then keep the attention aliases at sub-block keeps: vLLM drops a
        block's partial entries when a deeper one is registered or the block fills, although the
        block's KV still covers that prefix; re-adding it beside them keeps the state reachable."""
        upstream(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)
        plan = self.plans.get(request.request_id)
        if plan is None:
            return
        blocks = manager.req_to_blocks.get(request.request_id, [])
        for position in plan.unit_keeps:
            index = position // self.block_size
            if num_tokens < position or index >= len(blocks) or blocks[index].is_null:
                continue
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
    ) -> None:
        alignment = group.manager.cache_hit_alignment_tokens or self.block_size
        upstream_ends = {self._block_end(b, alignment) for b in replay_boundaries}
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
            kinds = list(plan.kinds_at(position)) if plan is not None else []
            if plan is None and position in upstream_ends:
                kinds.append(self._upstream_kind(request, position))
            if position in junctions:
                kinds.append(StateKind.REACTIVE)
            if kinds:
                if plan is not None and StateKind.REACTIVE not in kinds:
                    self._keep_prefill(group, block, block.block_hash, position, plan, tuple(kinds))
                else:
                    self._record(group, block, block.block_hash, tuple(kinds))
            elif plan is not None and plan.decode and position >= request.num_prompt_tokens:
                holder = self.ledger.remember(
                    block.block_hash,
                    block.block_id,
                    (StateKind.DECODE_END,),
                    group.state_bytes,
                    counted=False,
                )
                self._hold_decode_state(plan, position, HeldState(group, block.block_hash, holder))

    def _upstream_kind(self, request: Request, position: int) -> StateKind:
        if position == prompt_end_position(request.num_prompt_tokens, self.hit_unit):
            return StateKind.PROMPT_END
        return StateKind.PROMPT_END_BLOCK

    def _attribute_partial_tail(
        self, group: MambaGroup, request: Request, num_tokens: int, plan: RequestCheckpoints | None
    ) -> None:
        """Upstream's sub-block prompt-tail state (``prefix_match_unit`` < block size): labelled,
        or un-keyed when the request's decision does not keep it."""
        if self.hash_block_size >= self.block_size:
            return
        tail = prefill_checkpoint_position(
            request.num_prompt_tokens,
            self.hash_block_size,
            group.manager.drop_eagle_checkpoint_block,
            self.num_hash_lookahead_tokens,
        )
        if (
            tail <= 0
            or tail % self.block_size == 0
            or (num_tokens < tail if self.exported_twin else num_tokens != tail)  # exported mid-chunk
            or tail > len(request.block_hashes) * self.hash_block_size
        ):
            return
        key = make_block_hash_with_group_id(
            request.block_hashes[tail // self.hash_block_size - 1], group.group_id
        )
        block = self._tail_block(group, request, key, tail)
        if block is None or self.ledger.holder(key, block.block_id) is not None:
            return
        if plan is None:
            self._record(group, block, key, (StateKind.PROMPT_END,))
        elif plan.kinds_at(tail):
            self._keep_prefill(group, block, key, tail, plan)
        elif group.manager._producer_partial_tail_reqs.get(request.request_id, (None,))[0] is block:
            # not kept by this variant: un-key it and skip the copy-on-write that would save it
            # (``_partial_hit_reqs`` is what makes the next allocation take a copy page)
            self._unkey(block, key, request)
            manager = group.manager
            manager._producer_partial_tail_reqs.pop(request.request_id, None)
            if manager._partial_hit_reqs.get(request.request_id, (None, None))[1] is block:
                del manager._partial_hit_reqs[request.request_id]

    def _tail_block(
        self, group: MambaGroup, request: Request, key: BlockHashWithGroupId, tail: int
    ) -> KVCacheBlock | None:
        """The block keyed at the prompt tail: the request's own where it answers to ``key``
        (another request's block may answer to the same key), else any."""
        blocks = group.manager.req_to_blocks.get(request.request_id, [])
        index = tail // self.block_size
        table = self.pool.cached_block_hash_to_block
        if index < len(blocks) and table.contain(key, blocks[index].block_id):
            return blocks[index]
        return table.get_one_block(key)

    def _unkey(self, block: KVCacheBlock, key: BlockHashWithGroupId, request: Request) -> None:
        """Un-key ``key`` on ``block`` as vLLM un-keys an evicted block (``pool_keys.unkey``)."""
        for removed in (key, *unkey(self.pool, block, key, request)):
            self.ledger.drop(removed, block.block_id)

    def _keep_prefill(
        self,
        group: MambaGroup,
        block: KVCacheBlock,
        key: BlockHashWithGroupId,
        position: int,
        plan: RequestCheckpoints,
        kinds: tuple[StateKind, ...] | None = None,
    ) -> None:
        holder = self._record(group, block, key, kinds or plan.kinds_at(position))
        plan.prefill_states.setdefault(position, []).append(HeldState(group, key, holder))

    def _hold_decode_state(self, plan: RequestCheckpoints, position: int, held: HeldState) -> None:
        plan.decode_states.setdefault(position, []).append(held)
        plan.decode_states.move_to_end(position)
        while len(plan.decode_states) > self.decode_depth:
            _, oldest = plan.decode_states.popitem(last=False)
            self._release(oldest)

    def _release(self, held: list[HeldState]) -> None:
        """Un-key each state's own block (never another block under the same key)."""
        for state in held:
            block = state.current()
            if block is not None:
                self.pool.evict_blocks({block.block_id})  # prunes the ledger through _removed
            self.ledger.drop(state.key, state.holder.block_id)

    # -- the ledger ------------------------------------------------------------------------------
    def _record(
        self, group: MambaGroup, block: KVCacheBlock, key: BlockHashWithGroupId, kinds: tuple[StateKind, ...]
    ) -> Holder:
        """Attribute the state ``block`` keeps under ``key`` to ``kinds`` and count its bytes; the
        checkpoint itself counts once, on the first Mamba group."""
        holder = self.ledger.remember(key, block.block_id, kinds, group.state_bytes, counted=True)
        self.counters.record_created(
            serving_kind(kinds), group.state_bytes, new_checkpoint=group.group_id == self._first_group_id
        )
        return holder

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


def install(
    scheduler: Any,
    counters: CheckpointCounters,
    *,
    ledger_capacity: int,
    upstream_twin: bool = True,
) -> CheckpointRetention:
    """A ``CheckpointRetention`` over a vLLM scheduler's KV-cache manager."""
    manager = scheduler.kv_cache_manager
    return CheckpointRetention(
        manager.coordinator,
        scheduler.kv_cache_config,
        counters,
        use_eagle=scheduler.use_eagle_block_drop,
        num_hash_lookahead_tokens=hash_lookahead_tokens(scheduler),
        ledger_capacity=ledger_capacity,
        exported_checkpoints=scheduler.mamba_has_prefill_checkpoint_blocks,
        upstream_twin=upstream_twin,
    )
