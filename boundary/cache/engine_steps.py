"""``engine_steps``: a request replayed as vLLM 0.33.0's block pool runs it, page by page.

Where it sits: in the cache model, under ``hybrid``: ``HybridPrefixCache`` (its ``StepHost``)
hands it the admitted request, the scheduler's steps and the finish; it allocates, caches and
frees through the host's arena and stores.

One arena of equal-size pages: the free queue holds free pages and evictable entries
(``FreeQueue``: freed uncached pages reused first, cached ones in LRU order, an entry un-keyed
while free leaves a free page in its place), so eviction picks vLLM's victims. Attention blocks
are allocated chunk by chunk and token by token; the recurrent state moves from page to page
(one per block it enters; a kept block-aligned state is the page its chunk ended in, a
sub-block one a copy-on-write copy let go when the scheduling step ends; a partially hit state
is copied into a page of its own), and pages wholly behind the processed position are freed as
the request moves on (``MambaManager.remove_skipped_blocks``, one step late under
``async_lag``), so the hit state and kept prompt states age from then, not from finish; decode
boundaries stay keyed while the request may keep one (the plugin's tentative hold), and a
sub-block keep at or below the joint hit is aliased on the request's block there (as the plugin
keys it). Preemption
is not modelled: the pool must hold what vLLM schedules (an allocation with nothing to take
counts as an overcommit).

Invariants: ``step_end`` holds one reference to each copy-on-write source of the scheduling
step at ``step_at`` (a partially hit block or state, a sub-block state's running page), all let
go by ``end_step``; a request's ``running`` pages are held, oldest first, and the newest is
never freed before finish; a page's ``position`` is its block index while it runs (scratch) and
its token position once kept (state), ``page_index`` reading both as the block index; a
request's ``history`` starts at its joint hit and never decreases; at most two tentative decode
boundaries per request stay keyed.
"""

from __future__ import annotations

from typing import Protocol

from boundary.cache.accounting import CacheGeometry, cdiv
from boundary.cache.blocks import AttentionBlocks
from boundary.cache.budget import StateBudget
from boundary.cache.chunking import prefill_chunk_ends, prompt_checkpoint_position
from boundary.cache.lookup import Hit
from boundary.cache.memory import Arena, Entry, EntryKind
from boundary.cache.records import Admission, CacheConfig, CacheStats, InFlight
from boundary.cache.request import CacheRequest
from boundary.cache.retention import PlannedState, plan_retention
from boundary.cache.states import RecurrentStates
from boundary.checkpoints.retention import Decision, Phase


class StepHost(Protocol):
    """What the engine steps drive: the cache's stores, its one arena, its counters, its
    requests in flight and its bookkeeping (``HybridPrefixCache``)."""

    config: CacheConfig
    geometry: CacheGeometry
    blocks: AttentionBlocks
    states: RecurrentStates
    working: Arena
    stats: CacheStats
    budget: StateBudget | None
    _in_flight: dict[int, InFlight]

    def _allocate(self, kind: EntryKind, nbytes: int, position: int, creator: int, now: float) -> Entry: ...

    def _release_together(self, entries: list[Entry], now: float) -> None: ...

    def _forget(self, entry: Entry) -> None: ...

    def _create_state(
        self, planned: PlannedState, request: CacheRequest, table: list[Entry], now: float
    ) -> Entry: ...

    def _admit_state(
        self, planned: PlannedState, request: CacheRequest, table: list[Entry], now: float
    ) -> Entry | None: ...

    def budget_room(self, kinds: tuple[str, ...], now: float) -> bool: ...

    def _cached_already(self, planned: PlannedState, request: CacheRequest) -> bool: ...


