"""Every metric the experiment asks for, per policy and budget mode, under the issue's names.

Inputs are a ``Run`` (per-request records + cache counters), the same stream's ``main_sparse``
run under the same budget (the baseline), and, for the incremental value of a second
checkpoint, the ``input_end`` / ``decode_end`` runs. A *hit* is a joint hit of at least one
token; *reused over oracle* is the matched tokens over the oracle's reusable tokens (with a
shared system prompt nearly every request hits something, so this ratio is the one that
separates policies). *First continuation*: a session's second request (turn 1), the first
that could reuse its own session's state; *steady state*: turn 2 and later.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from boundary.experiment import plan
from boundary.experiment.load import prefill_queue
from boundary.experiment.replay import ProducerAge, RequestRecord, Run

KINDS = ("prompt_end", "input_end", "decode_end", "reactive", "prompt_end_block")


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def slice_summary(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Hit rate (share of requests with a joint hit), reused tokens over the oracle's, and
    the session-hit rate (served by a state this session produced)."""
    hits = sum(r.joint > 0 for r in records)
    own = sum(r.producer_age not in (None, ProducerAge.OTHER_SESSION.value) for r in records)
    return {
        "requests": len(records),
        "hit_rate": _ratio(hits, len(records)),
        "session_hit_rate": _ratio(own, len(records)),
        "reused_tokens": sum(r.joint for r in records),
        "oracle_tokens": sum(r.oracle for r in records),
        "reused_over_oracle": _ratio(sum(r.joint for r in records), sum(r.oracle for r in records)),
    }


def _counts(values: Iterable[str | None], keys: Sequence[str], none: str = "none") -> dict[str, int]:
    c = Counter(v if v is not None else none for v in values)
    return {k: c.get(k, 0) for k in (*keys, none)}


