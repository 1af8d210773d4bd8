# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""The admission and finish hooks: which recurrent states vLLM keeps, decided by boundary's
retention policy.

Where it sits: the engine end, after checkpoints: ``boundary_vllm.scheduler`` calls these hooks at
admission and finish; they ask ``boundary.checkpoints.policies``, install ``cache_blocks`` and hold
states through ``kept_states`` in the ``ledger``.

For a request that carries hints, ``CheckpointRetention.admit`` asks
``boundary.checkpoints.policies.decide`` (D_end unknown) and maps the decision onto vLLM: the
prefill positions where a chunk must end (only where vLLM would not produce that state itself:
not at P_end's checkpoint, its tail or twin, a native chunk end or exported from inside the last
chunk by kernels with prefill-checkpoint blocks), the block-aligned and sub-block keeps, and
whether decode states are held (``boundary.checkpoints.policies.may_keep_decode``). Each step's
``cache_blocks`` then keys them (``boundary_vllm.cache_blocks``). ``finish`` asks the
finish-phase decision (D_end known): it keeps at most one held decode state and may drop a
prompt-side stand-in it no longer needs.

Invariants: a kept state at position ``n`` is the state after exactly ``tokens[0:n]`` and is
reachable only through the chained hash of those tokens, so it is never reused beyond that
prefix; requests without hints are cached exactly as upstream. What is kept, where and for whom
is the ledger (``boundary_vllm.ledger``), written only by ``boundary_vllm.kept_states``, which
prunes it when vLLM un-keys a block and empties it when vLLM resets its prefix cache. No state is
keyed before it exists: a sub-block state keyed while its step is scheduled counts as written only
once that step's output arrives (``confirm``); a request that frees its blocks before then
(aborted, preempted, or revoked from the step by a preemption in the same schedule) un-keys it
(``discard_unconfirmed``), so a later lookup never lands on a state that may not have been
written. Retained
bytes are running sums. Whatever the plugin un-keys itself goes out as a ``BlockRemoved`` KV
event, as vLLM's own evictions do, so KV-aware routers see vLLM's hash table.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # the engine side extends non-public vLLM classes

from dataclasses import replace
from typing import Any

from vllm.v1.core.kv_cache_coordinator import KVCacheCoordinator
from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager, MambaManager
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.request import Request

from boundary.checkpoints.kinds import CheckpointKind, prompt_end_position
from boundary.checkpoints.policies import decide, may_keep_decode
from boundary.checkpoints.retention import (
    DecodeStates,
    EngineGeometry,
    Phase,
    RequestBoundaries,
    Variant,
    twin_position,
)
from boundary_vllm.cache_blocks import CacheBlocksHook
from boundary_vllm.compat import hash_lookahead_tokens
from boundary_vllm.counters import MISS, UNTRACKED, CheckpointCounters
from boundary_vllm.decode_end import request_d_end
from boundary_vllm.kept_states import KeptStates
from boundary_vllm.ledger import HeldState, MambaGroup, RequestCheckpoints


