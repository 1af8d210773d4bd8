"""Closed-loop serving: sessions, a router, N replicas, each a continuous-batching scheduler
over its own prefix cache.

Where it sits: above ``scheduler`` (one replica), the cache model and ``replay``'s request
records; ``sweep`` runs it per (concurrency, capacity, policy) and ``load`` summarizes it.

``concurrency`` users run sessions closed-loop: a session's next request arrives only after
its previous reply has finished, plus a client delay (after a tool call the tool latency,
before a new user message the think time; both exponential, drawn once per request from
``seed`` so every policy sees the same delays). A user who finishes a session starts the
next unstarted one after a think time; the first ``concurrency`` sessions start at a think
time each. With ``recorded_delays`` (a trace that records arrival times) the delay before a
session's later request is the one its recorded schedule implies: its arrival minus its
previous request's finish on the stream's uncontended schedule (``arrivals.recorded``), so a
request arrives that long after its previous reply finished under the simulated load; the first
request of a session still waits a drawn think time. The measurement window ends when the
first user finds no session left (after it, fewer than ``concurrency`` users remain).

The router sends a request to a replica: ``session_sticky`` pins a session to replica
``ordinal % replicas`` (its cache sees the whole session), ``round_robin`` takes replicas in
turn. Each replica plans steps (``scheduler.Replica``); a step's time comes from
``cost.StepCostModel``. Decode-only steps with nothing arriving are taken in one stride
(exact: the batch does not change until a sequence finishes or a request arrives).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from boundary.cache.hybrid import CacheConfig, HybridPrefixCache
from boundary.cache.request import CacheRequest
from boundary.checkpoints.retention import EngineGeometry
from boundary.experiment.cost import StepCostModel
from boundary.experiment.pins import SessionPins
from boundary.experiment.policies import RetentionPolicy, keeps_decode
from boundary.experiment.replay import RequestRecord, request_record
from boundary.experiment.scheduler import Admit, Replica, Running, SchedulerConfig, Step
from boundary.experiment.stream import Continuation, StreamRequest

# States a running request holds: its running state, the hit state and up to two it keeps.
RESERVED_STATES = 4


class Routing(StrEnum):
    SESSION_STICKY = "session_sticky"
    ROUND_ROBIN = "round_robin"


@dataclass(frozen=True, slots=True)
class LoadModel:
    """The serving setup of one load point (seconds)."""

    concurrency: int
    replicas: int = 1
    routing: Routing = Routing.SESSION_STICKY
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    tool_latency: float = 1.0
    think_time: float = 10.0
    seed: int = 0
    recorded_delays: bool = False


@dataclass(frozen=True, slots=True)
class Timing:
    """One request as served: its replica, arrival, first token and finish; ``delay``: the
    client delay before it (think or tool time)."""

    replica: int
    arrival: float
    first_token: float
    finish: float
    delay: float

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival


@dataclass
class ServingRun:
    """``records`` / ``timings`` by stream index; ``window``: the measurement window's end."""

    policy: str
    model: LoadModel
    records: list[RequestRecord]
    timings: list[Timing]
    caches: list[HybridPrefixCache]
    window: float
    decode_steps: int = 0
    decode_sequences: int = 0

    @property
    def mean_decode_batch(self) -> float:
        """Sequences per decoding step, over every replica's steps (1 when none decoded)."""
        return self.decode_sequences / self.decode_steps if self.decode_steps else 1.0

    @property
    def elapsed(self) -> float:
        """From the first request's arrival to the last finish."""
        return max(self.caches[0].stats.clock - min((t.arrival for t in self.timings), default=0.0), 0.0)


