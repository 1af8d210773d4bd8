"""A hybrid prefix cache in vLLM 0.33.0 align mode, retention interval 0.

Where it sits: the top of the cache model: it composes blocks, states, lookup and retention;
the experiment calls it.

``HybridPrefixCache`` replays requests: ``admit`` looks a prompt up (the joint hit), holds the
hit, allocates the request's attention blocks and running state, and creates the states the
policy's admission decision places inside the prompt; ``finish`` takes the finish decision
(D_end known): it creates the output-side states, un-caches the prompt-side states the
decision no longer keeps, then releases everything the request held (states first, then
blocks from the tail, as vLLM frees its groups) so that cached entries become evictable in
LRU order.

Two budget modes: one arena for blocks and states (vLLM's single block pool: equal total
capacity), or a separate arena of ``checkpoint_budget`` bytes for retained states (an equal
admitted checkpoint-byte budget), the rest for blocks and running states.

``engine_steps`` (one arena of equal-size pages) replays a request as vLLM 0.33.0's block pool
runs it, for eviction that picks vLLM's victims: the free queue holds free pages and evictable
entries (``FreeQueue``: freed uncached pages reused first, cached ones in LRU order, an entry
un-keyed while free leaves a free page in its place); attention blocks are allocated chunk by
chunk and token by token; the recurrent state moves from page to page (one per block it
enters; a kept block-aligned state is the page its chunk ended in, a sub-block one a
copy-on-write copy let go when the scheduling step ends; a partially hit state is copied into
a page of its own), and pages wholly behind the processed
position are freed as the request moves on (``MambaManager.remove_skipped_blocks``, one step
late under ``async_lag``), so the hit state and kept prompt states age from then, not from
finish; decode boundaries stay keyed while the request may keep one (the plugin's tentative
hold, ``admit(tentative_decode=True)``). ``admit(run_prefill=False)`` plus ``step`` lets a
caller feed the engine's own steps when requests run concurrently. Preemption is not modelled:
the pool must hold what vLLM schedules (an allocation with nothing to take counts as an
overcommit).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from boundary.cache.accounting import CacheGeometry, cdiv
from boundary.cache.blocks import AttentionBlocks
from boundary.cache.chunking import prefill_chunk_ends, prompt_checkpoint_position
from boundary.cache.eviction import LRU, EvictionPolicy, FreeQueue
from boundary.cache.lookup import Hit, find_joint_hit
from boundary.cache.memory import Arena, Entry, EntryKind
from boundary.cache.request import CacheRequest
from boundary.cache.retention import PlannedState, RetentionPlan, plan_retention
from boundary.cache.states import RecurrentStates
from boundary.retention_policy import SERVING_ORDER, Decision, Phase


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """``capacity_bytes``: all cache memory. ``checkpoint_budget_bytes``: None for one shared
    pool; else retained states get exactly this many bytes and blocks the rest.
    ``max_chunk_tokens``: the scheduler's ``max_num_batched_tokens``. ``output_reuse``: False
    models prefill/decode disaggregation without a decode-to-prefill path: the prefill side
    never sees output KV or output-side states (the policy is told so through its geometry's
    ``decode_states``)."""

    geometry: CacheGeometry
    capacity_bytes: float
    checkpoint_budget_bytes: float | None = None
    junction_at_unit: bool = False
    max_chunk_tokens: int = 8192
    eviction: Callable[[], EvictionPolicy] = LRU
    output_reuse: bool = True
    engine_steps: bool = False
    async_lag: bool = False

    def __post_init__(self) -> None:
        budget = self.checkpoint_budget_bytes
        if budget is not None and not 0 < budget < self.capacity_bytes:
            raise ValueError(f"checkpoint budget {budget} must be inside (0, capacity {self.capacity_bytes})")
        g = self.geometry
        if self.engine_steps and (budget is not None or g.block_bytes != g.state_bytes):
            raise ValueError("engine_steps models vLLM's one block pool: one arena of equal-size pages")


@dataclass(frozen=True, slots=True)
class Admission:
    """What admitting one request did. ``forced_splits``: extra prefill chunks the plan's
    in-prompt states cost beyond the scheduler's own stops; ``recached``: states created under
    a prefix id some live state already answers to (vLLM caches duplicates)."""

    hit: Hit
    plan: RetentionPlan
    created: tuple[Entry, ...]
    forced_splits: int
    recached: int


@dataclass(slots=True)
class _InFlight:
    request: CacheRequest
    table: list[Entry]
    states: list[Entry]
    scratch: Entry | None
    decision: Decision
    created: list[Entry]
    running: list[Entry] = field(default_factory=list)  # engine_steps: held Mamba pages, oldest first
    planned: dict[int, PlannedState] = field(default_factory=dict)
    pending: list[PlannedState] = field(default_factory=list)  # sub-block states copied next step
    tentative: list[Entry] = field(default_factory=list)  # decode boundaries keyed until finish
    tentative_decode: bool = False
    copy_page: int | None = None  # a partially hit state's copy-on-write page, taken at the first step
    history: list[int] = field(default_factory=list)  # engine_steps: each step's end


@dataclass(slots=True)
class CacheStats:
    """Counters over a replay. ``evictions[(victim, cause)]``: entries of kind ``victim``
    evicted to make room for an allocation of kind ``cause``. ``*_byte_seconds``: time
    integrals of live bytes (occupancy = integral / elapsed)."""

    evictions: Counter[tuple[str, str]] = field(default_factory=Counter)
    created: Counter[str] = field(default_factory=Counter)
    state_hits: Counter[str] = field(default_factory=Counter)
    dropped_states: int = 0  # prompt-side states a finish decision no longer kept
    evicted_states: list[Entry] = field(default_factory=list)
    state_bytes: int = 0
    state_bytes_by_kind: Counter[str] = field(default_factory=Counter)  # by a state's primary kind
    state_byte_seconds_by_kind: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    block_bytes: int = 0
    peak_state_bytes: int = 0
    state_byte_seconds: float = 0.0
    block_byte_seconds: float = 0.0
    started_at: float | None = None
    clock: float = 0.0


def primary_kind(state: Entry) -> str:
    """The kind a state is counted under: its first label in serving order."""
    for kind in SERVING_ORDER:
        if kind.value in state.labels:
            return kind.value
    return state.labels[0] if state.labels else "unlabelled"


class HybridPrefixCache:
    """One full-attention group and one recurrent group over shared memory.

    Invariants (``check_invariants``): every key in either index maps to live entries that
    carry it, and back; a state's single key names exactly the prefix of its position; each
    arena's ``used`` is the sum of its live entries; an entry's ``refs`` equals the number of
    in-flight requests holding it; held entries are never evictable; unheld live entries are
    cached (uncached ones are freed on release).
    """

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self.geometry = config.geometry
        self.blocks = AttentionBlocks(self.geometry)
        self.states = RecurrentStates(self.geometry)
        self.stats = CacheStats()
        budget = config.checkpoint_budget_bytes
        working = config.capacity_bytes - (budget or 0)
        policy = (
            FreeQueue(int(working // self.geometry.block_bytes)) if config.engine_steps else config.eviction()
        )
        self.working = Arena("working", working, policy, self._evicted)
        self.checkpoints = (
            self.working if budget is None else Arena("checkpoints", budget, config.eviction(), self._evicted)
        )
        self._arena = {
            EntryKind.BLOCK: self.working,
            EntryKind.SCRATCH: self.working,
            EntryKind.STATE: self.checkpoints,
        }
        self._in_flight: dict[int, _InFlight] = {}
        self._next_eid = 0
        # engine_steps: copy-on-write endpoints vLLM lets go when the scheduling step ends
        self._step_end: list[Entry] = []
        self._step_at: float | None = None

    # -- replay ---------------------------------------------------------------------------
    def lookup(self, request: CacheRequest) -> Hit:
        """The joint hit ``request`` would get now, without admitting it."""
        return find_joint_hit(request.prefix, request.num_prompt_tokens, self.blocks, self.states)

    def admit(
        self,
        request: CacheRequest,
        decision: Decision,
        now: float,
        *,
        run_prefill: bool = True,
        tentative_decode: bool = False,
    ) -> Admission:
        """Admit ``request`` with the policy's admission decision (its prefill keeps are created
        now; its decode keeps, if any, at finish unless ``finish`` gets another decision).

        ``engine_steps`` only: ``run_prefill=False`` leaves the prefill chunks to ``step``
        calls (the caller feeds the engine's steps); ``tentative_decode``: the request may keep
        a decode state, so its latest decode boundaries stay keyed until finish (the plugin's
        tentative hold), and only those can become its decode keep."""
        if request.rid in self._in_flight:
            raise ValueError(f"request {request.rid} is already in flight")
        self._advance(now)
        g = self.geometry
        hit = self.lookup(request)
        joint = hit.joint
        whole = joint // g.block_size
        for block in hit.blocks[:whole]:
            self.working.hold(block, now)
        if self.config.engine_steps and now != self._step_at:
            self._end_step()
        for block in hit.blocks[whole:]:  # a partially hit block: copied, then let go (now most recent)
            self.working.hold(block, now)
            if self.config.engine_steps:
                self._step_end.append(block)
                self._step_at = now
            else:
                self.working.release(block, now)
        held_states: list[Entry] = []
        if hit.state is not None:
            self.checkpoints.hold(hit.state, now)
            hit.state.hits += 1
            hit.state.last_hit_at = now
            for label in hit.state.labels:
                self.stats.state_hits[label] += 1
            held_states.append(hit.state)

        if self.config.engine_steps:
            return self._admit_in_steps(
                request, decision, hit, held_states, now, run_prefill, tentative_decode
            )
        # The hit blocks stay in the table up to the last whole block; the request writes its
        # own copy of a partially hit block (vLLM's copy-on-write tail).
        table = list(hit.blocks[:whole])
        computed = request.num_tokens - 1  # the last sampled token's KV is never computed
        cacheable = min(computed, len(request.prefix) * g.unit) // g.block_size
        if not self.config.output_reuse:
            cacheable = min(cacheable, request.num_prompt_tokens // g.block_size)
        for index in range(whole, cdiv(computed, g.block_size)):
            block = self._allocate(
                EntryKind.BLOCK, self.geometry.block_bytes, (index + 1) * g.block_size, request.rid, now
            )
            if index < cacheable:
                self.blocks.cache_full(block, request.prefix)
            table.append(block)
        scratch = self._allocate(EntryKind.SCRATCH, g.state_bytes, 0, request.rid, now)

        plan = plan_retention(
            decision,
            junction=hit.junction,
            joint=joint,
            num_prompt_tokens=request.num_prompt_tokens,
            geometry=g,
            junction_at_unit=self.config.junction_at_unit,
        )
        created: list[Entry] = []
        recached = 0
        for planned in plan.states:
            if planned.in_prompt:
                recached += self._cached_already(planned, request)
                created.append(self._create_state(planned, request, table, now))
        flight = _InFlight(request, table, held_states + created, scratch, decision, created)
        self._in_flight[request.rid] = flight
        native = prefill_chunk_ends(
            joint,
            request.num_prompt_tokens,
            g,
            junction=hit.junction,
            max_chunk_tokens=self.config.max_chunk_tokens,
        )
        wanted = [s.position for s in created if s.position < request.num_prompt_tokens]
        splits = len(
            prefill_chunk_ends(
                joint,
                request.num_prompt_tokens,
                g,
                junction=hit.junction,
                stops=wanted,
                max_chunk_tokens=self.config.max_chunk_tokens,
            )
        ) - len(native)
        return Admission(hit, plan, tuple(created), splits, recached)

    def finish(self, rid: int, now: float, decision: Decision | None = None) -> tuple[Entry, ...]:
        """The request stopped: apply the finish decision (default: the admission one) — create
        its decode keeps, un-cache the prompt-side states it no longer keeps — and release what
        the request held."""
        self._advance(now)
        flight = self._in_flight.pop(rid)
        final = flight.decision if decision is None else decision
        if self.config.engine_steps:
            self._end_step()
            return self._finish_in_steps(flight, final, now)
        kept = set(final.prefill_positions)
        for state in flight.created:
            if state.position not in kept and "reactive" not in state.labels and state.keys:
                self.states.drop(state)  # vLLM: evict_blocks on the state block
                self.stats.dropped_states += 1
        created = []
        request = flight.request
        for keep in final.keeps:
            if keep.phase is not Phase.DECODE or not self.config.output_reuse:
                continue
            if keep.position > request.num_tokens - 1 or keep.position // self.geometry.unit > len(
                request.prefix
            ):
                continue  # never computed (a caller's D_end past the computed tokens)
            alias = self.geometry.fine_grained and keep.position % self.geometry.block_size != 0
            planned = PlannedState(keep.position, tuple(k.value for k in keep.kinds), alias, False)
            state = self._create_state(planned, request, flight.table, now)
            created.append(state)
            flight.states.append(state)
        for state in sorted(flight.states, key=lambda e: -e.position):
            self._release(state, now)
        for block in reversed(flight.table):
            self._release(block, now)
        if flight.scratch is not None:
            self._release(flight.scratch, now)
        return tuple(created)

    def close(self, now: float) -> None:
        """Account occupancy up to ``now`` (the end of the replay)."""
        self._advance(now)

    # -- engine steps (vLLM's block pool, step by step) --------------------------------------
    def _admit_in_steps(
        self,
        request: CacheRequest,
        decision: Decision,
        hit: Hit,
        held: list[Entry],
        now: float,
        run_prefill: bool,
        tentative_decode: bool,
    ) -> Admission:
        """``admit`` as vLLM runs the prefill: attention blocks allocated chunk by chunk, one
        Mamba page per block the running state enters (a kept block-aligned state is the page
        its chunk ended in), pages behind the processed position freed as the request moves on
        (``MambaManager.remove_skipped_blocks``), sub-block states copied aside one step later."""
        g = self.geometry
        joint = hit.joint
        whole = joint // g.block_size
        plan = plan_retention(
            decision,
            junction=hit.junction,
            joint=joint,
            num_prompt_tokens=request.num_prompt_tokens,
            geometry=g,
            junction_at_unit=self.config.junction_at_unit,
        )
        in_prompt = [p for p in plan.states if p.in_prompt]
        recached = sum(self._cached_already(p, request) for p in in_prompt)
        flight = _InFlight(request, list(hit.blocks[:whole]), [], None, decision, [])
        flight.history.append(joint)
        if hit.state is not None and joint % g.block_size:
            self._step_end.append(held[0])  # a partially hit state: copied, then let go
            self._step_at = now
            flight.copy_page = joint // g.block_size  # the page it is copied into
        elif hit.state is not None:
            flight.running.append(held[0])
        self._in_flight[request.rid] = flight
        n = request.num_prompt_tokens
        native = prefill_chunk_ends(
            joint, n, g, junction=hit.junction, max_chunk_tokens=self.config.max_chunk_tokens
        )
        ends = prefill_chunk_ends(
            joint,
            n,
            g,
            junction=hit.junction,
            stops=[p.position for p in in_prompt if p.position < n],
            max_chunk_tokens=self.config.max_chunk_tokens,
        )
        flight.planned = {p.position: p for p in in_prompt}
        flight.tentative_decode = tentative_decode
        if run_prefill:
            for end in ends:
                self._step(flight, end, now)
                self._end_step()
        return Admission(hit, plan, tuple(flight.created), len(ends) - len(native), recached)

    def step(self, rid: int, end: int, now: float) -> None:
        """``engine_steps``: request ``rid`` was scheduled up to ``end`` computed tokens (one
        prefill chunk or one decode token), at ``now``: vLLM's ``allocate_slots`` for it."""
        self._advance(now)
        if now != self._step_at:
            self._end_step()
        self._step(self._in_flight[rid], end, now)
        self._step_at = now

    def _end_step(self) -> None:
        """The scheduling step ended: the copy-on-write endpoints it retained are let go."""
        for entry in self._step_end:
            self._release(entry, entry.created_at if self._step_at is None else self._step_at)
        self._step_end = []

    def _step(self, flight: _InFlight, end: int, now: float) -> None:
        g = self.geometry
        block = g.block_size
        request = flight.request
        cacheable = min(request.num_tokens - 1, len(request.prefix) * g.unit) // block
        if not self.config.output_reuse:
            cacheable = min(cacheable, request.num_prompt_tokens // block)
        history = flight.history
        lag = 2 if self.config.async_lag else 1
        processed = history[-lag] if len(history) >= lag else history[0]
        self._release_behind(flight, processed, now)
        for index in range(len(flight.table), cdiv(end, block)):
            entry = self._allocate(EntryKind.BLOCK, g.block_bytes, (index + 1) * block, request.rid, now)
            flight.table.append(entry)
        # vLLM caches up to the tokens the request holds: while decoding under async scheduling
        # the token being computed is not appended yet, so caching lags the step by one token
        n = request.num_prompt_tokens
        cache_end = end - 1 if self.config.async_lag and end > n else end
        for entry in flight.table[: min(cache_end // block, cacheable)]:
            if not entry.keys and entry.creator == request.rid:
                self.blocks.cache_full(entry, request.prefix)
        tail = prompt_checkpoint_position(n, g.unit)  # FullAttentionManager's prompt-tail alias
        if (
            g.fine_grained
            and tail % block
            and 0 < tail <= cache_end
            and tail // g.unit <= len(request.prefix)
        ):
            index = tail // block
            if index < len(flight.table) and flight.table[index].creator == request.rid:
                self.blocks.cache_alias(flight.table[index], tail, request.prefix)
        for state in flight.pending:  # vLLM's copy-on-write of a partially keyed running page
            copy = self._create_state(state, request, flight.table, now)
            flight.created.append(copy)
            self._step_end.append(copy)
            self._step_at = now
        flight.pending = []
        if flight.copy_page is not None:  # a partial hit's state, copied into its own page
            page = self._allocate(EntryKind.SCRATCH, g.state_bytes, 0, request.rid, now)
            page.position = flight.copy_page
            flight.running.append(page)
            flight.copy_page = None
        index = cdiv(end, block) - 1
        last = flight.running[-1] if flight.running else None
        if last is None or self._page_index(last) < index or last.kind is EntryKind.STATE:
            page = self._allocate(EntryKind.SCRATCH, g.state_bytes, 0, request.rid, now)
            page.position = index  # a running page: position is its block index
            flight.running.append(page)
        keep = flight.planned.get(end)
        if keep is not None:
            if end % block == 0:
                self._make_state(flight.running[-1], keep, request)
                flight.created.append(flight.running[-1])
            else:
                flight.pending.append(keep)
        if flight.tentative_decode and cache_end % block == 0 and cache_end >= n and cache_end > 0:
            # the plugin holds the latest decode boundaries keyed until finish decides
            held = next((e for e in flight.running if self._page_index(e) == cache_end // block - 1), None)
            if held is not None and held.kind is EntryKind.SCRATCH:
                page = held
                tentative = PlannedState(cache_end, ("decode_end",), False, False)
                self._make_state(page, tentative, request, count=False)
                flight.tentative.append(page)
                if len(flight.tentative) > 2:
                    self._unkey(flight.tentative.pop(0))
        history.append(end)

    def _unkey(self, entry: Entry) -> None:
        """vLLM ``evict_blocks``: ``entry`` is no longer findable; unheld, it is freed in place."""
        if not entry.live or not entry.keys:
            return
        self.states.drop(entry)
        if entry.refs == 0:
            self.working.uncache(entry)
            self._forget(entry)

    def _page_index(self, entry: Entry) -> int:
        if entry.kind is EntryKind.SCRATCH:
            return entry.position
        return cdiv(entry.position, self.geometry.block_size) - 1

    def _release_behind(self, flight: _InFlight, processed: int, now: float) -> None:
        """Free the Mamba pages wholly behind ``processed`` (deepest first), never the newest."""
        if not flight.running:
            return
        limit = cdiv(processed, self.geometry.block_size) - 1
        newest = flight.running[-1]
        behind = [e for e in flight.running if e is not newest and self._page_index(e) < limit]
        for entry in sorted(behind, key=lambda e: -self._page_index(e)):
            flight.running.remove(entry)
            self._release(entry, now)

    def _make_state(
        self, page: Entry, planned: PlannedState, request: CacheRequest, *, count: bool = True
    ) -> None:
        """The running ``page`` ended its step at ``planned.position``: it is kept there."""
        if page.kind is EntryKind.SCRATCH:
            page.kind = EntryKind.STATE
            self.stats.state_bytes += page.nbytes
            self.stats.peak_state_bytes = max(self.stats.peak_state_bytes, self.stats.state_bytes)
        page.position = planned.position
        page.labels = planned.kinds
        self.states.cache(page, request.prefix)
        for label in page.labels if count else ():
            self.stats.created[label] += 1

    def _finish_in_steps(self, flight: _InFlight, final: Decision, now: float) -> tuple[Entry, ...]:
        """``finish`` after vLLM's remaining steps (decode: blocks allocated as the output
        grows, the Mamba page moving block to block, the latest decode boundaries keyed while
        the request may keep one); then, as the plugin's finish does, the prompt-side states the
        finish decision no longer keeps and the decode boundaries it does not keep are un-keyed
        (freed where they stand when already released), and the request frees its blocks tail
        first, then its Mamba pages."""
        g = self.geometry
        request = flight.request
        last = flight.history[-1]
        if last < request.num_prompt_tokens:
            rest = prefill_chunk_ends(
                last,
                request.num_prompt_tokens,
                g,
                stops=[p for p in flight.planned if p < request.num_prompt_tokens],
                max_chunk_tokens=self.config.max_chunk_tokens,
            )
            for end in rest:
                self._step(flight, end, now)
                self._end_step()
        for end in range(flight.history[-1] + 1, request.num_tokens):
            self._step(flight, end, now)
            self._end_step()
        for planned in flight.pending:  # keyed on the running page, which nothing copies now
            page = flight.running[-1]
            if page.kind is EntryKind.SCRATCH:
                self._make_state(page, planned, request)
                flight.created.append(page)
        flight.pending = []
        for planned in flight.pending:  # keyed on the running page, which nothing copies now
            page = flight.running[-1]
            if page.kind is EntryKind.SCRATCH:
                self._make_state(page, planned, request)
                flight.created.append(page)
        flight.pending = []
        kept = set(final.prefill_positions)
        for state in flight.created:
            if state.position not in kept and "reactive" not in state.labels and state.keys:
                self._unkey(state)
                self.stats.dropped_states += 1
        target = next((k for k in final.keeps if k.phase is Phase.DECODE), None)
        created = []
        for page in flight.tentative:
            if target is not None and page.position == target.position and self.config.output_reuse:
                page.labels = tuple(k.value for k in target.kinds)
                for label in page.labels:
                    self.stats.created[label] += 1
                created.append(page)
            else:
                self._unkey(page)
        for block in reversed(flight.table):
            self._release(block, now)
        for page in sorted(flight.running, key=lambda e: -self._page_index(e)):
            self._release(page, now)
        flight.running.clear()
        return tuple(created)

    # -- internals ------------------------------------------------------------------------
    def _create_state(
        self, planned: PlannedState, request: CacheRequest, table: list[Entry], now: float
    ) -> Entry:
        state = self._allocate(EntryKind.STATE, self.geometry.state_bytes, planned.position, request.rid, now)
        state.labels = planned.kinds
        self.stats.state_bytes_by_kind[primary_kind(state)] += state.nbytes
        self.states.cache(state, request.prefix)
        if planned.alias:
            index = planned.position // self.geometry.block_size
            if index < len(table):
                self.blocks.cache_alias(table[index], planned.position, request.prefix)
        for label in state.labels:
            self.stats.created[label] += 1
        return state

    def _cached_already(self, planned: PlannedState, request: CacheRequest) -> bool:
        return request.prefix[planned.position // self.geometry.unit - 1] in self.states.index

    def _allocate(self, kind: EntryKind, nbytes: int, position: int, creator: int, now: float) -> Entry:
        entry = Entry(self._next_eid, kind, nbytes, position, creator, now)
        self._next_eid += 1
        self._arena[kind].allocate(entry, now, kind)
        entry.refs = 1
        if kind is EntryKind.STATE:
            self.stats.state_bytes += nbytes
            self.stats.peak_state_bytes = max(self.stats.peak_state_bytes, self.stats.state_bytes)
        elif kind is EntryKind.BLOCK:
            self.stats.block_bytes += nbytes
        return entry

    def _release(self, entry: Entry, now: float) -> None:
        self._arena[entry.kind].release(entry, now)
        if not entry.live:
            self._forget(entry)

    def _evicted(self, entry: Entry, now: float, cause: EntryKind) -> None:
        self.stats.evictions[(entry.kind.name.lower(), cause.name.lower())] += 1
        if entry.kind is EntryKind.STATE:
            self.states.drop(entry)
            self.stats.evicted_states.append(entry)
        else:
            self.blocks.drop(entry)
        self._forget(entry)

    def _forget(self, entry: Entry) -> None:
        if entry.kind is EntryKind.STATE:
            self.stats.state_bytes -= entry.nbytes
            if entry.labels:
                self.stats.state_bytes_by_kind[primary_kind(entry)] -= entry.nbytes
        elif entry.kind is EntryKind.BLOCK:
            self.stats.block_bytes -= entry.nbytes

    def _advance(self, now: float) -> None:
        s = self.stats
        if s.started_at is None:
            s.started_at = s.clock = now
        if now > s.clock:
            s.state_byte_seconds += s.state_bytes * (now - s.clock)
            s.block_byte_seconds += s.block_bytes * (now - s.clock)
            for kind, nbytes in s.state_bytes_by_kind.items():
                s.state_byte_seconds_by_kind[kind] += nbytes * (now - s.clock)
            s.clock = now

    # -- invariants -----------------------------------------------------------------------
    def live_states(self) -> list[Entry]:
        return [e for entries in self.states.index.entries.values() for e in entries]

    def check_invariants(self) -> None:
        g = self.geometry
        for name, index, kind in (
            ("blocks", self.blocks.index, EntryKind.BLOCK),
            ("states", self.states.index, EntryKind.STATE),
        ):
            for key, entries in index.entries.items():
                assert entries, f"{name}: empty entry list under key {key}"
                for e in entries:
                    assert e.live and e.kind is kind and key in e.keys, f"{name}: key {key} -> stale {e}"
        expected: Counter[int] = Counter()
        for flight in self._in_flight.values():
            for e in (*flight.table, *flight.states, *flight.running):
                expected[e.eid] += 1
            if flight.scratch is not None:
                expected[flight.scratch.eid] += 1
        for e in self._step_end:
            expected[e.eid] += 1
        arenas = {id(self.working): self.working, id(self.checkpoints): self.checkpoints}
        state_bytes = block_bytes = 0
        for arena in arenas.values():
            assert arena.used == sum(e.nbytes for e in arena.charged), f"{arena.name}: used != sum of entries"
            assert arena.used <= arena.capacity or arena.overcommits, f"{arena.name}: over capacity"
            for e in arena.charged:
                assert e.live, f"{arena.name}: freed entry still charged"
                assert e.refs == expected[e.eid], f"{e}: refs {e.refs} != holders {expected[e.eid]}"
                assert (e in arena.policy) == (e.refs == 0), f"{e}: evictable iff unheld"
                if e.refs == 0:
                    assert e.keys, f"{e}: unheld and uncached but not freed"
                index = self.states.index if e.kind is EntryKind.STATE else self.blocks.index
                for key in e.keys:
                    assert e in index.entries.get(key, ()), f"{e}: key {key} missing from the index"
                if e.kind is EntryKind.STATE:
                    state_bytes += e.nbytes
                    assert len(e.keys) == 1 and e.position > 0 and e.position % g.unit == 0, f"bad state {e}"
                elif e.kind is EntryKind.BLOCK:
                    block_bytes += e.nbytes
                    assert e.position % g.block_size == 0, f"bad block {e}"
                else:
                    assert not e.keys and e.refs == 1, f"scratch {e} is cached or shared"
        assert state_bytes == self.stats.state_bytes, "state byte counter drifted"
        assert block_bytes == self.stats.block_bytes, "block byte counter drifted"
