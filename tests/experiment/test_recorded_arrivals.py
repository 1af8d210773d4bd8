"""A trace's recorded arrival times (``arrival_s``), replayed: the uncontended schedule, the
closed-loop load model and the stream's provenance, each worked out by hand."""

from __future__ import annotations

import json
from array import array
from dataclasses import replace

import pytest

from boundary.experiment.arrivals import recorded
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.report.header import arrival_line
from boundary.experiment.serving import LoadModel, client_delays
from boundary.experiment.stream import Continuation, StreamRequest
from boundary.experiment.workloads import WorkloadOptions, build_stream
from tests.experiment.test_load import _serve, _two_turns


class LinearCost(PrefillCostModel):
    """Prefill 1 ms per prompt token with no hit; decode 20 ms per output token (the default)."""

    def seconds(self, start: int, end: int) -> float:
        return (end - start) / 1000.0


COST = LinearCost(QWEN3_5_35B_A3B)


def _request(session: str, turn: int, prompt: int, output: int, at: float) -> StreamRequest:
    return StreamRequest(
        rid=-1,
        session=session,
        turn=turn,
        tokens=array("I", range(1, prompt + output + 1)),
        num_prompt_tokens=prompt,
        u_end=None,
        d_end=prompt + output - 1,
        continuation=Continuation.FIRST if turn == 0 else Continuation.USER,
        recorded_arrival=at,
    )


def test_recorded_arrivals_are_kept_and_a_request_never_arrives_before_its_previous_reply():
    """Trace clock from 1000.0. Session a: 100-token prompt + 10 out at 1000.0 (service
    0.1 + 0.2 = 0.3 s, finishes 0.3); 200 + 10 at 1000.5 (after 0.3: kept; finishes 0.5 + 0.4
    = 0.9); 100 + 5 at 1000.6, before 0.9: delayed to 0.9 (0.3 s), finishes 0.9 + 0.1 + 0.1 =
    1.1. Session b: 300 + 10 at 1000.1 (finishes 0.1 + 0.5 = 0.6). Arrival order: a0, b0, a1, a2."""
    a = [
        _request("a", 0, 100, 10, 1000.0),
        _request("a", 1, 200, 10, 1000.5),
        _request("a", 2, 100, 5, 1000.6),
    ]
    b = [_request("b", 0, 300, 10, 1000.1)]
    s = recorded([a, b], COST)
    got = [(r.session, r.turn, r.rid, r.arrival, r.finish) for r in s.requests]
    expected = [("a", 0, 0, 0.0, 0.3), ("b", 0, 1, 0.1, 0.6), ("a", 1, 2, 0.5, 0.9), ("a", 2, 3, 0.9, 1.1)]
    assert [g[:3] for g in got] == [e[:3] for e in expected]
    assert [g[3:] for g in got] == [pytest.approx(e[3:]) for e in expected]
    assert s.delayed == 1 and s.delay_seconds == pytest.approx(0.3)


def test_the_load_model_keeps_each_recorded_client_delay_after_the_simulated_finish():
    """``_two_turns`` on a recorded schedule: turn 0 at 0 (finishing at 0.8 uncontended), turn 1
    recorded at 10.8: a client delay of 10 s. Served (test_load's step costs, no think time):
    turn 0 TTFT 2.5, finish 5.5; turn 1 arrives 5.5 + 10 = 15.5, hits 1984 of its 3,000
    tokens, one step 0.5 + 1.016: first token at 17.016 (TTFT 1.516)."""
    t0, t1 = _two_turns()
    stream = [replace(t0, arrival=0.0, finish=0.8), replace(t1, arrival=10.8, finish=11.0)]
    model = LoadModel(concurrency=1, think_time=0.0, tool_latency=0.0, recorded_delays=True)
    assert client_delays([stream], model) == [[0.0, pytest.approx(10.0)]]
    run = _serve(stream, model)
    first, second = run.timings
    assert (first.arrival, first.ttft, first.finish) == pytest.approx((0.0, 2.5, 5.5))
    assert (second.arrival, second.ttft, second.first_token) == pytest.approx((15.5, 1.516, 17.016))
    drawn = _serve(stream, replace(model, recorded_delays=False))
    assert drawn.timings[1].arrival == pytest.approx(5.5)  # tool latency 0: no recorded gap


def _trace(tmp_path, times: list[float] | None):
    lines = [
        {"session": "s", "prompt_token_ids": list(range(1, 101)), "output": {"token_ids": [7] * 10}},
        {"session": "s", "prompt_token_ids": list(range(1, 201)), "output": {"token_ids": [8] * 10}},
        {"session": "t", "prompt_token_ids": list(range(500, 800)), "output": {"token_ids": [9] * 10}},
    ]
    if times is not None:
        for line, at in zip(lines, times, strict=True):
            line["arrival_s"] = at
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return str(path)


def test_a_trace_with_times_is_replayed_on_them_and_says_so(tmp_path):
    """s: 100 + 10 at 50.0 (finishes 0.3), 200 + 10 at 50.2 (delayed to 0.3); t: at 51.0."""
    path = _trace(tmp_path, [50.0, 50.2, 51.0])
    stream = build_stream(path, WorkloadOptions(family="qwen3_5"), COST, use_cache=False)
    assert [(r.session, r.turn) for r in stream.requests] == [("s", 0), ("s", 1), ("t", 0)]
    assert [r.arrival for r in stream.requests] == pytest.approx([0.0, 0.3, 1.0])
    arrivals = stream.provenance["arrivals"]
    assert arrivals["source"] == "recorded" and arrivals["delayed_requests"] == 1
    assert arrivals["delay_seconds"] == pytest.approx(0.1)
    assert "recorded in the trace (`arrival_s`)" in arrival_line(arrivals)
    assert "1 request(s) delayed, 0.100 s in all" in arrival_line(arrivals)
    again = build_stream(
        path, WorkloadOptions(family="qwen3_5", arrivals="synthesised"), COST, use_cache=False
    )
    assert again.provenance["arrivals"]["source"] == "synthesised"
    assert "asked" in again.provenance["arrivals"]["why"]


def test_a_trace_without_times_is_synthesised_and_says_so(tmp_path):
    stream = build_stream(_trace(tmp_path, None), WorkloadOptions(family="qwen3_5"), COST, use_cache=False)
    arrivals = stream.provenance["arrivals"]
    assert arrivals["source"] == "synthesised" and arrivals["why"] == "the trace has no arrival_s"
    assert arrivals["session_starts"].startswith("Poisson")
    assert arrival_line(arrivals).startswith(
        "  - arrivals: synthesised (the trace has no arrival_s): Poisson"
    )
    assert len(stream.requests) == 3