def client_delays(sessions: Sequence[Sequence[StreamRequest]], model: LoadModel) -> list[list[float]]:
    """Every request's client delay, drawn once in session order (seeded); with
    ``recorded_delays`` a later request's is its recorded gap (arrival minus the previous
    request's finish on the stream's schedule, at least 0)."""
    rng = random.Random(model.seed)

    def draw(mean: float) -> float:
        return rng.expovariate(1.0 / mean) if mean > 0 else 0.0

    def delay(s: Sequence[StreamRequest], t: int) -> float:
        r = s[t]
        if model.recorded_delays and t:
            return max(r.arrival - s[t - 1].finish, 0.0)
        return draw(model.tool_latency if r.continuation is Continuation.TOOL else model.think_time)

    return [[delay(s, t) for t in range(len(s))] for s in sessions]


def serve(
    stream: Sequence[StreamRequest],
    requests: Sequence[CacheRequest],
    policy: RetentionPolicy,
    cache_config: CacheConfig,
    geometry: EngineGeometry,
    cost: StepCostModel,
    model: LoadModel,
    oracle: Sequence[int] = (),
) -> ServingRun:
    """Serve ``stream`` (``rid`` == index; ``requests``: the cache's view of it) under
    ``policy``, every replica with a cache of ``cache_config``; sessions in order of their
    first request."""
    sim = _Simulation(stream, requests, policy, cache_config, geometry, cost, model, oracle)
    sim.run()
    return ServingRun(
        policy.name,
        model,
        sim.done_records(),
        sim.done_timings(),
        sim.caches,
        sim.window,
        sim.decode_steps,
        sim.decode_sequences,
    )


