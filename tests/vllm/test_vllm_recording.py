"""Production traces: the plugin records each finished request as a production record of the
audit's JSONL (opt-in, bounded, written off the scheduler thread), and ``boundary audit`` and
``boundary experiment`` replay the file as it is. The stream is recorded from vLLM 0.33.0's real
scheduler, two sessions in flight."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.recording import FinishedRequest, RecordLimits, TraceRecorder, recorder_from
from boundary_vllm.replay import EngineShape, Replay, ReplayRequest

from boundary.audit.production import stop_ids
from boundary.audit.runner import AuditSettings, audit_requests
from boundary.checkpoints.retention import Variant, capped_d_end
from boundary.cli.main import main as boundary_main
from boundary.prefixes import common_prefix_length
from boundary.trace.reader import read_trace
from boundary.trace.records import TraceRequest, sessions
from tests.support import family
from tests.vllm.streams import turns

pytestmark = pytest.mark.vllm

CONVERSATIONS = (11, 5)
STARTED = time.time()


def recorded_session(conversation: int) -> list[ReplayRequest]:
    """The session's requests as ``chat_request(..., session=...)`` sends them."""
    return [
        dataclasses.replace(ReplayRequest.from_turn(t), session=f"tau-{conversation}")
        for t in turns(conversation)
    ]


