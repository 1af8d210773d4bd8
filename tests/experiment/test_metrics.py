"""The plan's metrics on a stream small enough to work out by hand, replayed through the cache.

The stream (block 8, unit 4 unless a test says otherwise; a block costs 100 bytes, a state 200;
infinite capacity, so nothing is evicted, unless a test says otherwise):

- request 0 (session "a", turn 0), arrives at 0, finishes at 10: 27 tokens, prompt 23
  (P_end's anchor 22 -> unit 20, block twin 16), U_end 21 (-> 20), D_end 26 (block floor 24,
  past P_end: a decode state at 24);
- request 1 (turn 1, a tool continuation), arrives at 20, finishes at 30: its prompt is request
  0's 27 tokens plus 4 (n = 31: P_end's anchor 30 -> 28, twin 24), U_end 25 (-> 24), D_end 32
  (-> 32). Request 0 computed 26 tokens and hashed 6 units (24 tokens), so 3 blocks are cached:
  request 1's attention matches 24 tokens; the oracle's reusable prefix is 24.

The replay runs from 0 to 30 (elapsed 30 s).
"""

from __future__ import annotations

from array import array

import pytest

from boundary.cache import CacheConfig, engine_geometry
from boundary.cache.entry import Entry, EntryKind
from boundary.cache.records import primary_kind
from boundary.checkpoints.kinds import CheckpointKind
from boundary.checkpoints.retention import EngineGeometry, Keep, Phase
from boundary.experiment import plan
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.metrics import run_metrics
from boundary.experiment.policies import policy
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.replay import BudgetMode, Run, event_order, replay, replay_oracle, serving_kind
from boundary.experiment.stream import Continuation, Stream, StreamRequest, cache_requests
from tests.cache.conftest import geometry

COST = PrefillCostModel(QWEN3_5_35B_A3B)


def hand_stream() -> Stream:
    first = StreamRequest(
        rid=0,
        session="a",
        turn=0,
        tokens=array("I", range(27)),
        num_prompt_tokens=23,
        u_end=21,
        d_end=26,
        continuation=Continuation.FIRST,
        tool_call=True,
        arrival=0.0,
        finish=10.0,
    )
    second = StreamRequest(
        rid=1,
        session="a",
        turn=1,
        tokens=array("I", range(33)),
        num_prompt_tokens=31,
        u_end=25,
        d_end=32,
        continuation=Continuation.TOOL,
        arrival=20.0,
        finish=30.0,
    )
    return Stream("hand", {"workload": "hand"}, [first, second])


def run_of(name: str, unit: int = 4, *, stream: Stream | None = None, capacity: float = float("inf")) -> Run:
    stream, geom = stream or hand_stream(), geometry(block=8, unit=unit)
    requests = cache_requests(stream, unit)
    events = event_order(requests)
    return replay(
        stream,
        requests,
        policy(name),
        CacheConfig(geom, capacity),
        COST,
        replay_oracle(requests, unit, events),
        budget=BudgetMode.EQUAL_CAPACITY,
        events=events,
        geometry=engine_geometry(geom),
        check_every=1,
    )


def test_main_sparse_on_the_hand_stream_resumes_inside_a_block_from_p_ends_unit_state():
    """Request 0 keeps the twin at 16 and P_end at 20; request 1 matches attention to 24 and
    the deepest state at or below it is P_end's at 20: joint 20, inside block [16, 24)."""
    run = run_of("main_sparse")
    assert [(r.joint, r.oracle, r.served_by) for r in run.records] == [(0, 0, None), (20, 24, "prompt_end")]
    assert run.elapsed == 30.0


def test_retained_bytes_by_kind_are_byte_seconds_over_the_elapsed_time():
    """main_sparse: request 0's states at 16 (twin) and 20 (P_end) live 0 -> 30; request 1's at
    28 (P_end) and 24 live 20 -> 30. Request 1's attention matched 24, past its joint hit 20: a
    junction at 24, on its twin, so that state is twin + junction, counted as a junction (the
    serving order puts it before the twin). Byte-seconds: P_end 200 x 30 + 200 x 10 = 8,000;
    twin 200 x 30 = 6,000; junction 200 x 10 = 2,000; over 30 s: 266.67, 200 and 66.67 B.
    Snapshots per label: P_end 2 x 200, twin 2 x 200, junction 1 x 200. All states: 16,000 / 30
    = 533.33 B mean; peak 4 x 200 = 800 B."""
    run = run_of("main_sparse")
    by_kind = plan.bytes_by_kind(run)
    assert by_kind["prompt_end"] == {"mean_bytes": pytest.approx(8000 / 30), "snapshot_bytes": 400}
    assert by_kind["prompt_end_block"] == {"mean_bytes": pytest.approx(200.0), "snapshot_bytes": 400}
    assert by_kind["reactive"] == {"mean_bytes": pytest.approx(2000 / 30), "snapshot_bytes": 200}
    for kind in ("input_end", "decode_end"):
        assert by_kind[kind] == {"mean_bytes": 0.0, "snapshot_bytes": 0}
    assert run.mean_state_bytes == pytest.approx(16000 / 30)
    assert run.stats.peak_state_bytes == 800
    m = run_metrics(run, run)
    assert m["retained_state_bytes"] == {"mean": pytest.approx(16000 / 30), "peak": 800}
    assert m["retained_state_bytes_by_kind"] == by_kind


