# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""Replay request streams through vLLM's real scheduler and KV-cache manager, without a model.

Where it sits: the engine end, as a harness without a model: it drives ``boundary_vllm.scheduler``
by hand over ``workload`` streams, on the engine ``replay_config`` builds, checking states with
``worker_states``; the ``vllm`` test tier, ``benchmarks/vllm_units.py``,
``benchmarks/vllm_recorder.py`` and ``integrations/vllm/gpu_check.py`` call it.

A small hybrid KV-cache layout (one full-attention group, one Mamba group in align mode,
``prefix_cache_retention_interval=0``) is driven by hand: each request is added, scheduled
step by step, and fed its recorded output tokens as if sampled, until it finishes. ``run``
replays one request at a time; ``run_sessions`` keeps several sessions in flight (each
session's next request arrives when its previous one finishes) and, with async scheduling,
schedules step t+1 before it processes step t's output, as ``EngineCore.step_with_batch_queue``
does. What comes back per request is vLLM's own joint prefix-cache hit at admission (the
computed tokens it starts from), the kind of checkpoint that served it, and the prefill chunks
the scheduler cut. With ``check_states`` every step also runs through
``boundary_vllm.worker_states`` (a model of the worker's recurrent-state moves), which records
any state a request reads that is not of exactly its own tokens. Deterministic: same stream,
same results.

The engine's shape and the vLLM configs built from it are ``boundary_vllm.replay_config``'s.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # drives non-public vLLM classes

import tempfile
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from boundary.checkpoints.retention import Variant
from boundary_vllm.compat import runner_output
from boundary_vllm.counters import CheckpointCounters
from boundary_vllm.hints import SESSION_KEY, encode_hints
from boundary_vllm.replay_config import EngineShape, kv_cache_config, vllm_config
from boundary_vllm.scheduler import AsyncBoundaryScheduler, BoundaryScheduler
from boundary_vllm.worker_states import WorkerStates
from boundary_vllm.workload import Turn

DEFAULT_SHAPE = EngineShape()  # frozen: safe as a default


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """One request of a stream: its prompt, the tokens the model "samples", and its U_end hint."""

    prompt_token_ids: tuple[int, ...]
    output_token_ids: tuple[int, ...]
    input_end: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    policy: Variant | None = None  # a per-request policy (the engine must allow ``request_policy``)
    round_trip: float | None = None
    horizon: int | None = None
    session: str | None = None  # sent as the frontend does for recorded traces

    def __post_init__(self) -> None:
        if not self.output_token_ids:
            raise ValueError("a replayed request samples at least one token")

    @classmethod
    def from_turn(cls, turn: Turn, *, hints: bool = True) -> ReplayRequest:
        """A conversation turn; ``hints=False`` sends it without U_end (as an unmodified frontend)."""
        stop = turn.output.stop_token_id
        return cls(
            tuple(turn.prompt.token_ids),
            tuple(turn.output.token_ids),
            turn.prompt.u_end if hints else None,
            () if stop is None else (stop,),
        )


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """What vLLM did with one request."""

    hit_tokens: int  # the joint (attention and recurrent) prefix-cache hit at admission
    hit_kind: str  # the checkpoint kind whose state served it ("miss", "untracked"; "n/a" without the plugin)
    prefill_chunks: tuple[int, ...]  # tokens scheduled per prefill step
    block_copies: int  # copy-on-write block copies vLLM scheduled while the request ran
    admitted: int = field(default=0, compare=False)  # the step that first scheduled it
    finished: int = field(default=0, compare=False)  # the step whose output finished it
    preemptions: int = field(default=0, compare=False)
    # (step, order in the step, computed tokens after it) for each step that scheduled it
    steps: tuple[tuple[int, int, int], ...] = field(default=(), compare=False)


@dataclass(slots=True)
class _Live:
    """A request in flight in ``run_sessions``."""

    item: ReplayRequest
    request: Request
    session: int
    hit: int | None = None
    kind: str = "n/a"
    chunks: list[int] = field(default_factory=list)
    copies: int = 0
    sampled: int = 0
    admitted: int = 0
    steps: list[tuple[int, int, int]] = field(default_factory=list)


class _SessionDriver:
    """``Replay.run_sessions``: the engine loop of ``EngineCore.step_with_batch_queue`` over a
    queue of sessions. The loop ends: every step either schedules (queue not full) or
    processes the oldest batch, and each request's outputs are finite."""

    def __init__(self, replay: Replay, sessions: Sequence[Sequence[ReplayRequest]], concurrency: int) -> None:
        self.replay = replay
        self.scheduler = replay.scheduler
        self.sessions = sessions
        self.concurrency = concurrency
        self.depth = 2 if replay.shape.async_scheduling else 1
        self.outcomes: list[list[ReplayOutcome]] = [[] for _ in sessions]
        self.waiting = deque(range(len(sessions)))
        self.live: dict[str, _Live] = {}
        self.batches: deque[tuple[SchedulerOutput, dict[str, bool]]] = deque()
        self.step_no = 0

    def run(self) -> list[list[ReplayOutcome]]:
        self._refill()
        while self.live or self.batches:
            if self.scheduler.has_requests():
                step = self._schedule()
                if len(self.batches) < self.depth and (
                    step.total_num_scheduled_tokens > 0 or self.scheduler.has_requests()
                ):
                    continue
            elif not self.batches:
                break
            self._process(*self.batches.pop())
            self._collect()
            self._refill()
        return self.outcomes

    def _start(self, session: int) -> None:
        item = self.sessions[session][len(self.outcomes[session])]
        request = self.replay.request(item)
        self.live[request.request_id] = _Live(item, request, session)
        self.scheduler.add_request(request)

    def _refill(self) -> None:
        while self.waiting and len({v.session for v in self.live.values()}) < self.concurrency:
            self._start(self.waiting.popleft())

    def _schedule(self) -> SchedulerOutput:
        """Schedule one step and note, per request, its hit, prefill chunk and whether it samples."""
        self.step_no += 1
        step = self.replay._schedule()
        retention = getattr(self.scheduler, "boundary_retention", None)
        for new in step.scheduled_new_reqs:
            entry = self.live.get(new.req_id)
            if entry is not None and entry.hit is None:
                entry.hit, entry.admitted = new.num_computed_tokens, self.step_no
                if retention is not None:
                    entry.kind = str(retention.classify_hit(entry.request, entry.hit))
        samples = {}
        for order, (rid, n) in enumerate(step.num_scheduled_tokens.items()):
            request, entry = self.scheduler.requests[rid], self.live[rid]
            entry.steps.append((self.step_no, order, request.num_computed_tokens))
            if entry.sampled == 0 and request.num_computed_tokens - n < request.num_prompt_tokens:
                entry.chunks.append(n)
            entry.copies += len(step.kv_cache_block_copies or ())
            samples[rid] = not request.is_prefill_chunk
        self.batches.appendleft((step, samples))
        return step

    def _process(self, step: SchedulerOutput, samples: dict[str, bool]) -> None:
        """Feed the step's sampled tokens (each request's recorded outputs, in order)."""
        ids = list(step.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in ids:
            entry = self.live.get(rid)
            if entry is None or not samples[rid]:
                sampled.append([])
                continue
            outputs = entry.item.output_token_ids
            sampled.append([outputs[min(entry.sampled, len(outputs) - 1)]])
            entry.sampled += 1
        self.scheduler.update_from_output(step, runner_output(ids, sampled))

    def _collect(self) -> None:
        """Record the requests that finished; their sessions send their next request."""
        for rid in [r for r in self.live if r not in self.scheduler.requests]:
            entry = self.live.pop(rid)
            assert entry.hit is not None
            done = self.outcomes[entry.session]
            done.append(
                ReplayOutcome(
                    entry.hit,
                    entry.kind,
                    tuple(entry.chunks),
                    entry.copies,
                    entry.admitted,
                    self.step_no,
                    entry.request.num_preemptions,
                    tuple(entry.steps),
                )
            )
            if len(done) < len(self.sessions[entry.session]):
                self._start(entry.session)


class Replay:
    """A live scheduler; ``run`` replays one request to completion, ``run_sessions`` several
    sessions concurrently."""

    def __init__(self, shape: EngineShape = DEFAULT_SHAPE, *, check_states: bool = False) -> None:
        self.shape = shape
        self._model_dir = tempfile.TemporaryDirectory(prefix="boundary-replay-")
        self.vllm_config = vllm_config(shape, Path(self._model_dir.name))
        self.kv_cache_config = kv_cache_config(
            shape, self.vllm_config.cache_config.prefix_cache_retention_interval
        )
        self.scheduler = _scheduler_cls(shape)(
            vllm_config=self.vllm_config,
            kv_cache_config=self.kv_cache_config,
            structured_output_manager=StructuredOutputManager(self.vllm_config),
            block_size=shape.block_size,
            hash_block_size=self.hash_block_size,
            log_stats=True,
        )
        hash_fn = get_hash_fn_by_name(self.vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self._hasher = get_request_block_hasher(self.hash_block_size, hash_fn)
        self._count = 0
        self._tokens: dict[str, tuple[int, ...]] = {}
        self.states = (
            WorkerStates(
                self.kv_cache_config, self.scheduler.kv_cache_manager.block_pool, self._tokens.__getitem__
            )
            if check_states
            else None
        )

    @property
    def hash_block_size(self) -> int:
        return self.shape.prefix_match_unit or self.shape.block_size

    @property
    def counters(self) -> CheckpointCounters | None:
        """The plugin's counters (None for the baseline scheduler)."""
        report = getattr(self.scheduler, "boundary_report", None)
        return report() if report is not None else None

    def request(self, item: ReplayRequest) -> Request:
        """The vLLM request for ``item``, hints in ``extra_args`` as the chat endpoint puts them."""
        self._count += 1
        policy = None if item.policy is None else item.policy.value
        hints = encode_hints(
            item.input_end,
            len(item.prompt_token_ids),
            policy=policy,
            round_trip=item.round_trip,
            horizon=item.horizon,
        )
        if item.session is not None:
            hints[SESSION_KEY] = item.session
        params = SamplingParams(
            max_tokens=len(item.output_token_ids),
            stop_token_ids=list(item.stop_token_ids),
            extra_args=hints or None,
            temperature=0.0,
        )
        rid = f"replay-{self._count}"
        self._tokens[rid] = (*item.prompt_token_ids, *item.output_token_ids)
        return Request(
            request_id=rid,
            prompt_token_ids=list(item.prompt_token_ids),
            sampling_params=params,
            pooling_params=None,
            block_hasher=self._hasher,
        )

    def run(self, item: ReplayRequest) -> ReplayOutcome:
        scheduler = self.scheduler
        request = self.request(item)
        rid = request.request_id
        scheduler.add_request(request)
        outputs = iter(item.output_token_ids)
        chunks: list[int] = []
        hit: int | None = None
        copies = 0
        while rid in scheduler.requests:
            step = self._schedule()
            copies += len(step.kv_cache_block_copies or ())
            if rid in step.num_scheduled_tokens and request.num_output_tokens == 0:
                chunks.append(step.num_scheduled_tokens[rid])
                if hit is None:  # num_computed_tokens was set to the hit, then advanced by the step
                    hit = request.num_computed_tokens - step.num_scheduled_tokens[rid]
            ids = list(step.num_scheduled_tokens)
            sampled = [[] if scheduler.requests[i].is_prefill_chunk else [next(outputs)] for i in ids]
            scheduler.update_from_output(step, runner_output(ids, sampled))
        assert hit is not None
        retention = getattr(scheduler, "boundary_retention", None)
        kind = retention.classify_hit(request, hit) if retention is not None else "n/a"
        return ReplayOutcome(hit, str(kind), tuple(chunks), copies)

    def run_all(self, stream: Iterable[ReplayRequest]) -> list[ReplayOutcome]:
        return [self.run(item) for item in stream]

    def _schedule(self) -> SchedulerOutput:
        step = self.scheduler.schedule()
        if self.states is not None:
            self.states.step(step, self.scheduler.requests)
        return step

    def run_sessions(
        self, sessions: Sequence[Sequence[ReplayRequest]], *, concurrency: int
    ) -> list[list[ReplayOutcome]]:
        """Replay ``sessions`` with up to ``concurrency`` of them in flight: a session's next
        request is added when its previous one finishes, the next session starts when one ends.
        With async scheduling the engine's batch queue is two deep: step t+1 is scheduled
        before step t's output is processed."""
        return _SessionDriver(self, sessions, concurrency).run()


def replay(stream: Sequence[ReplayRequest], shape: EngineShape = DEFAULT_SHAPE) -> list[ReplayOutcome]:
    """Each request's joint hit when ``stream`` runs in order on a fresh engine of ``shape``."""
    return Replay(shape).run_all(stream)


def _scheduler_cls(shape: EngineShape) -> type[Scheduler]:
    if shape.plugin:
        return AsyncBoundaryScheduler if shape.async_scheduling else BoundaryScheduler
    return AsyncScheduler if shape.async_scheduling else Scheduler