class EngineSteps:
    """vLLM's block pool step by step, over ``host``'s memory (see the module docstring)."""

    def __init__(self, host: StepHost) -> None:
        self.host = host
        self.geometry = host.geometry
        self.config = host.config
        # copy-on-write endpoints vLLM lets go when the scheduling step ends
        self.step_end: list[Entry] = []
        self.step_at: float | None = None

    # -- scheduling steps -------------------------------------------------------------------
    def begin(self, now: float) -> None:
        """A request arrives at ``now``: a step at another time ends the previous one."""
        if now != self.step_at:
            self.end_step()

    def hold_until_step_end(self, entry: Entry, now: float) -> None:
        """``entry`` (already held) is a copy-on-write source, let go when this step ends."""
        self.step_end.append(entry)
        self.step_at = now

    def end_step(self) -> None:
        """The scheduling step ended: the copy-on-write endpoints it retained are let go as vLLM
        drains them (``KVCacheManager.take_kv_cache_block_copies``: manager by manager in group
        order, each in the order its copies were asked for), so the partially hit states and
        attention blocks of the step's requests sit in the free queue group by group."""
        if self.step_end:
            now = self.step_end[0].created_at if self.step_at is None else self.step_at
            self.release_by_group(self.step_end, now)
        self.step_end = []

    def release_by_group(self, entries: list[Entry], now: float) -> None:
        """Let go of ``entries`` (in vLLM's order within a group) as vLLM frees blocks of several
        KV-cache groups: the recurrent groups' pages and the attention groups' in the engine's
        group order, each kind group by group (``Arena.release_together``)."""
        recurrent = [e for e in entries if e.kind is not EntryKind.BLOCK]
        attention = [e for e in entries if e.kind is EntryKind.BLOCK]
        for part in (recurrent, attention) if self.config.recurrent_groups_first else (attention, recurrent):
            self.host._release_together(part, now)

    def step(self, flight: InFlight, end: int, now: float) -> None:
        """The request was scheduled up to ``end`` computed tokens at ``now``: vLLM's
        ``allocate_slots`` for it."""
        self.begin(now)
        self._step(flight, end, now)
        self.step_at = now

    # -- admit and finish -------------------------------------------------------------------
    def admit(
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
        recached = sum(self.host._cached_already(p, request) for p in in_prompt)
        flight = InFlight(request, list(hit.blocks[:whole]), [], None, decision, [])
        flight.history.append(joint)
        if hit.state is not None and joint % g.block_size:
            self.hold_until_step_end(held[0], now)  # a partially hit state: copied, then let go
            flight.copy_page = joint // g.block_size  # the page it is copied into
        elif hit.state is not None:
            flight.running.append(held[0])
        self.host._in_flight[request.rid] = flight
        n = request.num_prompt_tokens
        chunk = self.config.max_chunk_tokens
        native = prefill_chunk_ends(joint, n, g, junction=hit.junction, max_chunk_tokens=chunk)
        stops = [p.position for p in in_prompt if p.position < n]
        ends = prefill_chunk_ends(joint, n, g, junction=hit.junction, stops=stops, max_chunk_tokens=chunk)
        flight.planned = {p.position: p for p in in_prompt}
        flight.tentative_decode = tentative_decode
        if run_prefill:
            for end in ends:
                self._step(flight, end, now)
                self.end_step()
        split_at = tuple(sorted(set(ends) - set(native)))
        forced = len(ends) - len(native)
        return Admission(hit, plan, tuple(flight.created), forced, recached, len(ends), split_at)

    def finish(self, flight: InFlight, final: Decision, now: float) -> tuple[Entry, ...]:
        """``finish`` after vLLM's remaining steps (decode: blocks allocated as the output
        grows, the Mamba page moving block to block, the latest decode boundaries keyed while
        the request may keep one); then, as the plugin's finish does, the prompt-side states the
        finish decision no longer keeps and the decode boundaries it does not keep are un-keyed
        (freed where they stand when already released), and the request frees its blocks and
        Mamba pages manager by manager in the engine's group order, each tail first
        (``KVCacheCoordinator.free``)."""
        self.end_step()
        self._run_to_end(flight, now)
        created = self._settle(flight, final, now)
        pages = sorted(flight.running, key=lambda e: -self.page_index(e))
        self.release_by_group([*reversed(flight.table), *pages], now)
        flight.running.clear()
        return created

    def _run_to_end(self, flight: InFlight, now: float) -> None:
        """The steps the caller did not feed: the rest of the prefill, then the decode."""
        request = flight.request
        last = flight.history[-1]
        if last < request.num_prompt_tokens:
            rest = prefill_chunk_ends(
                last,
                request.num_prompt_tokens,
                self.geometry,
                stops=[p for p in flight.planned if p < request.num_prompt_tokens],
                max_chunk_tokens=self.config.max_chunk_tokens,
            )
            for end in rest:
                self._step(flight, end, now)
                self.end_step()
        for end in range(flight.history[-1] + 1, request.num_tokens):
            self._step(flight, end, now)
            self.end_step()
        for planned in flight.pending:  # keyed on the running page, which nothing copies now
            page = flight.running[-1]
            if page.kind is EntryKind.SCRATCH and self.make_state(page, planned, request, now=now):
                flight.created.append(page)
        flight.pending = []

    def _settle(self, flight: InFlight, final: Decision, now: float) -> tuple[Entry, ...]:
        """Un-key what ``final`` no longer keeps; keep the decode keeps it names among the
        tentatively held boundaries (each admitted to the checkpoint budget now, or refused)."""
        stats = self.host.stats
        kept = set(final.prefill_positions)
        for state in flight.created:
            if state.position not in kept and "reactive" not in state.labels and state.keys:
                self.unkey(state)
                stats.dropped_states += 1
        targets = {k.position: k for k in final.keeps if k.phase is Phase.DECODE}
        created = []
        for page in flight.tentative:
            target = targets.get(page.position) if self.config.output_reuse else None
            kinds = () if target is None else tuple(k.value for k in target.kinds)
            if target is None or not page.keys or not self.host.budget_room(kinds, now):
                self.unkey(page)
                continue
            stats.label(page, kinds)
            for label in page.labels:
                stats.created[label] += 1
            if self.host.budget is not None:
                self.host.budget.admit(page)
            created.append(page)
        return tuple(created)

    # -- one step ---------------------------------------------------------------------------
    def _step(self, flight: InFlight, end: int, now: float) -> None:
        history = flight.history
        lag = 2 if self.config.async_lag else 1
        processed = history[-lag] if len(history) >= lag else history[0]
        self.release_behind(flight, processed, now)
        request = flight.request
        block = self.geometry.block_size
        for index in range(len(flight.table), cdiv(end, block)):
            entry = self.host._allocate(
                EntryKind.BLOCK, self.geometry.block_bytes, (index + 1) * block, request.rid, now
            )
            flight.table.append(entry)
        # vLLM caches up to the tokens the request holds: while decoding under async scheduling
        # the token being computed is not appended yet, so caching lags the step by one token
        n = request.num_prompt_tokens
        cache_end = end - 1 if self.config.async_lag and end > n else end
        self._cache_blocks(flight, cache_end)
        self._copy_aside(flight, now)
        self._move_state(flight, end, now)
        if flight.tentative_decode and cache_end % block == 0 and cache_end >= n and cache_end > 0:
            self._hold_decode(flight, cache_end)
        history.append(end)

    def _cache_blocks(self, flight: InFlight, cache_end: int) -> None:
        """Key the request's own full blocks up to ``cache_end`` (and the prompt-tail alias)."""
        g = self.geometry
        block = g.block_size
        request = flight.request
        cacheable = min(request.num_tokens - 1, len(request.prefix) * g.unit) // block
        if not self.config.output_reuse:
            cacheable = min(cacheable, request.num_prompt_tokens // block)
        for entry in flight.table[: min(cache_end // block, cacheable)]:
            # a block keyed by an alias so far (the prompt tail) is cached full once it fills
            full = request.prefix[entry.position // g.unit - 1]
            if full not in entry.keys and entry.creator == request.rid:
                self.host.blocks.cache_full(entry, request.prefix)
        tail = prompt_checkpoint_position(request.num_prompt_tokens, g.unit)  # FullAttentionManager's alias
        if (
            g.fine_grained
            and tail % block
            and 0 < tail <= cache_end
            and tail // g.unit <= len(request.prefix)
        ):
            index = tail // block
            if index < len(flight.table) and flight.table[index].creator == request.rid:
                self.host.blocks.cache_alias(flight.table[index], tail, request.prefix)
        if g.fine_grained:
            self._alias_covered_keeps(flight, cache_end)

    def _alias_covered_keeps(self, flight: InFlight, cache_end: int) -> None:
        """The plugin keys the attention alias of every sub-block prefill keep the request has
        reached, also one at or below its joint hit (whose state exists already): the request's
        own block there (a hit block) then answers for that prefix too."""
        block = self.geometry.block_size
        request = flight.request
        reached = min(flight.history[0], cache_end)
        for keep in flight.decision.keeps:
            position = keep.position
            index = position // block
            if (
                keep.phase is Phase.PREFILL
                and position % block
                and position <= reached
                and index < len(flight.table)
            ):
                self.host.blocks.cache_alias(flight.table[index], position, request.prefix)

    def _copy_aside(self, flight: InFlight, now: float) -> None:
        """The copies the previous step asked for: sub-block states, a partial hit's state."""
        request = flight.request
        for state in flight.pending:  # vLLM's copy-on-write of a partially keyed running page
            copy = self.host._admit_state(state, request, flight.table, now)
            if copy is not None:
                flight.created.append(copy)
                self.hold_until_step_end(copy, now)
        flight.pending = []
        if flight.copy_page is not None:  # a partial hit's state, copied into its own page
            page = self.host._allocate(EntryKind.SCRATCH, self.geometry.state_bytes, 0, request.rid, now)
            page.position = flight.copy_page
            flight.running.append(page)
            flight.copy_page = None

    def _move_state(self, flight: InFlight, end: int, now: float) -> None:
        """The running state enters the page of ``end``'s block; a keep at ``end`` is kept."""
        block = self.geometry.block_size
        index = cdiv(end, block) - 1
        last = flight.running[-1] if flight.running else None
        if last is None or self.page_index(last) < index or last.kind is EntryKind.STATE:
            rid = flight.request.rid
            page = self.host._allocate(EntryKind.SCRATCH, self.geometry.state_bytes, 0, rid, now)
            page.position = index  # a running page: position is its block index
            flight.running.append(page)
        keep = flight.planned.get(end)
        if keep is not None:
            if end % block == 0:
                if self.make_state(flight.running[-1], keep, flight.request, now=now):
                    flight.created.append(flight.running[-1])
            else:
                flight.pending.append(keep)

    def _hold_decode(self, flight: InFlight, cache_end: int) -> None:
        """The plugin holds the latest decode boundaries keyed until finish decides."""
        index = cache_end // self.geometry.block_size - 1
        held = next((e for e in flight.running if self.page_index(e) == index), None)
        if held is not None and held.kind is EntryKind.SCRATCH:
            tentative = PlannedState(cache_end, ("decode_end",), False, False)
            self.make_state(held, tentative, flight.request, now=None)
            flight.tentative.append(held)
            if len(flight.tentative) > 2:
                self.unkey(flight.tentative.pop(0))

    # -- pages ------------------------------------------------------------------------------
    def unkey(self, entry: Entry) -> None:
        """vLLM ``evict_blocks``: ``entry`` is no longer findable; unheld, it is freed in place."""
        if not entry.live or not entry.keys:
            return
        if self.host.budget is not None:
            self.host.budget.forget(entry)
        self.host.states.drop(entry)
        if entry.refs == 0:
            self.host.working.uncache(entry)
            self.host._forget(entry)

    def page_index(self, entry: Entry) -> int:
        if entry.kind is EntryKind.SCRATCH:
            return entry.position
        return cdiv(entry.position, self.geometry.block_size) - 1

    def release_behind(self, flight: InFlight, processed: int, now: float) -> None:
        """Free the Mamba pages wholly behind ``processed`` (deepest first), never the newest."""
        if not flight.running:
            return
        limit = cdiv(processed, self.geometry.block_size) - 1
        newest = flight.running[-1]
        behind = [e for e in flight.running if e is not newest and self.page_index(e) < limit]
        for entry in behind:
            flight.running.remove(entry)
        self.release_by_group(sorted(behind, key=lambda e: -self.page_index(e)), now)

    def make_state(
        self, page: Entry, planned: PlannedState, request: CacheRequest, *, now: float | None
    ) -> bool:
        """The running ``page`` ended its step at ``planned.position``: it is kept there (False:
        the checkpoint budget refused it; ``now`` None: a tentative decode hold, counted and
        admitted to the budget only when finish keeps it)."""
        count = now is not None
        if now is not None and not self.host.budget_room(planned.kinds, now):
            return False
        stats = self.host.stats
        if page.kind is EntryKind.SCRATCH:
            page.kind = EntryKind.STATE
            stats.state_bytes += page.nbytes
            stats.peak_state_bytes = max(stats.peak_state_bytes, stats.state_bytes)
        page.position = planned.position
        stats.label(page, planned.kinds)
        self.host.states.cache(page, request.prefix)
        for label in page.labels if count else ():
            stats.created[label] += 1
        if count and self.host.budget is not None:
            self.host.budget.admit(page)
        return True
