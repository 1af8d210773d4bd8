"""The experiment plan's metrics, each a named function under the plan's definition.

Where it sits: in the experiment, after the replay: the plan's question-specific metrics;
``harness`` and ``sweep`` call it, ``report.tables`` reads it.

Every function reads records (``RequestRecord``) or a ``Run`` and nothing else; the tests
work each one out by hand on a small stream (``tests/experiment/test_metrics.py``).

- Q2 ``decode_end_reuse``: continuations served by a D_end state, and (Q3) how many of those
  continue a tool call.
- Q4 ``input_end_fallback``: among continuations whose previous request's D_end state was
  still retained at lookup but hash-rejected, those U_end served *and* that gained tokens by
  it: a joint hit deeper than the ``decode_end`` run's (D_end kept, no U_end to fall back on)
  on the same request; U_end landing on the block twin, which ``decode_end`` keeps as well,
  gains nothing and is not counted.
- Q5 ``unreachable_prompt_end``: the pool is the first continuations where P_end's state
  exists (it materializes at a position > 0) and is not a prefix of the request;
  ``main_sparse`` missed where its joint hit fell short of the oracle's; U_end *avoided* the
  miss where it served the request deeper than ``main_sparse`` did. First continuations whose
  P_end never materialized are counted apart (they are no miss P_end caused).
- Q6 ``after_junction``: requests whose prefix carried a cached reactive junction at lookup
  (the branch was observed and its junction materialized): what the policy adds over
  ``main_sparse`` on exactly those requests, and the share U_end served; beside it, the
  branches lookups observed and the junction states created, which say why the pool is
  empty when it is (every branch point already under a kept state: no junction is made).
- Q9 ``bytes_by_kind``: time-averaged retained state bytes per endpoint kind (a state counts
  under its first kind in serving order); snapshot bytes per label.
- Q10 ``second_checkpoint_verdict``: ``both`` against a single-endpoint run, request by
  request, with a verdict only past ``VERDICT_THRESHOLD`` of the stream's prefill work.
- Q13 ``logical_candidates_on_one_state``: per request, the plan's logical candidates
  (U_end, P_end, D_end) that materialize on one state, at a unit; a policy's candidates on
  P_end's block twin and junctions on a kept state are counted apart (``RetentionPlan``).
- Derived: ``incremental_hit_rate`` (tokens the second checkpoint served over the oracle's),
  ``per_retained_state_byte`` (over *mean* retained bytes), ``materialization_bytes``.
- PD states (``pd_states``): per checkpoint kind of the previous request, how many
  continuations found it *retained*, *hash-matched*, *consumable* by the worker that
  prefills them, and *selected* as their joint hit, under five deployments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from boundary.checkpoints.kinds import prompt_end_position
from boundary.checkpoints.retention import EngineGeometry, decode_position, prompt_position
from boundary.experiment.aggregate import ratio
from boundary.experiment.policies import boundaries
from boundary.experiment.replay import ProducerAge, RequestRecord, Run
from boundary.experiment.serving import ServingRun
from boundary.experiment.stream import StreamRequest

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
# Q10: a net effect smaller than this share of the stream's prefill work is no verdict.
VERDICT_THRESHOLD = 0.005
NO_EFFECT = "no measurable effect"
_PREVIOUS = ProducerAge.PREVIOUS.value


def _baseline_joints(records: Sequence[RequestRecord], baseline: Run | None) -> dict[int, int]:
    """``main_sparse``'s joint hit per request; a run without a baseline is its own."""
    return {r.rid: r.joint for r in (baseline.records if baseline is not None else records)}


