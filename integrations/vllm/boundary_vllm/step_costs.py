"""What one scheduler step costs in a running engine: prefill steps of known sizes and decode
steps of known batch, timed, and the experiment's step cost model fitted to them.

Where it sits: beside ``engine_run`` in the engine tier: it drives an ``EngineRun`` (prefix
caching off, so every prompt token is computed); ``benchmarks/calibrate_steps.py`` and
``tests/engine/test_engine_step_costs.py`` call it.

The experiment's load model (``boundary.experiment.calibration``) prices a step as

    step_overhead + (decode_base + decode_per_sequence * b if it decodes) + prefill cost

with the prefill cost linear in the chunk's tokens plus an attention term in the positions
before them (negligible at the prompt lengths timed here on a tiny model). ``measure`` times
whole ``LLMEngine.step()`` calls in this process: a step that prefills one prompt of ``n``
tokens alone (``max_tokens=1``) and steps that decode ``b`` sequences at once (short prompts
already prefilled); every shape runs once untimed first, and each point is the *fastest* of
its repeats. The clock is this thread's CPU time by default: the engine runs in-process and
computes in the calling thread when torch runs one thread (vLLM's CPU build sets one on a
2-core machine), and other processes on a shared machine barely move it, where they can double
wall time; ``clock="wall"`` on an idle machine or where torch runs several threads. ``fit`` returns the
model's constants by least squares: ``prefill(n) = step + per_token * n`` and ``decode(b) =
step + decode_base + per_sequence * b``, with the largest relative residual of each fit;
``StepFit.instabilities`` says when a fit does not support the form. Measured times are
checked only in the benchmark's report, never asserted by a test: the tests check the fitting
on synthetic samples.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

# The largest relative residual a fit may have and still support the load model's form (on a
# 2-core machine at load 5 the residuals were 7% for prefill and 12-13% for decode).
FIT_TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class StepSamples:
    """Seconds of one step (the fastest of its repeats): ``prefill[n]`` prefills ``n`` prompt
    tokens alone; ``decode[b]`` decodes ``b`` sequences."""

    prefill: dict[int, float]
    decode: dict[int, float]


@dataclass(frozen=True, slots=True)
class StepFit:
    """The load model's constants as this engine shows them (seconds), and the largest relative
    residual of each fit over the measured points."""

    step_overhead_seconds: float
    prefill_seconds_per_token: float
    decode_base_seconds: float
    decode_seconds_per_sequence: float
    prefill_max_relative_residual: float
    decode_max_relative_residual: float

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def instabilities(self, tolerance: float = FIT_TOLERANCE, largest_batch: int = 8) -> list[str]:
        """Why this fit does not support the load model's form (empty: it does): a residual
        over ``tolerance``, a constant with the wrong sign, or a decode cost per sequence
        outside [-10% of the fixed decode cost / ``largest_batch``, the fixed decode cost]
        (a small negative slope is noise). Timed on a busy machine, a fit can be unstable
        without the form being wrong: measure again on an idle one."""
        found = []
        if self.prefill_max_relative_residual > tolerance:
            found.append(f"prefill residual {self.prefill_max_relative_residual:.0%} > {tolerance:.0%}")
        if self.decode_max_relative_residual > tolerance:
            found.append(f"decode residual {self.decode_max_relative_residual:.0%} > {tolerance:.0%}")
        if self.step_overhead_seconds <= 0:
            found.append(f"step overhead {self.step_overhead_seconds:.6f} s is not positive")
        if self.prefill_seconds_per_token <= 0:
            found.append(f"prefill per token {self.prefill_seconds_per_token:.3g} s is not positive")
        fixed = self.step_overhead_seconds + self.decode_base_seconds
        if not -0.1 * fixed / largest_batch <= self.decode_seconds_per_sequence <= fixed:
            found.append(
                f"decode per sequence {self.decode_seconds_per_sequence:.6f} s outside "
                f"[{-0.1 * fixed / largest_batch:.6f}, {fixed:.6f}] (the fixed decode cost)"
            )
        return found


Clock = Literal["cpu", "wall"]


def _step_once(engine: Any, clock: Clock) -> float:
    now = time.thread_time if clock == "cpu" else time.perf_counter
    start = now()
    engine.step()
    return now() - start


def _prompt(n: int, salt: int, vocab: int) -> list[int]:
    """``n`` token ids no earlier prompt shares a prefix with (ids 10 and up)."""
    return [10 + (salt * 7919 + i * 104729) % (vocab - 10) for i in range(n)]


def measure(
    model: Path | str,
    prefill_sizes: Sequence[int] = (128, 512, 1024, 2048),
    batches: Sequence[int] = (1, 2, 4, 8),
    *,
    repeats: int = 5,
    decode_steps: int = 12,
    vocab: int = 1000,
    clock: Clock = "cpu",
) -> StepSamples:
    """Time prefill and decode steps on a fresh engine over ``model`` (prefix caching off);
    ``clock``: this thread's CPU time or wall time."""
    from vllm import SamplingParams

    from boundary_vllm.engine_run import EngineRun, EngineShape

    longest = max(prefill_sizes)
    shape = EngineShape(
        prefix_caching=False,
        plugin=False,
        max_num_seqs=max(batches),
        max_num_batched_tokens=max(longest, 2048),
        max_model_len=max(longest + 64, 4096),
    )
    run = EngineRun(model, shape)
    engine = run.llm.llm_engine
    salt = 0

    def add(n: int, max_tokens: int) -> None:
        nonlocal salt
        salt += 1
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        engine.add_request(f"step-{salt}", {"prompt_token_ids": _prompt(n, salt, vocab)}, params)

    def drain() -> None:
        while engine.has_unfinished_requests():
            engine.step()

    def decode_steps_of(b: int) -> list[float]:
        for _ in range(b):
            add(16, decode_steps + 2)
        engine.step()  # prefills all b together; every later step decodes b sequences
        times = [_step_once(engine, clock) for _ in range(decode_steps)]
        drain()
        return times

    try:
        prefill: dict[int, list[float]] = {n: [] for n in prefill_sizes}
        decode: dict[int, list[float]] = {b: [] for b in batches}
        for n in prefill_sizes:  # every shape once, untimed
            add(n, 1)
            drain()
        for b in batches:
            decode_steps_of(b)
        for _ in range(repeats):
            for n in prefill_sizes:
                add(n, 1)
                prefill[n].append(_step_once(engine, clock))  # the one step that prefills it (n <= budget)
                drain()
            for b in batches:
                decode[b] += decode_steps_of(b)
    finally:
        run.close()
    return StepSamples({n: min(v) for n, v in prefill.items()}, {b: min(v) for b, v in decode.items()})


def _lstsq(columns: list[list[float]], y: list[float]) -> tuple[list[float], float]:
    a = np.array(columns, dtype=float).T
    target = np.array(y, dtype=float)
    coef, *_ = np.linalg.lstsq(a, target, rcond=None)
    residual = float(np.max(np.abs(a @ coef - target) / target))
    return [float(c) for c in coef], residual


def fit(samples: StepSamples) -> StepFit:
    """The load model fitted to ``samples``: prefill and decode each need 2 points."""
    sizes = sorted(samples.prefill)
    (step, per_token), prefill_residual = _lstsq(
        [[1.0] * len(sizes), [float(n) for n in sizes]], [samples.prefill[n] for n in sizes]
    )
    batches = sorted(samples.decode)
    (decode_fixed, per_sequence), decode_residual = _lstsq(
        [[1.0] * len(batches), [float(b) for b in batches]], [samples.decode[b] for b in batches]
    )
    return StepFit(
        step_overhead_seconds=step,
        prefill_seconds_per_token=per_token,
        decode_base_seconds=decode_fixed - step,
        decode_seconds_per_sequence=per_sequence,
        prefill_max_relative_residual=prefill_residual,
        decode_max_relative_residual=decode_residual,
    )
