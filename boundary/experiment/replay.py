"""The replay driver: one stream through one cache under one policy, in arrival order.

Where it sits: in the experiment, after checkpoints: one stream through one cache model
(``boundary.cache``); ``harness`` and ``sweep`` call it.

Events are every request's arrival (lookup, then admission) and finish (output-side states,
then release), ordered by time, finishes first on ties; the order depends only on the
stream, so every policy and budget replays the same interleaving. Each request leaves a
``RequestRecord``: what matched, which checkpoint served it and who produced it, what it
created and cost.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from boundary.cache.accounting import CacheGeometry
from boundary.cache.hybrid import Admission, CacheConfig, CacheStats, HybridPrefixCache
from boundary.cache.memory import Entry
from boundary.cache.oracle import OracleCache
from boundary.cache.records import primary_kind
from boundary.cache.request import CacheRequest
from boundary.checkpoints.kinds import prompt_end_position
from boundary.checkpoints.retention import EngineGeometry
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.pins import SessionPins
from boundary.experiment.policies import RetentionPolicy, keeps_decode
from boundary.experiment.stream import Stream, StreamRequest


class BudgetMode(StrEnum):
    EQUAL_CAPACITY = "equal_capacity"  # blocks and states share one pool of the same size for every policy
    EQUAL_CHECKPOINT_BUDGET = "equal_checkpoint_budget"  # states get the same byte budget under every policy


class ProducerAge(StrEnum):
    PREVIOUS = "previous"  # the session's previous request
    TWO_BACK = "two_back"
    OLDER = "older"
    OTHER_SESSION = "other_session"  # another session's state (a shared prefix)


@dataclass(slots=True)
class RequestRecord:
    """One request under one policy. Lengths in tokens; ``oracle``: the reusable prefix;
    ``served_by``: the serving state's checkpoint kind (None: no hit); ``served_from_output``:
    the state sits past its producer's prompt (a decode-side state); ``flooring_loss``: for a
    state the same session produced, its logical position minus where it materialized.

    What the session's previous request left, seen at this request's lookup (kinds by label):
    ``retained_prev``: its states still cached; ``matched_prev``: those whose prefix id this
    prompt carries (hash-matched, before the last prompt token); ``prefill_side_prev``: the
    matched ones at or before the producer's prompt end (what a prefill worker holds under
    strict disaggregation). ``prompt_end_materialized``: the previous request's P_end state
    exists (it materializes at a position > 0; None: first request); ``prompt_end_unreachable``:
    it exists and its tokens are not a prefix of this prompt (its block twin aside).
    ``on_twin``: the policy's candidates that landed on P_end's block twin;
    ``junction_on_kept``: the junction landed on a state the policy keeps anyway.
    ``junction_present``: a reactive junction state on this prompt's prefix (at a block
    boundary) was cached at lookup: the branch had been observed and its junction kept."""

    rid: int
    session: str
    turn: int
    continuation: str
    tool_call: bool
    prompt_tokens: int
    attention: int
    recurrent: int
    joint: int
    junction: int
    oracle: int
    served_by: str | None
    served_from_output: bool | None
    producer_age: str | None
    flooring_loss: int | None
    states_created: int
    candidates: int
    collapsed: int
    recached: int
    forced_splits: int
    avoided_flops: float
    recompute_flops: float
    ttft_seconds: float
    arrival: float = 0.0
    output_tokens: int = 0
    prefill_seconds: float = 0.0  # the prefill's compute alone (FLOPs at the stated rate)
    prefill_steps: int = 1  # scheduler steps the prefill runs in, forced splits included
    split_seconds: float = 0.0  # the TTFT the forced splits cost (one step's fixed cost each)
    retained_prev: tuple[str, ...] = ()
    matched_prev: tuple[str, ...] = ()
    prefill_side_prev: tuple[str, ...] = ()
    prompt_end_materialized: bool | None = None
    prompt_end_unreachable: bool | None = None
    junction_present: bool = False
    on_twin: int = 0
    junction_on_kept: int = 0

    @classmethod
    def of(
        cls,
        request: StreamRequest,
        cost: PrefillCostModel,
        joint: int,
        *,
        prefill_steps: int = 1,
        **outcome: Any,
    ) -> RequestRecord:
        """The record of ``request`` resuming at ``joint`` in ``prefill_steps`` scheduler steps:
        who it is from the stream, its prefill cost and TTFT estimate from ``cost`` (a step's
        fixed cost per step, so each forced split pays one), every other field from ``outcome``."""
        n = request.num_prompt_tokens
        return cls(
            rid=request.rid,
            session=request.session,
            turn=request.turn,
            continuation=request.continuation.value,
            tool_call=request.tool_call,
            prompt_tokens=n,
            joint=joint,
            avoided_flops=cost.flops(0, joint),
            recompute_flops=cost.flops(joint, n),
            ttft_seconds=cost.ttft_seconds(joint, n, prefill_steps),
            arrival=request.arrival,
            output_tokens=request.output_tokens,
            prefill_seconds=cost.seconds(joint, n),
            prefill_steps=prefill_steps,
            split_seconds=outcome.get("forced_splits", 0) * cost.step_overhead_seconds,
            **outcome,
        )


@dataclass
class Run:
    """One replay. ``capacity_bytes`` / ``checkpoint_budget_bytes`` as configured;
    ``elapsed`` is the stream's simulated duration, ``wall_seconds`` the replay's cost."""

    policy: str
    budget: BudgetMode
    unit: int
    geometry: CacheGeometry
    capacity_bytes: float
    checkpoint_budget_bytes: float | None
    records: list[RequestRecord]
    stats: CacheStats
    overcommits: int
    peak_working_bytes: int
    peak_checkpoint_bytes: int
    elapsed: float
    wall_seconds: float
    output_reuse: bool = True
    lifetimes: list[float] = field(default_factory=list)
    survivors: int = 0
    survivor_ages: list[float] = field(default_factory=list)
    budget_exceedances: int | None = None  # allocations past the checkpoint budget (None: no budget)

    @property
    def mean_state_bytes(self) -> float:
        return (
            self.stats.state_byte_seconds / self.elapsed
            if self.elapsed > 0
            else float(self.stats.state_bytes)
        )

    @property
    def mean_block_bytes(self) -> float:
        return (
            self.stats.block_byte_seconds / self.elapsed
            if self.elapsed > 0
            else float(self.stats.block_bytes)
        )


def event_order(requests: Sequence[CacheRequest]) -> list[tuple[float, int, int]]:
    """``(time, 0 = finish / 1 = arrival, index)``, sorted."""
    events = [(r.arrival, 1, i) for i, r in enumerate(requests)]
    events += [(r.finish, 0, i) for i, r in enumerate(requests)]
    events.sort()
    return events


def replay_oracle(
    requests: Sequence[CacheRequest], unit: int, events: Sequence[tuple[float, int, int]]
) -> list[int]:
    oracle = OracleCache(unit)
    hits = [0] * len(requests)
    for now, arrival, i in events:
        if arrival:
            hits[i] = oracle.admit(requests[i], now)
        else:
            oracle.finish(requests[i].rid, now)
    return hits


def serving_kind(state: Entry | None) -> str | None:
    """The kind a hit on ``state`` is credited to (``records.primary_kind``; None: no label)."""
    return None if state is None or not state.labels else primary_kind(state)


def replay(
    stream: Stream,
    requests: Sequence[CacheRequest],
    policy: RetentionPolicy,
    config: CacheConfig,
    cost: PrefillCostModel,
    oracle: Sequence[int],
    *,
    budget: BudgetMode,
    events: Sequence[tuple[float, int, int]],
    geometry: EngineGeometry,
    check_every: int = 0,
) -> Run:
    """Replay ``requests`` (``stream``'s requests at the cache's unit) under ``policy`` decided
    on ``geometry`` (the policy's view of the engine: where decode states exist). ``check_every
    > 0`` checks the cache's invariants every that many events (tests do; measurements don't)."""
    cache = HybridPrefixCache(config)
    meta = stream.requests
    records: list[RequestRecord | None] = [None] * len(requests)
    made: dict[int, list[Entry]] = {}
    previous: dict[str, int] = {}
    final = {r.session: i for i, r in enumerate(meta)}  # each session's last request
    pins = SessionPins()
    started = time.perf_counter()
    last = 0.0
    for step, (now, arrival, i) in enumerate(events):
        last = now
        request = requests[i]
        if not arrival:
            made.setdefault(i, []).extend(cache.finish(request.rid, now, policy.finish(meta[i], geometry)))
            if final[meta[i].session] == i:
                pins.release(meta[i].session, now)
        else:
            sr = meta[i]
            before = _before_lookup(cache, requests, previous.get(sr.session), request, made, meta)
            decision = policy.admission(sr, geometry)
            admission = cache.admit(
                request, decision, now, tentative_decode=keeps_decode(policy, sr, geometry)
            )
            pins.admitted(cache, sr, decision, admission.created, now)
            made[i] = list(admission.created)
            previous[sr.session] = i
            records[i] = request_record(sr, admission, oracle[i], meta, cost, before)
        if check_every and step % check_every == 0:
            cache.check_invariants()
    cache.close(last)
    elapsed = last - (requests[0].arrival if requests else 0.0)
    done = [r for r in records if r is not None]
    return _run(policy.name, budget, config, cache, done, last, elapsed, time.perf_counter() - started)


def _run(
    name: str,
    budget: BudgetMode,
    config: CacheConfig,
    cache: HybridPrefixCache,
    records: list[RequestRecord],
    last: float,
    elapsed: float,
    wall: float,
) -> Run:
    lifetimes = [e.evicted_at - e.created_at for e in cache.stats.evicted_states if e.evicted_at is not None]
    live = cache.live_states()
    return Run(
        policy=name,
        budget=budget,
        unit=config.geometry.unit,
        geometry=config.geometry,
        capacity_bytes=config.capacity_bytes,
        checkpoint_budget_bytes=config.checkpoint_budget_bytes,
        records=records,
        stats=cache.stats,
        overcommits=cache.working.overcommits
        + (cache.checkpoints.overcommits if cache.checkpoints is not cache.working else 0),
        peak_working_bytes=cache.working.peak,
        peak_checkpoint_bytes=cache.budget.peak if cache.budget is not None else cache.checkpoints.peak,
        elapsed=elapsed,
        wall_seconds=wall,
        output_reuse=config.output_reuse,
        lifetimes=lifetimes,
        survivors=len(live),
        survivor_ages=[last - e.created_at for e in live],
        budget_exceedances=_exceedances(cache),
    )


def _exceedances(cache: HybridPrefixCache) -> int | None:
    """Admissions past the checkpoint budget (None: no budget): the pool's state budget, or the
    byte-LRU what-if's state arena's overcommits."""
    if cache.budget is not None:
        return cache.budget.exceedances
    return cache.checkpoints.overcommits if cache.checkpoints is not cache.working else None


def _reachable(request: CacheRequest, producer: CacheRequest, position: int, unit: int) -> bool:
    k = position // unit - 1
    return (
        0 < position < request.num_prompt_tokens
        and k < len(request.prefix)
        and k < len(producer.prefix)
        and request.prefix[k] == producer.prefix[k]
    )


def _before_lookup(
    cache: HybridPrefixCache,
    requests: Sequence[CacheRequest],
    prev: int | None,
    request: CacheRequest,
    made: dict[int, list[Entry]],
    meta: Sequence[StreamRequest],
) -> dict[str, Any]:
    """The ``RequestRecord`` fields about what the session's previous request left (see there)."""
    g = cache.geometry
    junction = False
    for end in range(g.block_size, request.num_prompt_tokens, g.block_size):
        found = cache.states.index.entries.get(request.prefix[end // g.unit - 1], ())
        if any("reactive" in e.labels for e in found):
            junction = True
            break
    if prev is None:
        return {"junction_present": junction}
    retained: set[str] = set()
    matched: set[str] = set()
    prefill: set[str] = set()
    for e in made.get(prev, ()):
        if not (e.live and e.keys):
            continue
        retained.update(e.labels)
        k = e.position // g.unit - 1
        if (
            0 < e.position < request.num_prompt_tokens
            and k < len(request.prefix)
            and request.prefix[k] == e.keys[0]
        ):
            matched.update(e.labels)
            if e.position <= meta[prev].num_prompt_tokens:
                prefill.update(e.labels)
    producer = requests[prev]
    p_state = prompt_end_position(producer.num_prompt_tokens, g.unit)
    return {
        "retained_prev": tuple(sorted(retained)),
        "matched_prev": tuple(sorted(matched)),
        "prefill_side_prev": tuple(sorted(prefill)),
        "prompt_end_materialized": p_state > 0,
        "prompt_end_unreachable": p_state > 0 and not _reachable(request, producer, p_state, g.unit),
        "junction_present": junction,
    }


def request_record(
    sr: StreamRequest,
    admission: Admission,
    oracle: int,
    meta: Sequence[StreamRequest],
    cost: PrefillCostModel,
    before: dict[str, Any],
) -> RequestRecord:
    """``sr``'s record from its admission (``meta``: the stream by ``rid``; ``before``: what
    ``_before_lookup`` saw, or nothing)."""
    hit = admission.hit
    state = hit.state
    age = loss = from_output = None
    served = serving_kind(state)
    if state is not None:
        producer = meta[state.creator]
        from_output = state.position > producer.num_prompt_tokens
        if producer.session != sr.session:
            age = ProducerAge.OTHER_SESSION.value
        else:
            back = sr.turn - producer.turn
            age = (
                ProducerAge.PREVIOUS
                if back == 1
                else ProducerAge.TWO_BACK
                if back == 2
                else ProducerAge.OLDER
            ).value
            logical = {
                "decode_end": producer.d_end,
                "input_end": producer.u_end,
                "prompt_end": producer.p_end - 1,
                "prompt_end_block": producer.p_end - 1,
            }.get(served or "")
            if logical is not None:
                loss = logical - state.position
    return RequestRecord.of(
        sr,
        cost,
        hit.joint,
        attention=hit.attention,
        recurrent=hit.recurrent,
        junction=hit.junction,
        oracle=oracle,
        served_by=served,
        served_from_output=from_output,
        producer_age=age,
        flooring_loss=loss,
        states_created=len(admission.plan.states),
        candidates=admission.plan.candidates,
        collapsed=admission.plan.collapsed,
        on_twin=admission.plan.on_twin,
        junction_on_kept=admission.plan.junction_on_kept,
        recached=admission.recached,
        forced_splits=admission.forced_splits,
        prefill_steps=admission.prefill_steps,
        **before,
    )