def decode_end_reuse(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Q2 / Q3 over continuations (turn >= 1): served by D_end, by how they continue."""
    cont = [r for r in records if r.turn >= 1]
    served = [r for r in cont if r.served_by == "decode_end"]
    by = Counter(r.continuation for r in served)
    return {
        "continuations": len(cont),
        "decode_end_served": len(served),
        "rate": ratio(len(served), len(cont)),
        "by_continuation": dict(by),
        "tool_share": ratio(by.get("tool", 0), len(served)),
    }


def input_end_fallback(records: Sequence[RequestRecord], decode_only: Run | None) -> dict[str, Any]:
    """Q4 (see the module doc); ``decode_only``: the decode_end run on the same stream and
    budget (None: not run, and what U_end gained is unknown). ``rate``: gained / requests."""
    pool = [r for r in records if "decode_end" in r.retained_prev and "decode_end" not in r.matched_prev]
    served = [r for r in pool if r.served_by == "input_end"]
    if decode_only is None:
        return {
            "requests": len(pool),
            "input_end_served": len(served),
            "input_end_gained": None,
            "gained_tokens": None,
            "rate": None,
        }
    base = {r.rid: r.joint for r in decode_only.records}
    gained = [r for r in served if r.joint > base[r.rid]]
    return {
        "requests": len(pool),
        "input_end_served": len(served),
        "input_end_gained": len(gained),
        "gained_tokens": sum(r.joint - base[r.rid] for r in gained),
        "rate": ratio(len(gained), len(pool)),
    }


def unreachable_prompt_end(records: Sequence[RequestRecord], baseline: Run | None) -> dict[str, Any]:
    """Q5 (see the module doc); ``rate``: avoided / main_sparse_missed."""
    base = _baseline_joints(records, baseline)
    first = [r for r in records if r.turn == 1]
    pool = [r for r in first if r.prompt_end_unreachable]
    missed = [r for r in pool if base[r.rid] < r.oracle]
    avoided = [r for r in missed if r.served_by == "input_end" and r.joint > base[r.rid]]
    return {
        "first_continuations": len(first),
        "prompt_end_not_materialized": sum(r.prompt_end_materialized is False for r in first),
        "requests": len(pool),
        "main_sparse_missed": len(missed),
        "input_end_served": sum(r.served_by == "input_end" for r in pool),
        "avoided": len(avoided),
        "recovered_tokens": sum(r.joint - base[r.rid] for r in avoided),
        "rate": ratio(len(avoided), len(missed)),
    }


def after_junction(
    records: Sequence[RequestRecord], baseline: Run | None, junction_states: int
) -> dict[str, Any]:
    """Q6 (see the module doc); ``junction_states``: reactive states the run created."""
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
        "input_end_served_share": ratio(served, len(pool)),
        "branches_observed": sum(r.junction > 0 for r in records),
        "junction_states_created": junction_states,
    }


def bytes_by_kind(run: Run) -> dict[str, Any]:
    """Q9: per kind, time-averaged bytes (byte-seconds under its primary kind / elapsed) and
    snapshot bytes (states created carrying the label × state size)."""
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


def producer_age_by_kind(records: Sequence[RequestRecord]) -> dict[str, dict[str, int]]:
    """For every served state, by the kind it served as: how old its producer was relative to
    the consumer (``ProducerAge``: the session's previous request, two requests earlier,
    older, or another session). A chain fallback shows as ``input_end`` served ``two_back`` or
    ``older``."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        if r.served_by is None or r.producer_age is None:
            continue
        ages = out.setdefault(r.served_by, {a.value: 0 for a in ProducerAge})
        ages[r.producer_age] += 1
    return out


def checkpoint_budget(run: Run) -> dict[str, Any] | None:
    """The equal checkpoint-byte budget as the run kept it (None: no budget): its bytes, the
    peak kept-state bytes under it, the admissions that went past it (``exceedances``, 0 by
    the admission rule, counted), the states refused for lack of room, by kind, the kept
    states it evicted to make room, and the pool's over-commits (allocations the pool had no
    page for: what a real engine would have made wait)."""
    if run.checkpoint_budget_bytes is None:
        return None
    return {
        "bytes": run.checkpoint_budget_bytes,
        "peak_bytes": run.peak_checkpoint_bytes,
        "exceedances": run.budget_exceedances or 0,
        "refusals": dict(sorted(run.stats.budget_refusals.items())),
        "evictions": run.stats.evictions.get(("state", "state"), 0),
        "pool_overcommits": run.overcommits,
    }


def second_checkpoint_verdict(both: Run | ServingRun, single: Run | ServingRun) -> dict[str, Any]:
    """Q10: ``both`` against ``single`` request by request (work in FLOPs; replays or serving
    runs of the same requests). ``pays`` / ``costs``
    only when |net| reaches ``VERDICT_THRESHOLD`` of the stream's prefill work (the work with
    no cache: avoided + recomputed), else ``no measurable effect``."""
    mine = {r.rid: r.avoided_flops for r in both.records}
    saved = lost = 0.0
    for r in single.records:
        d = mine[r.rid] - r.avoided_flops
        if d > 0:
            saved += d
        else:
            lost -= d
    net = saved - lost
    share = ratio(net, sum(r.avoided_flops + r.recompute_flops for r in single.records))
    verdict = NO_EFFECT
    if share is not None and abs(share) >= VERDICT_THRESHOLD:
        verdict = "pays" if net > 0 else "costs"
    return {
        "saved_flops": saved,
        "lost_flops": lost,
        "net_flops": net,
        "net_share_of_prefill_work": share,
        "threshold_share": VERDICT_THRESHOLD,
        "verdict": verdict,
    }


def logical_candidates_on_one_state(
    requests: Sequence[StreamRequest], geometry: EngineGeometry
) -> dict[str, Any]:
    """Q13 at one unit: requests whose U_end, P_end or D_end state (where each materializes
    on ``geometry``; a candidate that does not materialize, or a U_end the template cannot
    expose, is none) shares its position with another of the three. D_end's state lies at or
    after P_end and the others' before it, so only U_end and P_end can share one."""
    pairs = {"u_end_p_end": 0, "u_end_d_end": 0, "p_end_d_end": 0}
    any_pair = 0
    for request in requests:
        b = boundaries(request, finished=True)
        u = prompt_position(min(b.u_end, b.p_end - 1), geometry.unit) if b.u_end is not None else 0
        p = prompt_end_position(b.p_end, geometry.unit)
        d = decode_position(b.d_end or 0, b.p_end, geometry)
        hits = {"u_end_p_end": u == p > 0, "u_end_d_end": u == d > 0, "p_end_d_end": p == d > 0}
        for name, shared in hits.items():
            pairs[name] += shared
        any_pair += any(hits.values())
    return {"requests": len(requests), **pairs, "any": any_pair, "share": ratio(any_pair, len(requests))}


def incremental_hit_rate(both: Sequence[RequestRecord], added: str) -> float | None:
    """Tokens ``both`` reused from states of kind ``added`` (the checkpoint a single-endpoint
    policy lacks) over the oracle's reusable tokens: the reuse the second checkpoint serves."""
    return ratio(sum(r.joint for r in both if r.served_by == added), sum(r.oracle for r in both))


def per_retained_state_byte(run: Run) -> dict[str, float | None]:
    """Prompt tokens and prefill FLOPs saved per byte of *mean* retained state."""
    mean = run.mean_state_bytes
    return {
        "saved_prompt_tokens_per_retained_state_byte": ratio(sum(r.joint for r in run.records), mean),
        "saved_prefill_work_per_retained_state_byte": ratio(sum(r.avoided_flops for r in run.records), mean),
    }


def materialization_bytes(run: Run) -> int:
    """Copy-on-write bytes: a hit that ends inside a block copies that one block."""
    g = run.geometry
    return sum(r.joint % g.block_size != 0 for r in run.records) * g.block_bytes


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


def forced_split_cost(records: Sequence[RequestRecord], baseline: Run | None) -> dict[str, Any]:
    """Q11: what a policy's forced scheduler splits cost in TTFT against the prefill it saved.
    Each split is one more scheduler step, charged one step's fixed cost (``split_seconds``);
    ``saved_prefill_seconds``: main_sparse's prefill compute minus this policy's on the same
    requests (None for main_sparse itself, or with no baseline); ``net_seconds`` = saved minus
    the extra steps' cost (the splits beyond main_sparse's own); ``outweighs``: the extra steps
    cost more than the prefill they saved; ``tokens_per_extra_step``: reused tokens gained over
    main_sparse per extra step."""
    splits = sum(r.forced_splits for r in records)
    cost = sum(r.split_seconds for r in records)
    out: dict[str, Any] = {"splits": splits, "split_seconds": cost}
    if baseline is None:
        return out | {"saved_prefill_seconds": None, "net_seconds": None, "outweighs": None}
    base = {r.rid: r for r in baseline.records}
    saved = sum(base[r.rid].prefill_seconds - r.prefill_seconds for r in records)
    extra_splits = splits - sum(base[r.rid].forced_splits for r in records)
    extra = cost - sum(base[r.rid].split_seconds for r in records)
    gained = sum(r.joint - base[r.rid].joint for r in records)
    return out | {
        "extra_splits": extra_splits,
        "extra_split_seconds": extra,
        "saved_prefill_seconds": saved,
        "net_seconds": saved - extra,
        "outweighs": extra > 0 and extra > saved,
        "tokens_per_extra_step": gained / extra_splits if extra_splits > 0 else None,
    }
