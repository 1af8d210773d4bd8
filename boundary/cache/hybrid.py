"""A hybrid prefix cache in vLLM 0.33.0 align mode, retention interval 0.

Where it sits: the top of the cache model: it composes blocks, states, lookup, retention and
the engine steps; the experiment calls it.

``HybridPrefixCache`` replays requests: ``admit`` looks a prompt up (the joint hit), holds the
hit, allocates the request's attention blocks and running state, and creates the states the
policy's admission decision places inside the prompt; ``finish`` takes the finish decision
(D_end known): it creates the output-side states, un-caches the prompt-side states the
decision no longer keeps, then releases everything the request held (states first, then
blocks from the tail, as vLLM frees its groups) so that cached entries become evictable in
LRU order.

Two budget modes: one pool for blocks and states (vLLM's single block pool: equal total
capacity), or that same pool with the recurrent-state bytes it may keep capped at
``checkpoint_budget`` (the plan's equal checkpoint-byte budget, ``boundary.cache.budget``:
blocks keep the whole pool). Under a budget a new kept state evicts unheld kept states least
recently let go first, and is refused (not kept, ``stats.budget_refusals``) when the states
in-flight requests hold leave no room; ``budget.exceedances`` counts any admission past it.
The byte-LRU what-if (``engine_steps`` off) gives the budget an arena of its own instead,
the rest to blocks (no headline uses it).

``engine_steps`` (one arena of equal-size pages) replays a request as vLLM 0.33.0's block pool
runs it, page by page (``boundary.cache.engine_steps``), for eviction that picks vLLM's
victims; decode boundaries stay keyed while the request may keep one
(``admit(tentative_decode=True)``), and ``admit(run_prefill=False)`` plus ``step`` lets a
caller feed the engine's own steps when requests run concurrently.
"""

from __future__ import annotations

from collections import Counter

from boundary.cache.accounting import cdiv
from boundary.cache.blocks import AttentionBlocks
from boundary.cache.budget import StateBudget
from boundary.cache.chunking import prefill_chunk_ends
from boundary.cache.engine_steps import EngineSteps
from boundary.cache.eviction import FreeQueue
from boundary.cache.lookup import Hit, find_joint_hit
from boundary.cache.memory import Arena, Entry, EntryKind
from boundary.cache.records import Admission, CacheConfig, CacheStats, InFlight, primary_kind
from boundary.cache.request import CacheRequest
from boundary.cache.retention import PlannedState, plan_retention
from boundary.cache.states import RecurrentStates
from boundary.checkpoints.retention import Decision, Phase

__all__ = ["Admission", "CacheConfig", "CacheStats", "HybridPrefixCache", "primary_kind"]


