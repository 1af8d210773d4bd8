"""The experiment plan's question-specific metrics, each under the plan's definition.

Where it sits: in the experiment, after the replay: the plan's question-specific metrics;
``harness`` and ``sweep`` call it, ``report.tables`` reads it.

- Q4 ``input_end_fallback``: among continuations whose previous request's D_end state was
  still retained at lookup but hash-rejected (its prefix id is not in this prompt), the share
  that U_end served.
- Q5 ``unreachable_prompt_end_first_continuations``: among first continuations that share
  neither P_end's materialized position nor its block twin with the previous request (P_end
  and everything P_end's policy keeps of that request is unreachable), the share U_end served;
  and, beside it, the same for P_end's own position alone (its block twin may still serve).
- Q6 ``after_junction``: requests whose prefix carried a cached reactive junction at lookup
  (the branch was observed and its junction materialized): what the policy still adds over
  ``main_sparse`` on exactly those requests, and the share U_end served.
- Q9 ``retained_state_bytes_by_kind``: time-averaged retained state bytes per endpoint kind
  (a state counts under its first kind in serving order).
- Q10 ``second_checkpoint_verdict``: for ``both`` against each single-endpoint policy, per
  request, prefill work saved where ``both`` reused more (the second checkpoint's saved work)
  and lost where it reused less (states it displaced), the net with a sign, and a verdict.
- PD states (``pd_states``): per checkpoint kind of the previous request, how many
  continuations found it *retained*, *hash-matched*, *consumable* by the worker that
  prefills them, and *selected* as their joint hit, under five deployments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from boundary.experiment.replay import ProducerAge, RequestRecord, Run

PD_KINDS = ("prompt_end", "prompt_end_block", "input_end", "decode_end")
PREFILL_WORKERS = 4  # strict disaggregation: prefill workers a request is spread over
DEPLOYMENTS = {
    "colocated": "one worker prefills and decodes: every hash-matched state is consumable",
    "sticky_routing": "P/D split, a session pinned to one prefill worker, no decode-to-prefill "
    "path: prefill-side states consumable, decode-side not",
    "decode_to_prefill_transfer": "P/D split, decode-side states shipped back to the prefill "
    "worker: every hash-matched state consumable (transfer time not modelled)",
    "shared_cache_store": "states published to a store every worker reads: every hash-matched "
    "state consumable (store latency not modelled)",
    "strict_disaggregation": f"P/D split, no decode-to-prefill path, requests spread over "
    f"{PREFILL_WORKERS} prefill workers without session affinity: prefill-side states consumable "
    f"only when the request lands on its producer's worker",
}
_PREVIOUS = ProducerAge.PREVIOUS.value


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def input_end_fallback(records: Sequence[RequestRecord]) -> dict[str, Any]:
    pool = [r for r in records if "decode_end" in r.retained_prev and "decode_end" not in r.matched_prev]
    served = sum(r.served_by == "input_end" for r in pool)
    return {"requests": len(pool), "input_end_served": served, "rate": _ratio(served, len(pool))}


def unreachable_prompt_end(records: Sequence[RequestRecord]) -> dict[str, Any]:
    pool = [r for r in records if r.turn == 1 and r.prompt_end_unreachable]
    served = sum(r.served_by == "input_end" for r in pool)
    own = [r for r in records if r.turn == 1 and r.prompt_end_position_unreachable]
    own_served = sum(r.served_by == "input_end" for r in own)
    return {
        "first_continuations": sum(r.turn == 1 for r in records),
        "requests": len(pool),
        "input_end_served": served,
        "rate": _ratio(served, len(pool)),
        "prompt_end_position_unreachable": {
            "requests": len(own),
            "input_end_served": own_served,
            "rate": _ratio(own_served, len(own)),
        },
    }


def after_junction(records: Sequence[RequestRecord], baseline: Run | None) -> dict[str, Any]:
    pool = [r for r in records if r.junction_present]
    base = {r.rid: r.joint for r in baseline.records} if baseline is not None else None
    served = sum(r.served_by == "input_end" for r in pool)
    return {
        "requests": len(pool),
        "reused_tokens": sum(r.joint for r in pool),
        "additional_matched_tokens_vs_main_sparse": None
        if base is None
        else sum(r.joint - base[r.rid] for r in pool),
        "input_end_served": served,
        "input_end_served_share": _ratio(served, len(pool)),
    }


def bytes_by_kind(run: Run) -> dict[str, Any]:
    seconds = run.stats.state_byte_seconds_by_kind
    elapsed = run.elapsed
    created = run.stats.created
    state = run.geometry.state_bytes
    return {
        kind: {
            "mean_bytes": seconds.get(kind, 0.0) / elapsed if elapsed > 0 else None,
            "snapshot_bytes": created.get(kind, 0) * state,
        }
        for kind in (*PD_KINDS, "reactive")
    }


def second_checkpoint_verdict(both: Run, single: Run) -> dict[str, Any]:
    """``both`` against ``single`` request by request (work in FLOPs)."""
    mine = {r.rid: r.avoided_flops for r in both.records}
    saved = lost = 0.0
    for r in single.records:
        d = mine[r.rid] - r.avoided_flops
        if d > 0:
            saved += d
        else:
            lost -= d
    net = saved - lost
    verdict = "pays" if net > 0 else "costs" if net < 0 else "neutral"
    return {"saved_flops": saved, "lost_flops": lost, "net_flops": net, "verdict": verdict}


def _worker(rid: int) -> int:
    return (rid * 2654435761) % 2**32 % PREFILL_WORKERS


def pd_states(records: Sequence[RequestRecord], split: Run | None) -> dict[str, Any]:
    """Counts over continuations (requests with a previous request in their session)."""
    cont = [r for r in records if r.turn >= 1]
    split_served = {r.rid: r for r in split.records} if split is not None else {}
    producer = {(r.session, r.turn): r.rid for r in records}
    out: dict[str, Any] = {"continuations": len(cont), "deployments": DEPLOYMENTS, "by_kind": {}}
    for kind in PD_KINDS:
        retained = [r for r in cont if kind in r.retained_prev]
        matched = [r for r in retained if kind in r.matched_prev]
        prefill = [r for r in matched if kind in r.prefill_side_prev]
        same = [r for r in prefill if _worker(r.rid) == _worker(producer[(r.session, r.turn - 1)])]
        colocated = sum(r.served_by == kind and r.producer_age == _PREVIOUS for r in cont)
        sticky = sum(
            (s := split_served.get(r.rid)) is not None and s.served_by == kind and s.producer_age == _PREVIOUS
            for r in cont
        )
        strict = sum(
            (s := split_served.get(r.rid)) is not None and s.served_by == kind and s.producer_age == _PREVIOUS
            for r in same
        )
        consumable = {"colocated": len(matched), "sticky_routing": len(prefill)}
        consumable |= {"decode_to_prefill_transfer": len(matched), "shared_cache_store": len(matched)}
        consumable["strict_disaggregation"] = len(same)
        selected = {"colocated": colocated, "sticky_routing": sticky if split else None}
        selected |= {"decode_to_prefill_transfer": colocated, "shared_cache_store": colocated}
        selected["strict_disaggregation"] = strict if split else None
        out["by_kind"][kind] = {
            "retained": len(retained),
            "hash_matched": len(matched),
            "consumable": consumable,
            "selected": selected,
        }
    return out