def test_a_junction_on_the_twin_is_counted_apart_from_the_plans_candidates():
    """Request 1's junction (24) lands on its twin (24): one junction on a kept state. No
    candidate of main_sparse lands on the twin (P_end at 20 vs twin 16; 28 vs 24) and it has
    one candidate of its own per request: nothing collapses."""
    m = run_metrics(run_of("main_sparse"), None)
    assert (m["duplicate_candidates"], m["candidates_on_twin"], m["junctions_on_kept_states"]) == (0, 0, 1)


def test_displaced_checkpoints_are_the_evicted_states_that_never_served_a_hit():
    """The hand stream plus request 2 (session "b", 20 fresh tokens, prompt 16) arriving at 40,
    in a 1,000-byte cache, under main_sparse. Request 1's arrival evicts request 0's twin (16),
    never hit; request 1 resumes from P_end's state at 20 (one hit). Request 2 evicts the rest
    of session "a": request 1's P_end (28) and twin + junction (24), never hit, and the state at
    20, which served request 1. Four states evicted, three displaced; the blocks evicted beside
    them are no checkpoints at all."""
    third = StreamRequest(
        rid=2,
        session="b",
        turn=0,
        tokens=array("I", range(1000, 1020)),
        num_prompt_tokens=16,
        u_end=14,
        d_end=19,
        continuation=Continuation.FIRST,
        arrival=40.0,
        finish=50.0,
    )
    stream = Stream("hand", {"workload": "hand"}, [*hand_stream().requests, third])
    run = run_of("main_sparse", stream=stream, capacity=1000)
    assert [(r.joint, r.served_by) for r in run.records] == [(0, None), (20, "prompt_end"), (0, None)]
    evicted = sorted((e.position, e.creator, e.hits) for e in run.stats.evicted_states)
    assert evicted == [(16, 0, 0), (20, 0, 1), (24, 1, 0), (28, 1, 0)]
    m = run_metrics(run, None)
    assert m["displaced_checkpoints"] == 3
    assert m["checkpoint_lifetimes"]["evicted"] == 4
    assert sum(m["evictions"].values()) > 4  # blocks went too


def test_savings_per_retained_byte_divide_by_the_mean_not_the_peak():
    """20 tokens reused over a mean of 16,000 / 30 B = 0.0375 tokens per byte (over the peak,
    800 B, it would read 0.025); the work: the FLOPs of tokens [0, 20) over the same mean."""
    run = run_of("main_sparse")
    yields = plan.per_retained_state_byte(run)
    assert yields["saved_prompt_tokens_per_retained_state_byte"] == pytest.approx(20 * 30 / 16000)
    assert yields["saved_prefill_work_per_retained_state_byte"] == pytest.approx(
        COST.flops(0, 20) * 30 / 16000
    )
    assert run_metrics(run, run)["saved_prompt_tokens_per_retained_state_byte"] == pytest.approx(0.0375)


def test_materialization_bytes_count_one_block_per_hit_that_ends_inside_a_block():
    """main_sparse resumes request 1 at 20 (inside [16, 24)): one 100-byte block copied. At
    unit 8 both P_end states sit on block boundaries (16, then 24): nothing is copied."""
    assert plan.materialization_bytes(run_of("main_sparse")) == 100
    assert run_metrics(run_of("main_sparse"), None)["materialization_bytes"] == 100
    assert plan.materialization_bytes(run_of("main_sparse", unit=8)) == 0