def committed(record: TraceRequest) -> list[int]:
    """Prompt and committed output of a record: the ids up to its D_end."""
    assert record.prompt_token_ids is not None and record.output is not None and record.d_end is not None
    return (record.prompt_token_ids + record.output.token_ids)[: record.d_end]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A stream recorded through the async scheduler: the file, the requests and outcomes."""
    path = tmp_path_factory.mktemp("recorded") / "recorded.jsonl"
    shape = EngineShape(
        block_size=16,
        prefix_match_unit=4,
        policy=Variant.BOTH,
        async_scheduling=True,
        settings={"record_path": str(path)},
    )
    run = Replay(shape)
    requests = [recorded_session(c) for c in CONVERSATIONS]
    outcomes = run.run_sessions(requests, concurrency=2)
    run.scheduler.shutdown()  # closes the recorder: everything queued is written
    stats = run.scheduler.boundary_recorder.stats
    return path, requests, outcomes, stats


def test_a_recorded_stream_holds_what_the_engine_saw(recorded):
    path, requests, outcomes, stats = recorded
    records = read_trace(path)  # boundary's own trace reader
    assert len(records) == sum(len(s) for s in requests) == stats.written
    assert stats.dropped_over_limit == stats.dropped_queue_full == stats.invalid == 0
    stops = stop_ids(family("qwen3_5"))
    by_session = sessions(records)
    for conversation, session, outs in zip(CONVERSATIONS, requests, outcomes, strict=True):
        # a session's next request is sent when its previous one finished: written in order
        lines = by_session[f"tau-{conversation}"]
        assert [r.prompt_token_ids for r in lines] == [list(q.prompt_token_ids) for q in session]
        for record, request, outcome in zip(lines, session, outs, strict=True):
            output = list(request.output_token_ids)
            assert record.output is not None and record.output.token_ids == output
            assert record.u_end == request.input_end
            assert record.p_end == len(request.prompt_token_ids)
            committed_end = len(request.prompt_token_ids) + len(output) - (output[-1] in stops)
            num_tokens = len(request.prompt_token_ids) + len(output)
            assert record.d_end == capped_d_end(committed_end, num_tokens, record.p_end)
            assert record.hit_tokens == outcome.hit_tokens
            assert record.served_by == (None if outcome.hit_kind == "miss" else outcome.hit_kind)
            assert record.policy == "both"
    assert {r.served_by for r in records} >= {None, "input_end", "decode_end"}


def test_every_record_carries_the_engines_arrival_time(recorded):
    """vLLM's ``Request.arrival_time`` (Unix seconds, set when the request was made): after the
    module started and before now, and never decreasing within a session (``read_trace``
    checks that)."""
    path, requests, _, _ = recorded
    records = read_trace(path)
    assert len(records) == sum(len(r) for r in requests)
    assert all(r.arrival_s is not None and STARTED <= r.arrival_s <= time.time() for r in records)


def test_boundary_audit_replays_the_recorded_file_as_it_is(recorded, tmp_path):
    path, *_ = recorded
    records = read_trace(path)
    report = tmp_path / "audit.json"
    markdown = tmp_path / "audit.md"
    args = ["audit", str(path), "--family", "qwen3_5", "--unit", "4", "--no-what-if"]
    rc = boundary_main([*args, "--json", str(report), "--markdown", str(markdown)])
    assert rc == 0
    audited = json.loads(report.read_text())
    run = audit_requests(family("qwen3_5"), records, AuditSettings(unit=4))
    assert run.production and len(audited["turns"]) == len(run.records) == len(records)
    assert audited["summary"] == run.summary.model_dump(mode="json")

    by_turn = {(name, k): r for name, lines in sessions(records).items() for k, r in enumerate(lines)}
    round_trips = 0
    for turn in run.records:
        record = by_turn[(turn.session, turn.turn)]
        # the recorded boundaries, not re-derived ones
        assert turn.checkpoints["prompt_end"].logical == record.p_end
        assert turn.checkpoints["input_end"].logical == record.u_end
        assert turn.checkpoints["decode_end"].logical == record.d_end
        assert turn.output_source == "token_ids"
        following = by_turn.get((turn.session, turn.turn + 1))
        if following is not None:
            ids = committed(record)
            trips = common_prefix_length(ids, following.prompt_token_ids) >= len(ids)
            assert turn.round_trips is trips
            round_trips += trips
        if record.served_by == "decode_end":  # the engine served the previous turn's D_end state
            assert turn.reuses is not None and turn.reuses.kind == "decode_end"
            assert record.hit_tokens <= turn.reuses.position
    assert round_trips > 0
    assert run.summary.kinds["decode_end"].reached == round_trips


def test_boundary_experiment_replays_the_recorded_file_as_it_is(recorded, tmp_path):
    path, *_ = recorded
    records = read_trace(path)
    out = tmp_path / "experiment.json"
    rc = boundary_main(
        ["experiment", "--workload", str(path), "--unit", "4", "--capacity-gib", "4", "--json", str(out)]
    )
    assert rc == 0
    stream = json.loads(out.read_text())["stream"]
    assert stream["requests"] == len(records)
    assert stream["sessions"] == len(CONVERSATIONS)
    assert stream["prompt_tokens"] == sum(r.p_end or 0 for r in records)
    assert stream["output_tokens"] == sum(len(r.output.token_ids) for r in records if r.output)


def test_a_length_capped_request_records_the_d_end_its_retention_decided_with(tmp_path):
    # no stop token: the committed end is every token, but the last sampled one was never fed
    # to the model, so the recorded D_end is the one the retention decision capped (num_tokens - 1)
    path = tmp_path / "capped.jsonl"
    t = turns(11)[1]
    capped = dataclasses.replace(
        ReplayRequest.from_turn(t), output_token_ids=tuple(t.output.token_ids[:-1]), stop_token_ids=()
    )
    run = Replay(EngineShape(block_size=16, policy=Variant.BOTH, settings={"record_path": str(path)}))
    run.run(capped)
    run.scheduler.shutdown()
    (record,) = read_trace(path)
    num_tokens = len(capped.prompt_token_ids) + len(capped.output_token_ids)
    assert record.d_end == num_tokens - 1 == capped_d_end(num_tokens, num_tokens, record.p_end)


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


def finished(session: str, u_end: int = 2) -> FinishedRequest:
    return FinishedRequest(session, [1, 2, 3], [4, 5], u_end, 5, 0, "miss", "both")


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
    assert recorder.submit(finished("bad", u_end=9))  # queued, not validated here: U_end past the prompt
    assert recorder.submit(finished("good"))
    recorder.flush()
    assert recorder.stats.invalid == 1 and "u_end 9 beyond the prompt" in recorder.stats.last_error
    assert recorder.stats.written == 1
    (record,) = read_trace(tmp_path / "c.jsonl")
    assert (record.session, record.served_by, record.hit_tokens, record.d_end) == ("good", None, 0, 5)
    recorder.close()
    assert not recorder.submit(finished("late"))


def test_submitting_never_wakes_the_writer_thread_and_flush_does(tmp_path):
    recorder = TraceRecorder(tmp_path / "e.jsonl", RecordLimits(poll_s=3600))
    for i in range(3):
        assert recorder.submit(finished(f"s{i}"))
    assert recorder.stats.written == 0  # queued only: the writer sleeps until its poll or a flush
    recorder.flush()
    assert recorder.stats.written == 3
    assert [r.session for r in read_trace(tmp_path / "e.jsonl")] == ["s0", "s1", "s2"]
    recorder.submit(finished("s3"))
    recorder.close()  # close writes the backlog
    assert recorder.stats.written == 4


def test_a_full_queue_drops_and_counts_without_blocking(tmp_path, monkeypatch):
    import boundary_vllm.recording as recording

    entered, release = threading.Event(), threading.Event()
    build = recording.trace_record

    def slow(finished):  # the writer thread is busy with the first record
        entered.set()
        release.wait(5)
        return build(finished)

    monkeypatch.setattr(recording, "trace_record", slow)
    recorder = TraceRecorder(tmp_path / "d.jsonl", RecordLimits(queue_size=1))
    assert recorder.submit(finished("a"))
    assert entered.wait(5)
    assert recorder.submit(finished("b"))  # waits in the queue
    assert not recorder.submit(finished("c"))  # the queue is full: dropped at once
    release.set()
    recorder.close()
    assert (recorder.stats.written, recorder.stats.dropped_queue_full) == (2, 1)
    assert [r.session for r in read_trace(tmp_path / "d.jsonl")] == ["a", "b"]
