# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""Run request streams through a real vLLM engine (``LLM``, in this process) with boundary's
scheduler, and log what the engine did per request: ``EngineRequest`` (what to send),
``EngineShape`` (the engine's settings), ``EngineRun`` (the engine, ``run_sessions``),
``EngineOutcome`` (what came back) and ``probe_layout``.

Where it sits: the engine end, as a harness around a running vLLM: it drives
``boundary_vllm.scheduler`` through a real ``LLM`` with a logged scheduler (``step_log``) and
the ``forced_tokens`` logits processor; ``scenarios``, ``engine_experiment``, ``step_costs``,
``benchmarks/engine.py``, ``integrations/vllm/gpu_check.py`` and the engine test tier call it,
and ``output_comparison`` compares what it returns.

Unlike ``boundary_vllm.replay`` (vLLM's scheduler driven by hand, outputs fed from a record),
here the model runs: the engine computes every prefill and samples every token, and the
recurrent states it reuses are the ones its worker copied. Per request this returns the joint
hit the engine served (``num_cached_tokens``), the tokens it generated with their top-1
logprobs, the time to first token, and the scheduler steps that admitted, advanced and freed it
(``step_log.StepLog``), so a cache model can be fed the engine's own event order.

Sessions run closed-loop: a session's next request is added when its previous one has finished.
Where a check needs a known answer, ``EngineRequest.forced`` makes the model generate exactly
those token ids (``forced_tokens.ForcedTokens``).

Works on every supported build (``boundary_vllm.compat``); on CPU the engine needs
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` to stay in this process, which ``EngineRun`` sets (and a
1 GiB KV cache, ``VLLM_CPU_KVCACHE_SPACE``, unless set).
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # before vLLM is imported

import gc
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vllm.sampling_params import SamplingParams

from boundary_vllm.cache_layout import CacheLayout
from boundary_vllm.compat import ASYNC_SCHEDULING
from boundary_vllm.forced_tokens import FORCE_FROM_KEY, FORCE_KEY, ForcedTokens
from boundary_vllm.hints import SESSION_KEY, encode_hints
from boundary_vllm.step_log import (
    LoggedAsyncBoundaryScheduler,
    LoggedAsyncScheduler,
    LoggedBoundaryScheduler,
    LoggedRequest,
    LoggedScheduler,
)


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
    # logprobs per step: the sampled token plus the two best, so ties are visible (None: no
    # logprobs, and the outcome's ``logprobs`` and ``margins`` are empty)
    logprobs: int | None = 2

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
            logprobs=self.logprobs,
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
        asked = completion.logprobs or ()  # none when the request asked for none
        steps = list(zip(asked, completion.token_ids, strict=True)) if asked else []
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
