"""The retention ledger: what is kept, where and for whom. Which kinds each kept recurrent state
stands for, per hash key and per block that holds a state under it (``Ledger``); which states
one request keeps and holds, per position (``RequestCheckpoints``, ``HeldState``).

Where it sits: the engine end, the plugin's bookkeeping after checkpoints: ``kept_states`` writes
it, ``retention``, ``cache_blocks`` and ``scheduler`` read it; it imports only
``boundary.checkpoints.retention`` (the kinds a state stands for).

Two requests may keep a state under one chained hash (a greedy regenerate, ``n`` identical
prompts): vLLM's hash table then maps the key to several blocks. The ledger keeps one
``Holder`` per (key, block), so a request releases its own block and never another request's
kept state, and a hit is attributed through the block vLLM's lookup answers with.

Invariants (``check`` verifies them against vLLM's hash table): every holder's block answers
to its key; ``retained`` is the bytes of the counted holders, by kind; at most ``capacity``
keys are attributed (the oldest key is forgotten first). Every operation is O(1) in the number
of kept states.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from boundary.checkpoints.kinds import CheckpointKind
from boundary.checkpoints.retention import Decision, EngineGeometry, RequestBoundaries, Variant, serving_kind

if TYPE_CHECKING:  # this module does not import vLLM
    from vllm.v1.core.kv_cache_utils import BlockHashWithGroupId, KVCacheBlock
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager


@dataclass(slots=True)
class Holder:
    """One block keeping a state under a ledger key. ``block_id`` follows vLLM's copy-on-write
    moves; ``counted``: its bytes are in the retained sums (a tentative decode state is not,
    until finish keeps it)."""

    block_id: int
    kinds: tuple[CheckpointKind, ...]
    nbytes: int
    counted: bool = False

    @property
    def kind(self) -> CheckpointKind:
        kind = serving_kind(self.kinds)
        assert kind is not None, self.kinds  # a holder stands for at least one kind
        return kind


class Ledger:
    """Holders by key (oldest key first) and the running retained sums by kind."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[BlockHashWithGroupId, dict[int, Holder]] = OrderedDict()
        self.retained: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: BlockHashWithGroupId) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[BlockHashWithGroupId]:
        return iter(self._entries)

    def holders(self, key: BlockHashWithGroupId) -> tuple[Holder, ...]:
        return tuple(self._entries.get(key, {}).values())

    def holder(self, key: BlockHashWithGroupId, block_id: int) -> Holder | None:
        return self._entries.get(key, {}).get(block_id)

    def remember(
        self,
        key: BlockHashWithGroupId,
        block_id: int,
        kinds: tuple[CheckpointKind, ...],
        nbytes: int,
        *,
        counted: bool,
    ) -> Holder:
        """Attribute the state ``block_id`` holds under ``key`` to ``kinds`` (replacing what the
        ledger said about that block under that key); the key becomes the newest."""
        self.drop(key, block_id)
        holder = Holder(block_id, kinds, nbytes)
        self._entries.setdefault(key, {})[block_id] = holder
        self._entries.move_to_end(key)
        if counted:
            self.count(holder)
        while len(self._entries) > self.capacity:
            self.forget(next(iter(self._entries)))
        return holder

    def count(self, holder: Holder) -> None:
        if not holder.counted:
            holder.counted = True
            self.retained[holder.kind.value] += holder.nbytes

    def keep(self, holder: Holder, kinds: tuple[CheckpointKind, ...]) -> None:
        """Relabel ``holder`` (a finish decision names what it stands for) and count it."""
        self._uncount(holder)
        holder.kinds = kinds
        self.count(holder)

    def drop(self, key: BlockHashWithGroupId, block_id: int) -> Holder | None:
        """``block_id`` no longer holds a state under ``key``."""
        holders = self._entries.get(key)
        holder = holders.pop(block_id, None) if holders is not None else None
        if holder is not None:
            self._uncount(holder)
        if holders is not None and not holders:
            del self._entries[key]
        return holder

    def forget(self, key: BlockHashWithGroupId) -> None:
        for holder in self._entries.pop(key, {}).values():
            self._uncount(holder)

    def moved(self, key: BlockHashWithGroupId, src: int, dst: int) -> None:
        """vLLM re-pointed ``key`` from block ``src`` to its copy ``dst``."""
        holders = self._entries.get(key)
        holder = holders.pop(src, None) if holders is not None else None
        if holder is not None and holders is not None:
            holder.block_id = dst
            holders[dst] = holder

    def clear(self) -> None:
        """vLLM emptied its hash table (``reset_prefix_cache``): nothing is held any more."""
        self._entries.clear()
        self.retained.clear()

    def kind(self, key: BlockHashWithGroupId, block_id: int | None) -> CheckpointKind | None:
        """The kind a hit served by ``block_id`` under ``key`` is credited to (any holder's
        when the block is not one the ledger knows); None: not attributed."""
        holders = self._entries.get(key)
        if not holders:
            return None
        holder = holders.get(block_id) if block_id is not None else None
        return (holder or next(iter(holders.values()))).kind

    def retained_bytes(self) -> dict[str, int]:
        """Bytes of state currently kept, by kind: running sums, O(number of kinds)."""
        return {kind: value for kind, value in self.retained.items() if value}

    def check(self, contains: Any) -> None:
        """Assert the invariants; ``contains(key, block_id)`` is vLLM's hash-table lookup."""
        sums: Counter[str] = Counter()
        for key, holders in self._entries.items():
            assert holders, f"an empty entry for {key!r}"
            for block_id, holder in holders.items():
                assert holder.block_id == block_id, (key, block_id, holder)
                assert contains(key, block_id), f"block {block_id} no longer answers to {key!r}"
                if holder.counted:
                    sums[holder.kind.value] += holder.nbytes
        assert len(self._entries) <= self.capacity
        assert self.retained_bytes() == {k: v for k, v in sums.items() if v}, (self.retained, sums)

    def _uncount(self, holder: Holder) -> None:
        if holder.counted:
            holder.counted = False
            self.retained[holder.kind.value] -= holder.nbytes


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

    def kinds_at(self, position: int) -> tuple[CheckpointKind, ...]:
        keep = self.admission.at(position)
        return () if keep is None else keep.kinds

    def boundaries(self, num_tokens: int, num_prompt_tokens: int, block_size: int) -> tuple[int, ...]:
        """The reachable boundaries for this step: the block keeps, and while decoding the
        latest block boundary (held tentatively)."""
        latest = num_tokens // block_size * block_size
        if self.decode and latest >= num_prompt_tokens and latest > 0:
            return (*self.block_keeps, latest)
        return self.block_keeps