class HybridPrefixCache:
    """One full-attention group and one recurrent group over shared memory.

    Invariants (``check_invariants``): every key in either index maps to live entries that
    carry it, and back; a state's single key names exactly the prefix of its position; each
    arena's ``used`` is the sum of its live entries; an entry's ``refs`` equals the number of
    in-flight requests holding it plus its pins; held entries are never evictable; unheld live entries are
    cached (uncached ones are freed on release).
    """

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self.geometry = config.geometry
        self.blocks = AttentionBlocks(self.geometry)
        self.states = RecurrentStates(self.geometry)
        self.stats = CacheStats()
        budget = config.checkpoint_budget_bytes
        # page by page the budget caps admitted states inside the one pool (``StateBudget``);
        # the byte-LRU what-if gives states an arena of their own beside the blocks'
        split = budget is not None and not config.engine_steps
        working = config.capacity_bytes - (budget or 0) if split else config.capacity_bytes
        policy = (
            FreeQueue(int(working // self.geometry.pool_page_bytes), self.geometry.pool_page_bytes)
            if config.engine_steps
            else config.eviction()
        )
        self.working = Arena("working", working, policy, self._evicted)
        self.checkpoints = (
            Arena("checkpoints", budget, config.eviction(), self._evicted)
            if split and budget is not None
            else self.working
        )
        self.budget = StateBudget(budget) if budget is not None and config.engine_steps else None
        self._arena = {
            EntryKind.BLOCK: self.working,
            EntryKind.SCRATCH: self.working,
            EntryKind.STATE: self.checkpoints,
        }
        self._in_flight: dict[int, InFlight] = {}
        self._next_eid = 0
        self._pinned: Counter[int] = Counter()  # state eid -> pins (``pin``)
        self._engine = EngineSteps(self)

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
        hit = self.lookup(request)
        held_states = self._hold_hit(hit, now)
        if self.config.engine_steps:
            return self._engine.admit(request, decision, hit, held_states, now, run_prefill, tentative_decode)
        return self._admit_whole(request, decision, hit, held_states, now)

    def step(self, rid: int, end: int, now: float) -> None:
        """``engine_steps``: request ``rid`` was scheduled up to ``end`` computed tokens (one
        prefill chunk or one decode token), at ``now``: vLLM's ``allocate_slots`` for it."""
        self._advance(now)
        self._engine.step(self._in_flight[rid], end, now)

    def finish(self, rid: int, now: float, decision: Decision | None = None) -> tuple[Entry, ...]:
        """The request stopped: apply the finish decision (default: the admission one) — create
        its decode keeps, un-cache the prompt-side states it no longer keeps — and release what
        the request held."""
        self._advance(now)
        flight = self._in_flight.pop(rid)
        final = flight.decision if decision is None else decision
        if self.config.engine_steps:
            return self._engine.finish(flight, final, now)
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
            decoded = self._admit_state(planned, request, flight.table, now)
            if decoded is not None:
                created.append(decoded)
                flight.states.append(decoded)
        for state in sorted(flight.states, key=lambda e: -e.position):
            self._release(state, now)
        for block in reversed(flight.table):
            self._release(block, now)
        if flight.scratch is not None:
            self._release(flight.scratch, now)
        return tuple(created)

    def pin(self, state: Entry, now: float) -> None:
        """Hold ``state`` beyond its creator (a keep held until the session's next user turn)
        until ``unpin``: a pinned state is never evicted."""
        self._advance(now)
        self.checkpoints.hold(state, now)
        if self.budget is not None:
            self.budget.held(state)
        self._pinned[state.eid] += 1

    def unpin(self, state: Entry, now: float) -> None:
        self._advance(now)
        self._pinned[state.eid] -= 1
        if not self._pinned[state.eid]:
            del self._pinned[state.eid]
        self._release(state, now)

    def close(self, now: float) -> None:
        """Account occupancy up to ``now`` (the end of the replay)."""
        self._advance(now)

    # -- internals ------------------------------------------------------------------------
    def _hold_hit(self, hit: Hit, now: float) -> list[Entry]:
        """Hold the hit's blocks and state; a partially hit block is copied, then let go (now
        most recent: at once, or when the scheduling step ends under ``engine_steps``)."""
        whole = hit.joint // self.geometry.block_size
        for block in hit.blocks[:whole]:
            self.working.hold(block, now)
        if self.config.engine_steps:
            self._engine.begin(now)
        for block in hit.blocks[whole:]:
            self.working.hold(block, now)
            if self.config.engine_steps:
                self._engine.hold_until_step_end(block, now)
            else:
                self.working.release(block, now)
        if hit.state is None:
            return []
        self.checkpoints.hold(hit.state, now)
        if self.budget is not None:
            self.budget.held(hit.state)
        hit.state.hits += 1
        for label in hit.state.labels:
            self.stats.state_hits[label] += 1
        return [hit.state]

    def _admit_whole(
        self, request: CacheRequest, decision: Decision, hit: Hit, held_states: list[Entry], now: float
    ) -> Admission:
        """``admit`` at once: every block the request will compute, its running state and its
        in-prompt states allocated now."""
        table = self._allocate_table(request, hit, now)
        scratch = self._allocate(EntryKind.SCRATCH, self.geometry.state_bytes, 0, request.rid, now)
        plan = plan_retention(
            decision,
            junction=hit.junction,
            joint=hit.joint,
            num_prompt_tokens=request.num_prompt_tokens,
            geometry=self.geometry,
            junction_at_unit=self.config.junction_at_unit,
        )
        created: list[Entry] = []
        recached = 0
        for planned in plan.states:
            if planned.in_prompt:
                recached += self._cached_already(planned, request)
                state = self._admit_state(planned, request, table, now)
                if state is not None:
                    created.append(state)
        flight = InFlight(request, table, held_states + created, scratch, decision, created)
        self._in_flight[request.rid] = flight
        wanted = [s.position for s in created if s.position < request.num_prompt_tokens]
        native, stopped = self._chunk_ends(request, hit, wanted)
        split_at = tuple(sorted(set(stopped) - set(native)))
        forced = len(stopped) - len(native)
        return Admission(hit, plan, tuple(created), forced, recached, len(stopped), split_at)

    def _allocate_table(self, request: CacheRequest, hit: Hit, now: float) -> list[Entry]:
        """The request's block table: the hit blocks up to the last whole one (it writes its own
        copy of a partially hit block, vLLM's copy-on-write tail), then a block per computed
        block, the full ones cached."""
        g = self.geometry
        whole = hit.joint // g.block_size
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
        return table

    def _chunk_ends(self, request: CacheRequest, hit: Hit, wanted: list[int]) -> tuple[list[int], list[int]]:
        """The prefill's chunk ends: the scheduler's own, and with stops at ``wanted``."""
        g, n, chunk = self.geometry, request.num_prompt_tokens, self.config.max_chunk_tokens
        native = prefill_chunk_ends(hit.joint, n, g, junction=hit.junction, max_chunk_tokens=chunk)
        stopped = prefill_chunk_ends(
            hit.joint, n, g, junction=hit.junction, stops=wanted, max_chunk_tokens=chunk
        )
        return native, stopped

    def _admit_state(
        self, planned: PlannedState, request: CacheRequest, table: list[Entry], now: float
    ) -> Entry | None:
        """``_create_state`` under the checkpoint budget's admission rule: with a budget, a state
        is admitted only if it fits beside the states in-flight requests hold (unheld ones are
        evicted LRU to make room); otherwise it is not created, and the refusal is counted
        under its kind. Retained states therefore never exceed the budget. Page by page the
        same rule runs inside the one pool (``budget_room``)."""
        if not self.budget_room(planned.kinds, now):
            return None
        if self.checkpoints is not self.working:
            held = sum(e.nbytes for e in self.checkpoints.charged if e.refs)
            if held + self.geometry.state_bytes > self.checkpoints.capacity:
                self.stats.budget_refusals[planned.kinds[0] if planned.kinds else "unlabelled"] += 1
                return None
        return self._create_state(planned, request, table, now)

    def _create_state(
        self, planned: PlannedState, request: CacheRequest, table: list[Entry], now: float
    ) -> Entry:
        state = self._allocate(EntryKind.STATE, self.geometry.state_bytes, planned.position, request.rid, now)
        self.stats.label(state, planned.kinds)
        self.states.cache(state, request.prefix)
        if planned.alias:
            index = planned.position // self.geometry.block_size
            if index < len(table):
                self.blocks.cache_alias(table[index], planned.position, request.prefix)
        for label in state.labels:
            self.stats.created[label] += 1
        if self.budget is not None:
            self.budget.admit(state)
        return state

    def budget_room(self, kinds: tuple[str, ...], now: float) -> bool:
        """Page by page under a checkpoint budget: room for one more kept state, made by evicting
        unheld kept states, least recently let go first; False (the refusal counted under the
        first of ``kinds``) when the held ones leave none. Always True without a budget."""
        budget = self.budget
        if budget is None:
            return True
        while not budget.fits(self.geometry.state_bytes):
            victim = budget.victim()
            if victim is None:
                self.stats.budget_refusals[kinds[0] if kinds else "unlabelled"] += 1
                return False
            self.stats.evictions[("state", "state")] += 1
            victim.evicted_at = now
            self.stats.evicted_states.append(victim)
            self.states.drop(victim)
            self.working.uncache(victim)  # its pages free where it stood in the queue
            self._forget(victim)
        return True

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
        self._release_together([entry], now)

    def _release_together(self, entries: list[Entry], now: float) -> None:
        """Let go of ``entries`` (one kind, in vLLM's order) in one go (``Arena.release_together``)."""
        if entries:
            arena = self._arena[entries[0].kind]
            assert all(self._arena[e.kind] is arena for e in entries)
            arena.release_together(entries, now)
        for entry in entries:
            if not entry.live:
                self._forget(entry)
            elif self.budget is not None:
                self.budget.released(entry)

    def _evicted(self, entry: Entry, now: float, cause: EntryKind) -> None:
        self.stats.evictions[(entry.kind.name.lower(), cause.name.lower())] += 1
        if entry.kind is EntryKind.STATE:
            self.states.drop(entry)
            self.stats.evicted_states.append(entry)
        else:
            self.blocks.drop(entry)
        self._forget(entry)

    def _forget(self, entry: Entry) -> None:
        if self.budget is not None:
            self.budget.forget(entry)
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
        for e in self._engine.step_end:
            expected[e.eid] += 1
        expected.update(self._pinned)
        arenas = {id(self.working): self.working, id(self.checkpoints): self.checkpoints}
        state_bytes = block_bytes = 0
        by_kind: Counter[str] = Counter()
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
                    by_kind[primary_kind(e)] += e.nbytes if e.labels else 0
                    assert len(e.keys) == 1 and e.position > 0 and e.position % g.unit == 0, f"bad state {e}"
                elif e.kind is EntryKind.BLOCK:
                    block_bytes += e.nbytes
                    assert e.position % g.block_size == 0, f"bad block {e}"
                else:
                    assert not e.keys and e.refs == 1, f"scratch {e} is cached or shared"
        assert state_bytes == self.stats.state_bytes, "state byte counter drifted"
        assert block_bytes == self.stats.block_bytes, "block byte counter drifted"
        counted = self.stats.state_bytes_by_kind
        drift = {k: (counted[k], by_kind[k]) for k in {*counted, *by_kind} if counted[k] != by_kind[k]}
        assert not drift and all(v >= 0 for v in by_kind.values()), f"state bytes by kind drifted: {drift}"
        if self.budget is not None:
            self._check_budget(self.budget)

    def _check_budget(self, budget: StateBudget) -> None:
        admitted = [e for e in self.working.charged if e in budget]
        assert all(e.kind is EntryKind.STATE and e.keys for e in admitted), "an admitted state is not kept"
        assert budget.used == sum(e.nbytes for e in admitted), "admitted state bytes drifted"
        assert budget.used <= budget.capacity or budget.exceedances, "over the budget, uncounted"
        assert set(budget.unheld) == {e for e in admitted if e.refs == 0}, "unheld admitted states drifted"