def test_the_second_checkpoints_incremental_hit_rate_is_the_tokens_it_served_over_the_oracles():
    """both keeps U_end (20) and, at request 0's finish, D_end at its block floor 24; request 1
    resumes at 24 from D_end: 24 of the oracle's 24 tokens. Over input_end the added checkpoint
    is D_end: 24 / 24 = 1.0; over decode_end it is U_end, which served nothing: 0 / 24 = 0."""
    both = run_of("both").records
    assert [(r.joint, r.served_by) for r in both] == [(0, None), (24, "decode_end")]
    assert plan.incremental_hit_rate(both, "decode_end") == 1.0
    assert plan.incremental_hit_rate(both, "input_end") == 0.0
    assert plan.incremental_hit_rate([], "input_end") is None


def test_decode_end_reuse_counts_continuations_and_the_tool_share():
    """One continuation (request 1, a tool continuation), served by D_end under both: rate
    1 / 1, tool share 1 / 1; under main_sparse no D_end reuse: rate 0, tool share undefined."""
    assert plan.decode_end_reuse(run_of("both").records) == {
        "continuations": 1,
        "decode_end_served": 1,
        "rate": 1.0,
        "by_continuation": {"tool": 1},
        "tool_share": 1.0,
    }
    none = plan.decode_end_reuse(run_of("main_sparse").records)
    assert (none["rate"], none["tool_share"]) == (0.0, None)


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        # unit 4: request 0's U_end 21 -> 20 = P_end's 22 -> 20; request 1's 25 -> 24 != 30 -> 28
        (4, {"u_end_p_end": 1, "any": 1}),
        # unit 8: 21 -> 16 = 22 -> 16; 25 -> 24 = 30 -> 24
        (8, {"u_end_p_end": 2, "any": 2}),
        # unit 1: 21 != 22; 25 != 30
        (1, {"u_end_p_end": 0, "any": 0}),
    ],
)
def test_logical_candidates_on_one_state_are_counted_per_request_at_each_unit(unit, expected):
    """D_end materializes at 24 and 32 (block floors past P_end), never where U_end or P_end do."""
    counts = plan.logical_candidates_on_one_state(hand_stream().requests, EngineGeometry(8, unit))
    assert counts == {
        "requests": 2,
        "u_end_p_end": expected["u_end_p_end"],
        "u_end_d_end": 0,
        "p_end_d_end": 0,
        "any": expected["any"],
        "share": expected["any"] / 2,
    }


def test_a_state_that_stands_for_d_end_and_u_end_is_credited_to_d_end():
    """Serving order: D_end first (the deepest endpoint a state stands for), then U_end, P_end,
    a junction, the twin; a hit, the bytes per kind and a keep's kind all follow it."""
    state = Entry(0, EntryKind.STATE, 200, 24, 0, 0.0)
    state.labels = ("input_end", "decode_end")
    assert primary_kind(state) == "decode_end"
    assert serving_kind(state) == "decode_end"
    keep = Keep(24, (CheckpointKind.INPUT_END, CheckpointKind.DECODE_END), Phase.DECODE)
    assert keep.kind is CheckpointKind.DECODE_END
    state.labels = ("prompt_end_block", "reactive", "prompt_end", "input_end")
    assert primary_kind(state) == "input_end"
    state.labels = ("prompt_end_block", "reactive")
    assert serving_kind(state) == "reactive"


def test_first_continuation_extra_tokens_and_avoided_work_on_the_hand_stream():
    """Q1 / Q12: request 1 is the one first continuation; main_sparse resumes it at 20 of the
    oracle's 24 (5 / 6), both at 24 (1.0); no steady-state request (turn >= 2): undefined.
    Q7: both reuses 24 - 20 = +4 tokens more than main_sparse, and 31 - 24 = 7 prompt tokens are
    recomputed in request 1 plus all 23 of request 0: 30. Q8: both avoids the FLOPs of [0, 24)."""
    main, both = run_of("main_sparse"), run_of("both")
    m, b = run_metrics(main, main), run_metrics(both, main)
    assert m["first_continuation"] == {
        "requests": 1,
        "hit_rate": 1.0,
        "session_hit_rate": 1.0,
        "reused_tokens": 20,
        "oracle_tokens": 24,
        "reused_over_oracle": pytest.approx(20 / 24),
    }
    assert b["first_continuation"]["reused_over_oracle"] == 1.0
    assert b["steady_state"] == {
        "requests": 0,
        "hit_rate": None,
        "session_hit_rate": None,
        "reused_tokens": 0,
        "oracle_tokens": 0,
        "reused_over_oracle": None,
    }
    assert (b["additional_matched_tokens_vs_main_sparse"], b["prompt_tokens_recomputed"]) == (4, 30)
    assert b["avoided_prefill_flops"] == pytest.approx(COST.flops(0, 24))
