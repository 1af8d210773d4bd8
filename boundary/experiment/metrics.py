"""Every metric the experiment asks for, per policy and budget mode, under the issue's names.

Where it sits: in the experiment, after the replay: runs become the numbers the report prints;
``harness`` calls it.

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
from boundary.experiment.aggregate import percentile as _percentile
from boundary.experiment.aggregate import ratio as _ratio
from boundary.experiment.replay import ProducerAge, RequestRecord, Run

KINDS = ("prompt_end", "input_end", "decode_end", "reactive", "prompt_end_block")


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


def run_metrics(
    run: Run, baseline: Run | None, disaggregated: Run | None = None, *, decode_only: Run | None = None
) -> dict[str, Any]:
    """The metrics of one run; ``baseline``: main_sparse under the same budget (None when
    ``run`` is that baseline's own counterfactual); ``disaggregated``: the same policy replayed
    with prefill/decode disaggregation (no output reuse); ``decode_only``: the decode_end run
    under the same budget (Q4's counterfactual: D_end kept, no U_end to fall back on)."""
    recs = run.records
    out: dict[str, Any] = {
        "policy": run.policy,
        "budget": run.budget.value,
        "unit": run.unit,
        "block_size": run.geometry.block_size,
        "requests": len(recs),
        "prompt_tokens": sum(r.prompt_tokens for r in recs),
    }
    out |= _reuse(recs, baseline)
    out["after_junction"] = plan.after_junction(recs, baseline, run.stats.created.get("reactive", 0))
    out |= _memory(run)
    out |= _engine(run, disaggregated)
    out["forced_split_cost"] = plan.forced_split_cost(recs, baseline)
    out |= throughput(run)
    out |= _derived(run, decode_only)
    return out


def throughput(run: Run) -> dict[str, float | None]:
    """Requests, prompt tokens and output tokens per second over the replayed schedule (its
    first arrival to its last event: the same for every policy, since the schedule is the
    stream's); the load sweep measures them under a simulated engine instead."""
    recs, span = run.records, run.elapsed
    return {
        "request_throughput": _ratio(len(recs), span),
        "input_token_throughput": _ratio(sum(r.prompt_tokens for r in recs), span),
        "output_token_throughput": _ratio(sum(r.output_tokens for r in recs), span),
    }


def _reuse(recs: list[RequestRecord], baseline: Run | None) -> dict[str, Any]:
    """What matched, who served it, and what it saved (plan questions 1, 4-8, 12)."""
    first = [r for r in recs if r.turn == 1]
    steady = [r for r in recs if r.turn >= 2]
    avoided = sum(r.avoided_flops for r in recs)
    base = {r.rid: r for r in baseline.records} if baseline is not None else None

    def extra(rows: Iterable[RequestRecord]) -> int | None:
        return None if base is None else sum(r.joint - base[r.rid].joint for r in rows)

    ttft = [r.ttft_seconds for r in recs]
    losses = [r.flooring_loss for r in recs if r.flooring_loss is not None]
    by_kind = {k: [r.joint for r in recs if r.served_by == k] for k in KINDS}
    return {
        "selected_checkpoint": _counts((r.served_by for r in recs), KINDS),
        "materialized_boundary": {
            "mean_joint_by_kind": {k: statistics.fmean(v) if v else None for k, v in by_kind.items()},
            "mean_flooring_loss_tokens": statistics.fmean(losses) if losses else None,
        },
        "producer_age": _counts((r.producer_age for r in recs), [a.value for a in ProducerAge]),
        "producer_age_by_kind": plan.producer_age_by_kind(recs),
        "attention_matched_tokens": sum(r.attention for r in recs),
        "recurrent_matched_tokens": sum(r.recurrent for r in recs),
        "joint_matched_tokens": sum(r.joint for r in recs),
        "oracle_reusable_tokens": sum(r.oracle for r in recs),
        "additional_matched_tokens_vs_main_sparse": extra(recs),
        "prompt_tokens_recomputed": sum(r.prompt_tokens - r.joint for r in recs),
        "avoided_prefill_flops": avoided,
        "avoided_prefill_fraction": _ratio(avoided, sum(r.avoided_flops + r.recompute_flops for r in recs)),
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
        "unreachable_prompt_end_first_continuations": plan.unreachable_prompt_end(recs, baseline),
        "additional_matched_tokens_after_branch_learned": extra(steady),
        "reactive_branch_learning_misses": sum(r.junction > r.joint for r in recs),
        "reactive_branch_learning_lost_tokens": sum(
            r.junction - r.joint for r in recs if r.junction > r.joint
        ),
    }


def _memory(run: Run) -> dict[str, Any]:
    """Retained states: bytes (per kind), creations, hits, lifetimes, evictions, occupancy (Q9, Q10)."""
    stats, mean_state, lifetimes = run.stats, run.mean_state_bytes, run.lifetimes
    return {
        "retained_state_bytes": {"mean": mean_state, "peak": stats.peak_state_bytes},
        "retained_state_bytes_by_kind": plan.bytes_by_kind(run),
        "checkpoint_creations": {k: stats.created.get(k, 0) for k in KINDS},
        "checkpoint_hits": {k: stats.state_hits.get(k, 0) for k in KINDS},
        "checkpoint_lifetimes": {
            "evicted": len(lifetimes),
            "mean_seconds": statistics.fmean(lifetimes) if lifetimes else None,
            "median_seconds": _percentile(lifetimes, 0.5),
            "surviving": run.survivors,
            "surviving_mean_age_seconds": statistics.fmean(run.survivor_ages) if run.survivor_ages else None,
        },
        "evictions": {f"{victim}_by_{cause}": n for (victim, cause), n in sorted(stats.evictions.items())},
        "displaced_checkpoints": sum(1 for e in stats.evicted_states if e.hits == 0),
        "occupancy": {
            "state_fraction": _ratio(mean_state, run.capacity_bytes),
            "block_fraction": _ratio(run.mean_block_bytes, run.capacity_bytes),
            "checkpoint_budget_fraction": None
            if run.checkpoint_budget_bytes is None
            else _ratio(mean_state, run.checkpoint_budget_bytes),
        },
        "overcommits": run.overcommits,
        "checkpoint_budget": plan.checkpoint_budget(run),
    }


def _engine(run: Run, disaggregated: Run | None) -> dict[str, Any]:
    """What the checkpoints cost the engine, and what survives disaggregation (Q13, PD states)."""
    recs, g = run.records, run.geometry
    joint = sum(r.joint for r in recs)
    return {
        "snapshot_bytes": sum(run.stats.created.values()) * g.state_bytes,
        "materialization_bytes": plan.materialization_bytes(run),
        "forced_scheduler_splits": sum(r.forced_splits for r in recs),  # each one an extra scheduler step
        "duplicate_candidates": sum(r.collapsed for r in recs),
        "candidates_on_twin": sum(r.on_twin for r in recs),
        "junctions_on_kept_states": sum(r.junction_on_kept for r in recs),
        "recached_states": sum(r.recached for r in recs),
        "pd_states": plan.pd_states(recs, disaggregated),
        "disaggregated_consumability": _ratio(
            sum(r.joint for r in recs if r.served_from_output is False), joint
        ),
        "disaggregated_reused_over_colocated": None
        if disaggregated is None
        else _ratio(sum(r.joint for r in disaggregated.records), joint),
    }


def _derived(run: Run, decode_only: Run | None) -> dict[str, Any]:
    """The derived rates (Q2, Q3, Q4 and per-byte yields)."""
    recs = run.records
    continuations = [r for r in recs if r.turn >= 1]
    previous = [
        r
        for r in continuations
        if r.served_by in ("input_end", "decode_end") and r.producer_age == ProducerAge.PREVIOUS.value
    ]
    reuse = plan.decode_end_reuse(recs)
    fallback = plan.input_end_fallback(recs, decode_only)
    return {
        "decode_end_hit_rate": reuse["rate"],
        "decode_end_hits_by_continuation": reuse["by_continuation"],
        "input_end_fallback": fallback,
        "input_end_fallback_rate": fallback["rate"],
        "input_end_share_of_previous_endpoint_hits": _ratio(
            sum(r.served_by == "input_end" for r in previous), len(previous)
        ),
        "first_continuation_effective_hit_rate": slice_summary([r for r in recs if r.turn == 1])[
            "reused_over_oracle"
        ],
        **plan.per_retained_state_byte(run),
        "replay_wall_seconds": run.wall_seconds,
    }
