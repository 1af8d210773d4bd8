"""Summaries beside the policy runs: the oracle's metrics and ``both``'s second checkpoint
against each single endpoint.

Where it sits: in the experiment, under ``harness`` (which calls both once per unit) and above
``metrics``, ``plan`` and ``replay``.
"""

from __future__ import annotations

import statistics
from typing import Any

from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.metrics import slice_summary
from boundary.experiment.plan import incremental_hit_rate, second_checkpoint_verdict
from boundary.experiment.policies import ORACLE
from boundary.experiment.replay import RequestRecord, Run
from boundary.experiment.stream import Stream


def oracle_metrics(records: list[RequestRecord]) -> dict[str, Any]:
    ttft = [r.ttft_seconds for r in records]
    return {
        "policy": ORACLE,
        "joint_matched_tokens": sum(r.joint for r in records),
        "avoided_prefill_flops": sum(r.avoided_flops for r in records),
        "prompt_tokens_recomputed": sum(r.prompt_tokens - r.joint for r in records),
        "ttft_estimate_seconds": {"mean": statistics.fmean(ttft) if ttft else None},
        "hit_rate": slice_summary(records),
        "first_continuation": slice_summary([r for r in records if r.turn == 1]),
        "steady_state": slice_summary([r for r in records if r.turn >= 2]),
    }


def oracle_records(
    stream: Stream, hits: list[int], cost: PrefillCostModel, chunk: int
) -> list[RequestRecord]:
    """The oracle's records: its prefill in the scheduler's own chunks (no forced split)."""
    out = []
    for r, hit in zip(stream.requests, hits, strict=True):
        out.append(
            RequestRecord.of(
                r,
                cost,
                hit,
                prefill_steps=max(1, -(-(r.num_prompt_tokens - hit) // chunk)),
                attention=hit,
                recurrent=hit,
                junction=0,
                oracle=hit,
                served_by=None,
                served_from_output=None,
                producer_age=None,
                flooring_loss=None,
                states_created=0,
                candidates=0,
                collapsed=0,
                recached=0,
                forced_splits=0,
            )
        )
    return out


def add_incremental(metrics: list[dict[str, Any]], runs: dict[tuple[str, str], Run], budget: str) -> None:
    """``both``'s second checkpoint against each single endpoint: the incremental hit rate
    (tokens the checkpoint the single policy lacks served, over the oracle's), the saved work
    (``both``'s avoided FLOPs minus the single policy's: FLOPs add up, ratios do not) and
    the plan's Q10 verdict (saved work minus work lost to its evictions)."""
    by_name = {m["policy"]: m for m in metrics}
    if "both" not in by_name:
        return
    both = by_name["both"]
    both["incremental_hit_rate"] = {}
    both["incremental_saved_work"] = {}
    both["second_checkpoint_verdict"] = {}
    added = {"input_end": "decode_end", "decode_end": "input_end"}
    for single in ("input_end", "decode_end"):
        if single in by_name:
            records = runs[(budget, "both")].records
            both["incremental_hit_rate"][f"over_{single}"] = incremental_hit_rate(records, added[single])
            both["incremental_saved_work"][f"over_{single}"] = (
                both["avoided_prefill_flops"] - by_name[single]["avoided_prefill_flops"]
            )
            both["second_checkpoint_verdict"][f"over_{single}"] = second_checkpoint_verdict(
                runs[(budget, "both")], runs[(budget, single)]
            )
