# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""The step hook: vLLM's ``cache_blocks`` wrapped, so that each step keys what the request's
decision keeps and labels it in the ledger.

Where it sits: the engine end, in the plugin's step: ``boundary_vllm.retention`` installs
``CacheBlocksHook`` on vLLM's managers; it keys what a request's ``boundary.checkpoints.retention``
decision keeps and records it through ``kept_states`` into the ``ledger``.

At ``prefix_cache_retention_interval=0`` each Mamba manager keys only the state blocks at the
``replay_boundaries`` the coordinator passes (P_end, whose block floor is the *twin*) and at the
request's ``shared_prefix_boundary`` (a reactive junction), plus, with sub-block hits, P_end's
unit-aligned tail (a partial entry). For a request with a plan (``boundary_vllm.retention``):

- block-aligned prefill keeps are passed as the reachable boundaries (replacing upstream's, so a
  variant runs without P_end where it asks to); sub-block ones are keyed as partial entries on
  the state block and on the attention block (vLLM's own tail path, with copy-on-write);
  upstream's sub-block tail is un-keyed when the decision does not keep it;
- while decoding, the latest block boundaries are held tentatively until the finish hook keeps
  at most one of them; they are offered to offloading connectors only with ``decode_to_prefill``
  (a store that carries decode states to later prefills), as they are cached: at finish the
  request's blocks are freed and vLLM drops offers made then.

Under a retention interval other than 0 (a connector's rewrite) vLLM keeps block-aligned and
decode states itself; the sub-block keeps are still keyed as partial entries.

Requests without a plan are keyed exactly as upstream; their states are only labelled.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # wraps non-public manager methods

import functools
from collections.abc import Callable, Sequence

from vllm.v1.core.kv_cache_utils import BlockHashWithGroupId, KVCacheBlock, make_block_hash_with_group_id
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager, MambaManager
from vllm.v1.request import Request

from boundary.checkpoints.kinds import CheckpointKind, prompt_end_position
from boundary_vllm.compat import prefill_checkpoint_position
from boundary_vllm.kept_states import KeptStates
from boundary_vllm.ledger import HeldState, MambaGroup, RequestCheckpoints


class CacheBlocksHook:
    """The wrapped ``cache_blocks`` of the caching Mamba managers (``cache_blocks``) and, with
    sub-block hits, of the attention managers (``cache_attention_blocks``). ``plans``: the
    admitted requests' plans by request id (the retention's own dict, read here)."""

    def __init__(
        self,
        kept: KeptStates,
        plans: dict[str, RequestCheckpoints],
        *,
        block_size: int,
        hash_block_size: int,
        hit_unit: int,
        exported_twin: bool,
        num_hash_lookahead_tokens: int,
        offer_decode_states: bool = False,
    ) -> None:
        self.kept = kept
        self.offer_decode_states = offer_decode_states  # decode_to_prefill: a store may serve them
        self.pool = kept.pool
        self.plans = plans
        self.block_size = block_size
        self.hash_block_size = hash_block_size
        self.hit_unit = hit_unit
        self.exported_twin = exported_twin
        self.num_hash_lookahead_tokens = num_hash_lookahead_tokens
        # sub-block states keyed by the step being scheduled now, whose forward has not run:
        # (request id, state), moved to ``CheckpointRetention.unconfirmed`` when the step is sealed
        self.fresh: list[tuple[str, HeldState]] = []

    def install(
        self, groups: Sequence[MambaGroup], attention: Sequence[tuple[int, FullAttentionManager]]
    ) -> None:
        """Wrap each caching Mamba manager's ``cache_blocks`` and, with sub-block hits, each
        caching attention manager's."""
        for group in groups:
            upstream = group.manager.cache_blocks
            group.manager.cache_blocks = functools.partial(self.cache_blocks, group, upstream)
        if self.hit_unit < self.block_size:
            for gid, manager in attention:
                upstream = manager.cache_blocks
                manager.cache_blocks = functools.partial(self.cache_attention_blocks, gid, manager, upstream)

    # ``cache_blocks`` and ``cache_attention_blocks`` both end in vLLM's ``cache_blocks`` signature
    # (alike by design: each replaces a manager's own, after its bound arguments).
    def cache_blocks(
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
            if plan is not None and plan.decode and not self.offer_decode_states:
                self._withhold_tentative(manager, offers, request.num_prompt_tokens)
        if sparse:
            self._attribute_partial_tail(group, request, num_tokens, plan)
        if plan is not None and num_tokens in plan.unit_keeps:  # a partial entry under any interval
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
        key = self._key_partial(request, blocks[index], position, group.group_id)
        if key is None:
            return
        manager.cached_blocks_this_step.add(key)
        manager._partial_hit_reqs[request.request_id] = (index, blocks[index])
        manager.num_cached_block[request.request_id] = min(
            manager.num_cached_block.get(request.request_id, 0), index
        )
        held = self.kept.keep_prefill(group, blocks[index], key, position, plan)
        self.fresh.append((request.request_id, held))

    def cache_attention_blocks(
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
                self._key_partial(request, blocks[index], position, group_id)

    def _key_partial(
        self, request: Request, block: KVCacheBlock, position: int, group_id: int
    ) -> BlockHashWithGroupId | None:
        """Key ``block`` as a partial entry for ``tokens[:position]`` (vLLM's own sub-block path;
        the pool is shared by every group); the key, or None where vLLM declines."""
        return self.pool.cache_partial_block(
            request=request,
            block=block,
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
                kinds.append(CheckpointKind.REACTIVE)
            if kinds:
                if plan is not None and CheckpointKind.REACTIVE not in kinds:
                    self.kept.keep_prefill(group, block, block.block_hash, position, plan, tuple(kinds))
                else:
                    self.kept.record(group, block, block.block_hash, tuple(kinds))
            elif plan is not None and plan.decode and position >= request.num_prompt_tokens:
                holder = self.kept.ledger.remember(
                    block.block_hash,
                    block.block_id,
                    (CheckpointKind.DECODE_END,),
                    group.state_bytes,
                    counted=False,
                )
                self.kept.hold_decode_state(plan, position, HeldState(group, block.block_hash, holder))

    def _upstream_kind(self, request: Request, position: int) -> CheckpointKind:
        if position == prompt_end_position(request.num_prompt_tokens, self.hit_unit):
            return CheckpointKind.PROMPT_END
        return CheckpointKind.PROMPT_END_BLOCK

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
        if block is None or self.kept.ledger.holder(key, block.block_id) is not None:
            return
        if plan is None:
            self.kept.record(group, block, key, (CheckpointKind.PROMPT_END,))
        elif plan.kinds_at(tail):
            self.kept.keep_prefill(group, block, key, tail, plan)
        elif group.manager._producer_partial_tail_reqs.get(request.request_id, (None,))[0] is block:
            # not kept by this variant: un-key it and skip the copy-on-write that would save it
            # (``_partial_hit_reqs`` is what makes the next allocation take a copy page)
            self.kept.unkey(block, key, request)
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