def run_metrics(run: Run, baseline: Run | None, disaggregated: Run | None = None) -> dict[str, Any]:
    """The metrics of one run; ``baseline``: main_sparse under the same budget (None when
    ``run`` is that baseline's own counterfactual)."""
    recs = run.records
    n = len(recs)
    first = [r for r in recs if r.turn == 1]
    steady = [r for r in recs if r.turn >= 2]
    continuations = [r for r in recs if r.turn >= 1]
    joint = sum(r.joint for r in recs)
    avoided = sum(r.avoided_flops for r in recs)
    total_work = sum(r.avoided_flops + r.recompute_flops for r in recs)
    stats = run.stats
    mean_state = run.mean_state_bytes
    served = _counts((r.served_by for r in recs), KINDS)
    base = {r.rid: r for r in baseline.records} if baseline is not None else None

    def extra(rows: Iterable[RequestRecord]) -> int | None:
        return None if base is None else sum(r.joint - base[r.rid].joint for r in rows)

    decode_served = [r for r in continuations if r.served_by == "decode_end"]
    fallback_pool = [
        r
        for r in continuations
        if r.served_by in ("input_end", "decode_end") and r.producer_age == ProducerAge.PREVIOUS.value
    ]
    ttft = [r.ttft_seconds for r in recs]
    lifetimes = run.lifetimes
    evictions = {f"{victim}_by_{cause}": count for (victim, cause), count in sorted(stats.evictions.items())}
    displaced = sum(1 for e in stats.evicted_states if e.hits == 0)
    materialized = {
        kind: statistics.fmean([r.joint for r in recs if r.served_by == kind])
        if any(r.served_by == kind for r in recs)
        else None
        for kind in KINDS
    }
    losses = [r.flooring_loss for r in recs if r.flooring_loss is not None]
    out: dict[str, Any] = {
        "policy": run.policy,
        "budget": run.budget.value,
        "unit": run.unit,
        "block_size": run.geometry.block_size,
        "requests": n,
        "prompt_tokens": sum(r.prompt_tokens for r in recs),
        "selected_checkpoint": served,
        "materialized_boundary": {
            "mean_joint_by_kind": materialized,
            "mean_flooring_loss_tokens": statistics.fmean(losses) if losses else None,
        },
        "producer_age": _counts((r.producer_age for r in recs), [a.value for a in ProducerAge]),
        "attention_matched_tokens": sum(r.attention for r in recs),
        "recurrent_matched_tokens": sum(r.recurrent for r in recs),
        "joint_matched_tokens": joint,
        "oracle_reusable_tokens": sum(r.oracle for r in recs),
        "additional_matched_tokens_vs_main_sparse": extra(recs),
        "prompt_tokens_recomputed": sum(r.prompt_tokens - r.joint for r in recs),
        "avoided_prefill_flops": avoided,
        "avoided_prefill_fraction": _ratio(avoided, total_work),
        "ttft_estimate_seconds": {
            "mean": statistics.fmean(ttft) if ttft else None,
            "p50": _percentile(ttft, 0.5),
            "p90": _percentile(ttft, 0.9),
        },
        "hit_rate": slice_summary(recs),
        "first_continuation": slice_summary(first),
        "steady_state": slice_summary(steady),
        "first_continuation_by_kind": {
            k: slice_summary([r for r in first if r.continuation == k]) for k in ("tool", "user")
        },
        "unreachable_prompt_end_first_continuations": plan.unreachable_prompt_end(recs),
        "after_junction": plan.after_junction(recs, baseline),
        "additional_matched_tokens_after_branch_learned": extra(steady),
        "reactive_branch_learning_misses": sum(r.junction > r.joint for r in recs),
        "reactive_branch_learning_lost_tokens": sum(
            r.junction - r.joint for r in recs if r.junction > r.joint
        ),
        "retained_state_bytes": {"mean": mean_state, "peak": stats.peak_state_bytes},
        "retained_state_bytes_by_kind": plan.bytes_by_kind(run),
        "materialization_bytes": sum(r.joint % run.geometry.block_size != 0 for r in recs)
        * run.geometry.block_bytes,
        "snapshot_bytes": sum(stats.created.values()) * run.geometry.state_bytes,
        "extra_scheduler_steps": sum(r.forced_splits for r in recs),
        "load": prefill_queue(recs).summary(),
        "pd_states": plan.pd_states(recs, disaggregated),
        "checkpoint_creations": {k: stats.created.get(k, 0) for k in KINDS},
        "checkpoint_hits": {k: stats.state_hits.get(k, 0) for k in KINDS},
        "checkpoint_lifetimes": {
            "evicted": len(lifetimes),
            "mean_seconds": statistics.fmean(lifetimes) if lifetimes else None,
            "median_seconds": _percentile(lifetimes, 0.5),
            "surviving": run.survivors,
            "surviving_mean_age_seconds": statistics.fmean(run.survivor_ages) if run.survivor_ages else None,
        },
        "evictions": evictions,
        "displaced_checkpoints": displaced,
        "occupancy": {
            "state_fraction": _ratio(mean_state, run.capacity_bytes),
            "block_fraction": _ratio(run.mean_block_bytes, run.capacity_bytes),
            "checkpoint_budget_fraction": None
            if run.checkpoint_budget_bytes is None
            else _ratio(mean_state, run.checkpoint_budget_bytes),
        },
        "overcommits": run.overcommits,
        "forced_scheduler_splits": sum(r.forced_splits for r in recs),
        "duplicate_candidates": sum(r.collapsed for r in recs),
        "recached_states": sum(r.recached for r in recs),
        "disaggregated_consumability": _ratio(
            sum(r.joint for r in recs if r.served_from_output is False), joint
        ),
        "disaggregated_reused_over_colocated": None
        if disaggregated is None
        else _ratio(sum(r.joint for r in disaggregated.records), joint),
        # derived
        "decode_end_hit_rate": _ratio(len(decode_served), len(continuations)),
        "decode_end_hits_by_continuation": dict(Counter(r.continuation for r in decode_served)),
        "input_end_fallback": plan.input_end_fallback(recs),
        "input_end_fallback_rate": plan.input_end_fallback(recs)["rate"],
        "input_end_share_of_previous_endpoint_hits": _ratio(
            sum(r.served_by == "input_end" for r in fallback_pool), len(fallback_pool)
        ),
        "first_continuation_effective_hit_rate": slice_summary(first)["reused_over_oracle"],
        "saved_prompt_tokens_per_retained_state_byte": _ratio(joint, mean_state),
        "saved_prefill_work_per_retained_state_byte": _ratio(avoided, mean_state),
        "replay_wall_seconds": run.wall_seconds,
    }
    return out


def incremental(both: dict[str, Any], single: dict[str, Any]) -> dict[str, float | None]:
    """What ``both``'s second checkpoint adds over a single-endpoint run."""

    def delta(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a - b

    return {
        "hit_rate": delta(both["hit_rate"]["hit_rate"], single["hit_rate"]["hit_rate"]),
        "reused_over_oracle": delta(
            both["hit_rate"]["reused_over_oracle"], single["hit_rate"]["reused_over_oracle"]
        ),
        "saved_work_flops": delta(both["avoided_prefill_flops"], single["avoided_prefill_flops"]),
    }