# ``_Simulation.__init__`` takes ``serve``'s parameters one for one (alike by design: ``serve`` is
# the public signature, the simulation its state).
class _Simulation:
    """The event loop: ``(time, kind, seq, payload)``, kind 0 a replica's step end, 1 an
    arrival, 2 an idle replica's next step: on ties step ends first (a finished request's slot
    is free for the arrival), then arrivals, then the step that schedules them together."""

    def __init__(
        self,
        stream: Sequence[StreamRequest],
        requests: Sequence[CacheRequest],
        policy: RetentionPolicy,
        cache_config: CacheConfig,
        geometry: EngineGeometry,
        cost: StepCostModel,
        model: LoadModel,
        oracle: Sequence[int],
    ) -> None:
        grouped: dict[str, list[StreamRequest]] = {}
        for i, r in enumerate(stream):
            if r.rid != i:
                raise ValueError(f"stream requests must have rid == index (request {i} has {r.rid})")
            grouped.setdefault(r.session, []).append(r)
        sessions = list(grouped.values())
        self.stream, self.sessions, self.requests, self.policy = stream, sessions, requests, policy
        self.geometry, self.cost, self.model = geometry, cost, model
        self.oracle = oracle
        self.meta = {r.rid: (s, t) for s, session in enumerate(sessions) for t, r in enumerate(session)}
        self.delays = client_delays(sessions, model)
        self.caches = [HybridPrefixCache(cache_config) for _ in range(model.replicas)]
        working = cache_config.capacity_bytes - (cache_config.checkpoint_budget_bytes or 0)
        self.replicas = [Replica(model.scheduler, self._admitter(k), working) for k in range(model.replicas)]
        self.steps: list[Step | None] = [None] * model.replicas
        self.records: dict[int, RequestRecord] = {}
        self.timings: dict[int, Timing] = {}
        self.arrivals: dict[int, tuple[float, int]] = {}
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.next_session = 0
        self.window = math.inf
        self.turns = 0
        self.decode_steps = self.decode_sequences = 0
        self.pins = SessionPins()

    def run(self) -> None:
        for _ in range(min(self.model.concurrency, len(self.sessions))):
            self._start_session(0.0)
        now = 0.0
        while self.events:
            now, kind, _, payload = heapq.heappop(self.events)
            if kind == 0:
                self._step_end(payload, now)
            elif kind == 1:
                self._arrive(payload, now)
            else:
                self._start_step(payload, now)
        for cache in self.caches:
            cache.close(now)
        if math.isinf(self.window):
            self.window = now

    def _push(self, time: float, kind: int, payload: int) -> None:
        heapq.heappush(self.events, (time, kind, self.seq, payload))
        self.seq += 1

    def _start_session(self, now: float) -> None:
        s = self.next_session
        if s >= len(self.sessions):
            self.window = min(self.window, now)
            return
        self.next_session += 1
        self._push(now + self.delays[s][0], 1, self.sessions[s][0].rid)

    def _route(self, rid: int) -> int:
        if self.model.routing is Routing.SESSION_STICKY:
            return self.meta[rid][0] % self.model.replicas
        self.turns += 1
        return (self.turns - 1) % self.model.replicas

    def _arrive(self, rid: int, now: float) -> None:
        k = self._route(rid)
        s, t = self.meta[rid]
        r = self.sessions[s][t]
        self.arrivals[rid] = (now, k)
        g = self.caches[k].geometry
        blocks = -(-len(r.tokens) // g.block_size)
        reserve = blocks * g.block_bytes + RESERVED_STATES * g.state_bytes
        self.replicas[k].waiting.append(
            Running(rid, now, r.num_prompt_tokens, max(r.output_tokens, 1), reserve)
        )
        if not self.replicas[k].busy:
            self.replicas[k].busy = True  # its next step starts once every arrival at ``now`` is in
            self._push(now, 2, k)

    def _admitter(self, k: int) -> Admit:
        def admit(rid: int, now: float) -> tuple[int, tuple[int, ...]]:
            s, t = self.meta[rid]
            sr = self.sessions[s][t]
            decision = self.policy.admission(sr, self.geometry)
            tentative = keeps_decode(self.policy, sr, self.geometry)
            admission = self.caches[k].admit(self.requests[rid], decision, now, tentative_decode=tentative)
            self.pins.admitted(self.caches[k], sr, decision, admission.created, now)
            oracle = self.oracle[rid] if self.oracle else 0
            record = request_record(sr, admission, oracle, self.stream, self.cost.prefill, {})
            record.arrival = now
            self.records[rid] = record
            return admission.hit.joint, admission.split_at

        return admit

    def _start_step(self, k: int, now: float) -> None:
        replica = self.replicas[k]
        step = replica.plan(now)
        if not step:
            replica.busy, self.steps[k] = False, None
            return
        flops = sum(self.cost.prefill.flops(a, b) for _, a, b in step.chunks)
        seconds = self.cost.seconds(len(step.decode), flops)
        if not step.chunks:
            left = min(s.output - s.produced for s in step.decode)
            upcoming = min((e[0] for e in self.events if e[1] == 1), default=math.inf)
            fits = math.ceil((upcoming - now) / seconds) if math.isfinite(upcoming) else left
            step.repeat = max(1, min(left, fits))
        replica.busy, self.steps[k] = True, step
        if step.decode:
            self.decode_steps += step.repeat
            self.decode_sequences += step.repeat * len(step.decode)
        self._push(now + seconds * step.repeat, 0, k)

    def _step_end(self, k: int, now: float) -> None:
        step = self.steps[k]
        assert step is not None
        for s in self.replicas[k].complete(step, now):
            self._finish(k, s, now)
        self._start_step(k, now)

    def _finish(self, k: int, s: Running, now: float) -> None:
        si, t = self.meta[s.index]
        sr = self.sessions[si][t]
        self.caches[k].finish(s.index, now, self.policy.finish(sr, self.geometry))
        assert s.first_token is not None
        self.timings[s.index] = Timing(k, s.arrival, s.first_token, now, self.delays[si][t])
        if t + 1 < len(self.sessions[si]):
            self._push(now + self.delays[si][t + 1], 1, self.sessions[si][t + 1].rid)
        else:
            self.pins.release(sr.session, now)
            self._start_session(now)

    def done_records(self) -> list[RequestRecord]:
        return [self.records[rid] for rid in sorted(self.records)]

    def done_timings(self) -> list[Timing]:
        return [self.timings[rid] for rid in sorted(self.timings)]
