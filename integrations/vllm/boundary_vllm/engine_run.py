# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""Run request streams through a real vLLM engine (``LLM``, in this process) with boundary's
scheduler, and log what the engine did per request.

Where it sits: the engine end, as a harness around a running vLLM: it drives
``boundary_vllm.scheduler`` through a real ``LLM``; ``scenarios``, ``benchmarks/engine.py``,
``integrations/vllm/gpu_check.py`` and the engine test tier call it.

Unlike ``boundary_vllm.replay`` (vLLM's scheduler driven by hand, outputs fed from a record),
here the model runs: the engine computes every prefill and samples every token, and the
recurrent states it reuses are the ones its worker copied. Per request this returns the joint
hit the engine served (``num_cached_tokens``), the tokens it generated with their top-1
logprobs, the time to first token, and the scheduler steps that admitted, advanced and freed it
(``StepLog``), so a cache model can be fed the engine's own event order.

Sessions run closed-loop: a session's next request is added when its previous one has finished.
Where a check needs a known answer, ``EngineRequest.forced`` makes the model generate exactly
those token ids (``ForcedTokens``, a per-request logits processor: Model Runner V2's interface on
the GPU wheels, the V1 adapter on the CPU build); forcing changes which token is sampled, never
the logprobs vLLM reports (raw logits).

Works on every supported build (``boundary_vllm.compat``); on CPU the engine needs
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` to stay in this process, which ``EngineRun`` sets (and a
1 GiB KV cache, ``VLLM_CPU_KVCACHE_SPACE``, unless set).
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # extends non-public vLLM classes

import gc
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

from boundary_vllm.compat import ASYNC_SCHEDULING, DIFF
from boundary_vllm.hints import SESSION_KEY, encode_hints
from boundary_vllm.scheduler import AsyncBoundaryScheduler, BoundaryScheduler

FORCE_KEY = "boundary_forced_tokens"  # extra_args entry: token ids the request must generate
FORCE_FROM_KEY = "boundary_forced_from"  # extra_args entry: the prompt length (output 0's position)


def forced_token(tokens: Sequence[int], forced_from: int, position: int) -> int | None:
    """The token forced at sequence ``position`` (the token sampled there): output
    ``position - forced_from`` of ``tokens``, None once they are written (or before)."""
    k = position - forced_from
    return int(tokens[k]) if 0 <= k < len(tokens) else None


def _force_row(logits: torch.Tensor, token: int) -> None:
    """Every logit of ``logits`` (one row) but ``token``'s becomes -inf; ``token``'s is kept."""
    keep = logits[token].clone()
    logits.fill_(float("-inf"))
    logits[token] = keep


def _forced(params: SamplingParams) -> tuple[list[int], int] | None:
    extra = params.extra_args or {}
    forced = extra.get(FORCE_KEY)
    if not forced:
        return None
    return [int(t) for t in forced], int(extra[FORCE_FROM_KEY])


if DIFF.logits_processor == "v2":
    # Model Runner V2's interface (0.33.0, 0.34.0: vllm.v1.sample.logits_processor is gone in 0.34.0)
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcessor

    class ForcedTokens(LogitsProcessor):
        """Makes a request generate exactly ``extra_args[FORCE_KEY]`` (then samples freely):
        every other token's logit becomes -inf while a forced token is due. Model Runner V2's
        custom logits-processor interface; a row's output index is ``ctx.pos + 1`` minus
        ``extra_args[FORCE_FROM_KEY]`` (the prompt length), so a request resumed after
        preemption picks up where it was. For checks, not production."""

        def __init__(self, vllm_config: Any, req_states: Any) -> None:
            self.slots: dict[int, tuple[list[int], int]] = {}  # request slot -> (tokens, prompt length)

        @classmethod
        def validate_params(cls, sampling_params: SamplingParams) -> None:
            extra = sampling_params.extra_args or {}
            if extra.get(FORCE_KEY) and not isinstance(extra.get(FORCE_FROM_KEY), int):
                raise ValueError(f"{FORCE_KEY} needs {FORCE_FROM_KEY} (the prompt length)")

        def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
            forced = _forced(sampling_params)
            if forced is None:
                self.slots.pop(req_idx, None)  # a recycled slot: its previous occupant's tokens go
                return False
            self.slots[req_idx] = forced
            return True

        def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
            if not self.slots:
                return logits
            slots = ctx.expanded_idx_mapping.tolist()  # a device sync: a check harness, not serving
            positions = ctx.pos.tolist()
            for row, (slot, pos) in enumerate(zip(slots, positions, strict=True)):
                entry = self.slots.get(slot)
                token = None if entry is None else forced_token(entry[0], entry[1], pos + 1)
                if token is not None:
                    _force_row(logits[row], token)
            return logits

else:
    # the CPU build's runner (V1 logits processors)
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class ForcedTokens(AdapterLogitsProcessor):  # type: ignore[no-redef]
        """Makes a request generate exactly ``extra_args[FORCE_KEY]`` (then samples freely):
        every other token's logit becomes -inf while a forced token is due (the V1 adapter
        interface, the CPU build's runner). For checks, not production."""

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: SamplingParams) -> Callable[..., torch.Tensor] | None:
            forced = _forced(params)
            if forced is None:
                return None
            tokens, start = forced

            def force(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
                token = forced_token(tokens, start, start + len(output_ids))
                if token is not None:
                    _force_row(logits, token)
                return logits

            return force


@dataclass(slots=True)
class LoggedRequest:
    """One request as the scheduler saw it: ``steps`` holds (step, order in the step, computed
    tokens after it) for each step that scheduled it; ``finished`` is the number of steps
    scheduled when it was freed."""

    hit: int
    kind: str
    admitted: int
    num_prompt_tokens: int
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    prefill_chunks: list[int] = field(default_factory=list)
    finished: int | None = None
    output_token_ids: tuple[int, ...] = ()
    preemptions: int = 0


@dataclass(slots=True)
class StepLog:
    """What the scheduler did, step by step (schedules counted from 1)."""

    step_no: int = 0
    requests: dict[str, LoggedRequest] = field(default_factory=dict)  # by the engine's request id

    def find(self, request_id: str) -> LoggedRequest | None:
        """The entry for a request id as the caller gave it (the engine appends a suffix)."""
        return self.requests.get(request_id) or next(
            (v for k, v in self.requests.items() if k.rsplit("-", 1)[0] == request_id), None
        )

    def scheduled(self, scheduler: Any, out: SchedulerOutput) -> None:
        self.step_no += 1
        retention = getattr(scheduler, "boundary_retention", None)
        for new in out.scheduled_new_reqs:
            if new.req_id not in self.requests:
                request = scheduler.requests[new.req_id]
                kind = (
                    "n/a"
                    if retention is None
                    else str(retention.classify_hit(request, new.num_computed_tokens))
                )
                self.requests[new.req_id] = LoggedRequest(
                    new.num_computed_tokens, kind, self.step_no, request.num_prompt_tokens
                )
        for order, (rid, n) in enumerate(out.num_scheduled_tokens.items()):
            entry = self.requests.get(rid)
            if entry is None:
                continue
            computed = scheduler.requests[rid].num_computed_tokens
            entry.steps.append((self.step_no, order, computed))
            if computed - n < entry.num_prompt_tokens:
                entry.prefill_chunks.append(n)

    def freed(self, request: Request) -> None:
        entry = self.requests.get(request.request_id)
        if entry is not None:
            entry.finished = self.step_no
            entry.output_token_ids = tuple(request.output_token_ids)
            entry.preemptions = request.num_preemptions


class StepLogging:
    """Mixed in front of a scheduler: logs every step into ``step_log``."""

    step_log: StepLog

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_log = StepLog()

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        self.step_log.scheduled(self, out)
        return out

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        self.step_log.freed(request)
        return super()._free_request(request, *args, **kwargs)  # type: ignore[misc]


class LoggedAsyncBoundaryScheduler(StepLogging, AsyncBoundaryScheduler):
    """``AsyncBoundaryScheduler`` with a step log."""


class LoggedBoundaryScheduler(StepLogging, BoundaryScheduler):
    """``BoundaryScheduler`` with a step log."""


class LoggedAsyncScheduler(StepLogging, AsyncScheduler):
    """vLLM's own ``AsyncScheduler`` with a step log (the upstream baseline)."""


class LoggedScheduler(StepLogging, Scheduler):
    """vLLM's own ``Scheduler`` with a step log."""


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One request: rendered prompt ids, boundary's hints, and how much to generate."""

    prompt_token_ids: tuple[int, ...]
    input_end: int | None = None
    max_tokens: int = 8
    stop_token_ids: tuple[int, ...] = ()
    policy: str | None = None  # per request (the engine allows ``request_policy``)
    round_trip: float | None = None
    horizon: int | None = None
    forced: tuple[int, ...] = ()  # token ids the model must generate (``ForcedTokens``)
    session: str | None = None

    def sampling_params(self, *, skip_cache: bool = False) -> SamplingParams:
        hints: dict[str, Any] = encode_hints(
            self.input_end,
            len(self.prompt_token_ids),
            policy=self.policy,
            round_trip=self.round_trip,
            horizon=self.horizon,
        )
        if self.session is not None:
            hints[SESSION_KEY] = self.session
        if self.forced:
            hints[FORCE_KEY] = list(self.forced)
            hints[FORCE_FROM_KEY] = len(self.prompt_token_ids)
        return SamplingParams(
            temperature=0.0,
            max_tokens=self.max_tokens,
            stop_token_ids=list(self.stop_token_ids),
            logprobs=2,  # the sampled token plus the two best: ties are visible
            extra_args=hints or None,
            skip_reading_prefix_cache=skip_cache or None,
        )


@dataclass(frozen=True, slots=True)
class EngineOutcome:
    """What the engine did with one request."""

    request_id: str
    num_cached_tokens: int  # the joint prefix-cache hit the engine served
    output_token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # the sampled token's logprob at each step
    margins: tuple[float, ...]  # top-1 minus top-2 logprob at each step (how near a tie it was)
    ttft_s: float  # from adding the request to its first token, in this process
    logged: LoggedRequest | None  # the scheduler's view (None without a logging scheduler)


@dataclass(frozen=True, slots=True)
class EngineShape:
    """The engine's settings. ``prefix_match_unit=None``: the block (vLLM's default)."""

    prefix_match_unit: int | None = 16
    policy: str = "both"
    prefix_caching: bool = True
    plugin: bool = True
    async_scheduling: bool = ASYNC_SCHEDULING  # the CPU build has none
    num_blocks: int | None = None  # a pool this small evicts
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 2048
    max_model_len: int = 8192
    gpu_memory_utilization: float | None = None  # vLLM's default (0.9) when None; GPU only
    # vLLM's ``mamba_ssm_cache_dtype`` (None: the platform's choice). It sets the recurrent page's
    # bytes and so the attention block vLLM derives: on the CPU build the accelerated GDN kernel
    # (AVX-512 BF16 or AMX hosts) stores float32 states unless "bfloat16" is asked for, other
    # hosts store the model's dtype, so the same model gets another block on another CPU.
    ssm_state_dtype: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # further ``additional_config["boundary"]``
    # vLLM's ``block_size`` (None: the platform's): the least block vLLM may derive; a model whose
    # recurrent page fits this many attention tokens keeps it (``tiny_models.shaped_config``).
    block_size: int | None = None


def _scheduler_cls(shape: EngineShape) -> type:
    if shape.plugin:
        return LoggedAsyncBoundaryScheduler if shape.async_scheduling else LoggedBoundaryScheduler
    return LoggedAsyncScheduler if shape.async_scheduling else LoggedScheduler


class EngineRun:
    """A real engine over ``model`` (a local directory); ``close`` releases it."""

    def __init__(self, model: Path | str, shape: EngineShape = EngineShape(), *, seed: int = 0) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the scheduler lives here
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, on the CPU build (else most of RAM)
        from vllm import LLM

        self.shape = shape
        boundary = {"policy": shape.policy, "request_policy": True, "log_interval_s": 0, **shape.settings}
        memory: dict[str, Any] = (
            {}
            if shape.gpu_memory_utilization is None
            else {"gpu_memory_utilization": shape.gpu_memory_utilization}
        )
        if shape.ssm_state_dtype is not None:
            memory["mamba_ssm_cache_dtype"] = shape.ssm_state_dtype
        if shape.block_size is not None:
            memory["block_size"] = shape.block_size
        self.llm = LLM(
            model=str(model),
            dtype="bfloat16",
            seed=seed,
            enforce_eager=True,
            enable_prefix_caching=shape.prefix_caching,
            prefix_match_unit=shape.prefix_match_unit,
            prefix_cache_retention_interval=0,
            max_model_len=shape.max_model_len,
            max_num_seqs=shape.max_num_seqs,
            max_num_batched_tokens=shape.max_num_batched_tokens,
            async_scheduling=shape.async_scheduling,
            num_gpu_blocks_override=shape.num_blocks,
            scheduler_cls=_scheduler_cls(shape),
            logits_processors=[ForcedTokens],
            additional_config={"boundary": boundary},
            **memory,
        )
        self._count = 0

    @property
    def scheduler(self) -> Any:
        """The engine's scheduler (the engine runs in this process)."""
        return self.llm.llm_engine.engine_core.engine_core.scheduler

    @property
    def block_size(self) -> int:
        return int(self.scheduler.cache_config.block_size)

    @property
    def layout(self) -> CacheLayout:
        """The KV-cache layout this engine derived (``CacheLayout``)."""
        return CacheLayout.of(self.scheduler)

    def reset_prefix_cache(self) -> None:
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset the prefix cache (requests still running?)")

    def run_sessions(
        self, sessions: Sequence[Sequence[EngineRequest]], *, concurrency: int = 1, skip_cache: bool = False
    ) -> list[list[EngineOutcome]]:
        """Each session's requests in order, ``concurrency`` sessions in flight (closed loop:
        a session's next request is added when its previous one finishes)."""
        return _Sessions(self, sessions, concurrency, skip_cache).run()

    def close(self) -> None:
        engine_core = self.llm.llm_engine.engine_core
        engine_core.shutdown()
        del self.llm
        gc.collect()

    def _next_id(self) -> str:
        self._count += 1
        return f"engine-{self._count}"


@dataclass(frozen=True, slots=True)
class CacheLayout:
    """The KV-cache geometry a running engine derived: its attention block (tokens), the bytes of
    one page (every group's page is padded to the same size), how many KV-cache groups hold
    attention and how many a recurrent state, the pages one recurrent group holds for a running
    request (align mode: the running state and the one before it), the bytes of one layer's
    recurrent state before padding, and the pool's pages (one is vLLM's null block).

    vLLM derives the block from the recurrent page's bytes and the platform (the state's dtype
    differs by CPU), so tests size pools and expectations from this, never from a constant."""

    block_size: int
    page_bytes: int
    attention_groups: int
    recurrent_groups: int
    recurrent_pages_per_request: int
    state_bytes: int
    num_blocks: int

    @classmethod
    def of(cls, scheduler: Any) -> CacheLayout:
        from vllm.v1.kv_cache_interface import MambaSpec

        config = scheduler.kv_cache_config
        specs = [g.kv_cache_spec for g in config.kv_cache_groups]
        recurrent = [s for s in specs if isinstance(s, MambaSpec)]
        vllm_config = scheduler.vllm_config
        return cls(
            block_size=int(scheduler.cache_config.block_size),
            page_bytes=int(specs[0].page_size_bytes),
            attention_groups=len(specs) - len(recurrent),
            recurrent_groups=len(recurrent),
            recurrent_pages_per_request=max(
                (s.max_memory_usage_bytes(vllm_config) // s.page_size_bytes for s in recurrent), default=0
            ),
            state_bytes=max((int(s.real_page_size_bytes) for s in recurrent), default=0),
            num_blocks=int(config.num_blocks),
        )

    def pages_per_request(self, tokens: int) -> int:
        """Pages one running request of ``tokens`` tokens holds, as vLLM counts them when it
        checks that the pool serves one request of ``max_model_len``."""
        return self.attention_groups * -(-tokens // self.block_size) + (
            self.recurrent_groups * self.recurrent_pages_per_request
        )


def probe_layout(model: Path | str, shape: EngineShape = EngineShape()) -> CacheLayout:
    """The layout an engine with ``shape`` derives over ``model`` (its pool left to vLLM): an
    engine is started, read and closed, so a caller can size a pool in pages for the block vLLM
    chooses on this host before starting the engine it tests."""
    run = EngineRun(model, replace(shape, num_blocks=None))
    try:
        return run.layout
    finally:
        run.close()


class _Sessions:
    """``EngineRun.run_sessions``: adds requests, steps the engine until all sessions end."""

    def __init__(
        self, run: EngineRun, sessions: Sequence[Sequence[EngineRequest]], concurrency: int, skip_cache: bool
    ) -> None:
        self.run_ = run
        self.sessions = sessions
        self.concurrency = concurrency
        self.skip_cache = skip_cache
        self.outcomes: list[list[EngineOutcome]] = [[] for _ in sessions]
        self.waiting = list(range(len(sessions)))[::-1]
        self.live: dict[str, tuple[int, float, float | None]] = {}  # id -> (session, added, first token)

    def run(self) -> list[list[EngineOutcome]]:
        engine = self.run_.llm.llm_engine
        self._refill()
        while self.live:
            for out in engine.step():
                self._observe(out)
            if not engine.has_unfinished_requests() and self.live:
                raise RuntimeError(f"the engine finished without answering {sorted(self.live)}")
        return self.outcomes

    def _start(self, session: int) -> None:
        item = self.sessions[session][len(self.outcomes[session])]
        rid = self.run_._next_id()
        prompt = {"prompt_token_ids": list(item.prompt_token_ids)}
        self.live[rid] = (session, time.perf_counter(), None)
        self.run_.llm.llm_engine.add_request(rid, prompt, item.sampling_params(skip_cache=self.skip_cache))

    def _refill(self) -> None:
        while self.waiting and len(self.live) < self.concurrency:
            self._start(self.waiting.pop())

    def _observe(self, out: Any) -> None:
        rid = out.request_id
        if rid not in self.live:
            return
        session, added, first = self.live[rid]
        if first is None and out.outputs and out.outputs[0].token_ids:
            first = time.perf_counter()
            self.live[rid] = (session, added, first)
        if not out.finished:
            return
        del self.live[rid]
        completion = out.outputs[0]
        steps = list(zip(completion.logprobs or (), completion.token_ids, strict=True))
        logprobs = tuple(float(step[token].logprob) for step, token in steps)
        margins = tuple(_margin(step) for step, _ in steps)
        log = getattr(self.run_.scheduler, "step_log", None)
        self.outcomes[session].append(
            EngineOutcome(
                rid,
                int(out.num_cached_tokens or 0),
                tuple(completion.token_ids),
                logprobs,
                margins,
                (first or time.perf_counter()) - added,
                None if log is None else log.find(rid),
            )
        )
        if len(self.outcomes[session]) < len(self.sessions[session]):
            self._start(session)
        self._refill()


def _margin(step: dict[int, Any]) -> float:
    """Top-1 minus top-2 logprob among the returned candidates (inf when only one came back)."""
    ranked = sorted((lp for lp in step.values() if lp.rank is not None), key=lambda lp: lp.rank)
    return float(ranked[0].logprob - ranked[1].logprob) if len(ranked) > 1 else float("inf")


@dataclass(frozen=True, slots=True)
class OutputComparison:
    """A generation with reused state against the same request computed from scratch.

    ``diverged_at``: the first step whose sampled tokens differ (None: identical);
    ``near_tie``: at that step the reference's two best tokens were within ``tolerance`` (a
    reordering that numeric noise can cause); ``max_logprob_diff``: over the steps up to and
    including the divergence, where both runs had the same context."""

    identical: bool
    diverged_at: int | None
    near_tie: bool
    max_logprob_diff: float

    def agrees(self, tolerance: float) -> bool:
        """Identical, or diverged only at a near tie, and logprobs within ``tolerance``."""
        return (self.identical or self.near_tie) and self.max_logprob_diff <= tolerance


# Two bf16 steps of a logit of magnitude 1-2 (2 x 2^-7, rounded up): the least a comparison allows.
TOLERANCE_FLOOR = 0.02


def batch_noise(
    alone: Sequence[Sequence[EngineOutcome]], batched: Sequence[Sequence[EngineOutcome]]
) -> float:
    """The largest top-1 logprob difference between two from-scratch passes over the same
    requests (say, each request alone and the sessions in a batch), over the steps where both
    passes had the same context: what this host's kernels change by reordering bf16 sums,
    with no state reused."""
    return max(
        (
            compare_outputs(a, b, 0.0).max_logprob_diff
            for row_a, row_b in zip(alone, batched, strict=True)
            for a, b in zip(row_a, row_b, strict=True)
        ),
        default=0.0,
    )


def tolerance_for(noise: float) -> float:
    """The logprob tolerance for comparing a run that reused states with its from-scratch
    reference on a host whose from-scratch passes differ by ``noise`` (``batch_noise``):
    twice the noise, since a reused run differs from its reference by chunking (the reused
    prefix is not recomputed) as well as by batching, each a reordering of the same sums; never
    below ``TOLERANCE_FLOOR``. Tokens are compared exactly except where the reference's two
    best were within the tolerance (``OutputComparison.near_tie``)."""
    return max(TOLERANCE_FLOOR, 2 * noise)


def compare_outputs(reused: EngineOutcome, reference: EngineOutcome, tolerance: float) -> OutputComparison:
    """Compare ``reused`` with ``reference`` (see ``OutputComparison``)."""
    pairs = list(zip(reused.output_token_ids, reference.output_token_ids, strict=False))
    diverged = next((k for k, (a, b) in enumerate(pairs) if a != b), None)
    if diverged is None and len(reused.output_token_ids) != len(reference.output_token_ids):
        diverged = len(pairs)
    upto = len(pairs) if diverged is None else min(diverged + 1, len(pairs))
    diffs = [abs(a - b) for a, b in zip(reused.logprobs[:upto], reference.logprobs[:upto], strict=True)]
    near_tie = (
        diverged is not None
        and diverged < len(reference.margins)
        and reference.margins[diverged] <= tolerance
    )
    return OutputComparison(diverged is None, diverged, near_tie, max(diffs, default=0.0))
