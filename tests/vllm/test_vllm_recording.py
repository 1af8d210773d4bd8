"""Production traces: the plugin records each finished request as a line of the audit's JSONL
(opt-in, bounded, written off the scheduler thread), and ``boundary audit`` replays the file as
it is. The stream is recorded from vLLM 0.33.0's real scheduler, two sessions in flight."""

from __future__ import annotations

import dataclasses
import json

import pytest
from boundary_vllm.recording import (
    FinishedRequest,
    RecordLimits,
    TraceRecorder,
    conversation_json,
    recorder_from,
)
from boundary_vllm.replay import EngineShape, Replay, ReplayRequest
from boundary_vllm.settings import Policy
from boundary_vllm.workload import with_reasoning

from boundary.cli.main import main as boundary_main
from boundary.datasets import tau_bench_airline
from boundary.trace import read_trace
from tests.vllm.streams import turns

pytestmark = pytest.mark.vllm


def recorded_session(conversation: int) -> list[ReplayRequest]:
    """The session's requests as ``chat_request(..., session=..., record=True)`` sends them."""
    messages = with_reasoning(tau_bench_airline()[conversation][:14])
    return [
        dataclasses.replace(
            ReplayRequest.from_turn(t),
            session=f"tau-{conversation}",
            conversation=conversation_json(messages[: t.index], None),
        )
        for t in turns(conversation)
    ]


def test_a_recorded_stream_holds_what_the_engine_saw_and_the_audit_replays_it(tmp_path):
    path = tmp_path / "recorded.jsonl"
    shape = EngineShape(
        block_size=16,
        prefix_match_unit=4,
        policy=Policy.BOTH,
        async_scheduling=True,
        settings={"record_path": str(path)},
    )
    run = Replay(shape)
    sessions = [recorded_session(11), recorded_session(5)]
    outcomes = run.run_sessions(sessions, concurrency=2)
    run.scheduler.shutdown()  # closes the recorder: everything queued is written

    records = read_trace(path)  # boundary's own trace loader
    assert len(records) == sum(len(s) for s in sessions)
    expected = {
        (f"tau-{c}", r.prompt_token_ids): (r, o)
        for c, session, outs in zip((11, 5), sessions, outcomes, strict=True)
        for r, o in zip(session, outs, strict=True)
    }
    for record in records:
        request, outcome = expected[(record.session, tuple(record.engine.prompt_token_ids))]
        assert record.output.token_ids == list(request.output_token_ids)
        assert record.engine.u_end == request.input_end
        assert record.engine.p_end == len(request.prompt_token_ids)
        assert record.engine.hit_tokens == outcome.hit_tokens
        assert record.engine.served == outcome.hit_kind
        assert record.engine.policy == "both"
    assert {r.engine.served for r in records} >= {"input_end", "decode_end"}
    assert run.scheduler.boundary_recorder.stats.written == len(records)

    report = tmp_path / "audit.json"
    rc = boundary_main(
        [
            "audit",
            str(path),
            "--family",
            "qwen3_5",
            "--template-kwargs",
            '{"enable_thinking": true}',
            "--unit",
            "4",
            "--no-what-if",
            "--json",
            str(report),
            "--markdown",
            str(tmp_path / "audit.md"),
        ]
    )
    assert rc == 0
    audited = json.loads(report.read_text())
    assert len(audited["turns"]) == len(records)
    by_turn = {}
    for name in {r.session for r in records}:
        for k, r in enumerate(r for r in records if r.session == name):
            by_turn[(name, k)] = r
    for turn in audited["turns"]:
        engine = by_turn[(turn["session"], turn["turn"])].engine
        # the audit re-renders the messages: the engine ran exactly those tokens and boundaries
        assert turn["checkpoints"]["prompt_end"]["logical"] == engine.p_end
        assert turn["checkpoints"]["input_end"]["logical"] == engine.u_end
        assert turn["output_source"] == "token_ids"


def test_recording_is_off_unless_asked():
    run = Replay(EngineShape(block_size=16))
    assert run.scheduler.boundary_recorder is None
    assert recorder_from(None, max_records=1, max_bytes=1, environ={}) is None


def test_the_environment_variable_turns_recording_on(tmp_path):
    path = tmp_path / "env.jsonl"
    recorder = recorder_from(
        None, max_records=10, max_bytes=1 << 20, environ={"BOUNDARY_RECORD_PATH": str(path)}
    )
    assert recorder is not None and recorder.path == path
    recorder.close()


def finished(session: str, conversation: str | None = '{"messages": [{"role": "user", "content": "hi"}]}'):
    return FinishedRequest(session, conversation, [1, 2, 3], [4, 5], 3, 2, 5, 0, "miss", "both")


def test_the_recorder_is_bounded_in_records_and_bytes(tmp_path):
    recorder = TraceRecorder(tmp_path / "a.jsonl", RecordLimits(max_records=2))
    assert [recorder.submit(finished(f"s{i}")) for i in range(5)].count(True) >= 2
    recorder.close()
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 2
    assert recorder.stats.written == 2 and recorder.stats.dropped_over_limit == 3

    small = TraceRecorder(tmp_path / "b.jsonl", RecordLimits(max_bytes=300))
    for i in range(5):
        small.submit(finished(f"s{i}"))
    small.close()
    assert 0 < (tmp_path / "b.jsonl").stat().st_size <= 300
    assert small.stats.written + small.stats.dropped_over_limit == 5


def test_serializing_happens_on_the_writer_thread_and_bad_input_never_raises(tmp_path):
    recorder = TraceRecorder(tmp_path / "c.jsonl")
    assert recorder.submit(finished("bad", conversation="{not json"))  # queued, not parsed here
    assert recorder.submit(finished("none", conversation=None))  # a request the frontend did not describe
    assert recorder.submit(finished("good"))
    recorder.flush()
    assert recorder.stats.invalid == 1 and recorder.stats.without_conversation == 1
    assert recorder.stats.written == 1
    recorder.close()
    assert not recorder.submit(finished("late"))