class CheckpointRetention:
    """The admission and finish hooks of one engine: a plan per admitted request. It installs
    the step hook (``CacheBlocksHook``: the policy-executing ``cache_blocks`` on every caching
    Mamba manager and, with sub-block hits, the attention managers) and owns the ledger of kept
    states (``KeptStates``, ``ledger``)."""

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
        offer_decode_states: bool = False,
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
        self.upstream_twin = upstream_twin
        # With exported checkpoints and sub-block hits the kernels re-key the twin's block at
        # P_end's unit tail: that tail is what upstream keeps.
        self.exported_twin = self.hit_unit < self.block_size and exported_checkpoints
        self.counters = counters
        self.plans: dict[str, RequestCheckpoints] = {}
        self.kept = KeptStates(
            self.pool,
            counters,
            ledger_capacity=ledger_capacity,
            first_group_id=self.groups[0].group_id,
            decode_depth=2 + int(use_eagle),  # how many recent decode boundaries stay held
        )
        self.ledger = self.kept.ledger
        self.hook = CacheBlocksHook(
            self.kept,
            self.plans,
            block_size=self.block_size,
            hash_block_size=self.hash_block_size,
            hit_unit=self.hit_unit,
            exported_twin=self.exported_twin,
            num_hash_lookahead_tokens=num_hash_lookahead_tokens,
            offer_decode_states=offer_decode_states,
        )
        self.hook.install(self.groups, self.attention)
        self.unconfirmed: dict[int, list[tuple[str, HeldState]]] = {}  # id(step) -> its keyed states
        self.unconfirmed_unkeyed = 0  # states un-keyed because their request left before the output

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
        plan = RequestCheckpoints(
            variant,
            boundaries,
            geometry,
            decision,
            stops=tuple(p for p in prefill if p not in native),
            block_keeps=tuple(p for p in prefill if p % self.block_size == 0),
            unit_keeps=tuple(p for p in prefill if p % self.block_size),
            decode=may_keep_decode(variant, boundaries, geometry),
        )
        self.plans[request.request_id] = plan
        return plan

    def plan(self, request_id: str) -> RequestCheckpoints | None:
        return self.plans.get(request_id)

    # -- states keyed before their step's output ---------------------------------------------------
    def seal(self, step: object) -> None:
        """The step just scheduled keyed ``hook.fresh``: unconfirmed until ``confirm(step)``."""
        if self.hook.fresh:
            self.unconfirmed[id(step)] = self.hook.fresh
            self.hook.fresh = []

    def confirm(self, step: object) -> None:
        """The output of ``step`` arrived: the states it keyed were written."""
        self.unconfirmed.pop(id(step), None)

    def discard_unconfirmed(self, request: Request) -> int:
        """``request`` frees its blocks (finished, aborted or preempted): un-key every sub-block
        state it keyed in a step whose output has not arrived (or in the step being scheduled),
        so no later lookup finds a state that step may never write. Returns how many."""
        rid = request.request_id
        pending = [h for r, h in self.hook.fresh if r == rid]
        self.hook.fresh = [(r, h) for r, h in self.hook.fresh if r != rid]
        for step, entries in list(self.unconfirmed.items()):
            pending += [h for r, h in entries if r == rid]
            kept = [(r, h) for r, h in entries if r != rid]
            if kept:
                self.unconfirmed[step] = kept
            else:
                del self.unconfirmed[step]
        for held in pending:
            block = held.current()
            if block is not None:
                self.kept.unkey(block, held.key, request)
                self.unconfirmed_unkeyed += 1
        return len(pending)

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
                self.kept.release(held)
                self.counters.dropped += 1
        target = next((k.position for k in final.keeps if k.phase is Phase.DECODE), None)
        kept = plan.decode_states.pop(target, []) if target is not None else []
        for held in plan.decode_states.values():
            self.kept.release(held)
        if kept and all(h.is_held() for h in kept):
            keep = final.at(target) if target is not None else None
            kinds = keep.kinds if keep is not None else (CheckpointKind.DECODE_END,)
            for held in kept:
                if self.ledger.holder(held.key, held.holder.block_id) is held.holder:
                    self.ledger.keep(held.holder, kinds)
                self.counters.record_created(
                    keep.kind if keep is not None else CheckpointKind.DECODE_END,
                    held.group.state_bytes,
                    new_checkpoint=held is kept[0],
                )
        elif kept:
            self.kept.release(kept)

    # -- lookups -------------------------------------------------------------------------------
    def classify_hit(self, request: Request, num_hit_tokens: int) -> CheckpointKind | str:
        """The kind of checkpoint whose state served a joint hit of ``num_hit_tokens``."""
        if num_hit_tokens <= 0:
            return MISS
        index = num_hit_tokens // self.hash_block_size - 1
        if num_hit_tokens % self.hash_block_size or index >= len(request.block_hashes):
            return UNTRACKED
        key = make_block_hash_with_group_id(request.block_hashes[index], self.kept.first_group_id)
        block = self.pool.cached_block_hash_to_block.get_one_block(key)  # the block the lookup answers
        kind = self.ledger.kind(key, block.block_id if block is not None else None)
        return UNTRACKED if kind is None else kind

    def retained_bytes(self) -> dict[str, int]:
        """Bytes of state currently kept, by kind: running sums, O(number of kinds)."""
        return self.ledger.retained_bytes()

    def check_invariants(self) -> None:
        """The ledger agrees with vLLM's hash table (tests call it after a run)."""
        self.ledger.check(self.pool.cached_block_hash_to_block.contain)


def install(
    scheduler: Any,
    counters: CheckpointCounters,
    *,
    ledger_capacity: int,
    upstream_twin: bool = True,
    offer_decode_states: bool = False,
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
        offer_decode_states=offer_decode_states,
    )
