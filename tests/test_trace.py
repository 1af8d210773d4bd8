"""Trace I/O: JSONL requests with sessions and outputs; the tau-bench converter."""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import sys
import tracemalloc
from types import SimpleNamespace

import pytest

import boundary.trace.reader
from boundary.errors import InputWarning, RequestError
from boundary.trace.reader import read_trace
from boundary.trace.records import (
    MessageOutput,
    TextOutput,
    TokenOutput,
    TraceRequest,
    production_record,
    sessions,
)
from boundary.trace.tau_bench import tau_bench_trace
from boundary.trace.writer import TraceWriter, write_trace


def _write(tmp_path, lines):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_trace_reads_every_output_form_and_groups_requests_by_session(tmp_path):
    path = _write(
        tmp_path,
        [
            json.dumps(
                {"session": "a", "messages": [{"role": "user", "content": "hi"}], "output": {"text": "x"}}
            ),
            "",
            json.dumps(
                {
                    "session": "b",
                    "messages": [{"role": "user", "content": "hi"}],
                    "output": {"token_ids": [1]},
                }
            ),
            json.dumps(
                {
                    "session": "a",
                    "messages": [{"role": "user", "content": "hi"}],
                    "output": {"message": {"role": "assistant", "content": "y"}},
                }
            ),
            json.dumps({"session": "a", "messages": [{"role": "user", "content": "hi"}]}),
        ],
    )
    requests = read_trace(path)
    assert [type(r.output) for r in requests] == [TextOutput, TokenOutput, MessageOutput, type(None)]
    assert {k: len(v) for k, v in sessions(requests).items()} == {"a": 3, "b": 1}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "t.jsonl:1: not JSON"),
        ("[1]", "t.jsonl:1: expected a JSON object, got list"),
        ('{"messages": [{"role": "user", "content": "x"}]}', "t.jsonl:1: session: Field required"),
        ('{"session": "s", "messages": []}', "t.jsonl:1: messages: List should have at least 1 item"),
        (
            '{"session": "s", "messages": [{"role": "user", "content": "x"}], "extra": 1}',
            "t.jsonl:1: extra: unexpected",
        ),
        (
            '{"session": "s", "messages": [{"role": "user", "content": "x"}], '
            '"output": {"text": "a", "token_ids": []}}',
            "t.jsonl:1: output: expected exactly one of text, token_ids, message",
        ),
        (
            '{"session": "s", "messages": [{"role": "user", "content": "x"}], "output": {"token_ids": ["a"]}}'
            "",
            "t.jsonl:1: output.token_ids.0",
        ),
    ],
)
def test_bad_lines_are_request_errors_naming_the_file_and_line(tmp_path, line, message):
    with pytest.raises(RequestError) as info:
        read_trace(_write(tmp_path, [line]))
    assert str(info.value).startswith(str(tmp_path / message.split(":")[0]))
    without_session = re.sub(r" \(session '[^']*'\)", "", str(info.value))
    assert message.split(":", 1)[1].strip() in without_session


def test_a_missing_or_empty_trace_is_a_request_error(tmp_path):
    with pytest.raises(RequestError, match="cannot read the trace"):
        read_trace(tmp_path / "missing.jsonl")
    with pytest.raises(RequestError, match="no requests"):
        read_trace(_write(tmp_path, [""]))


def test_a_written_trace_reads_back_equal(tmp_path):
    requests = tau_bench_trace(reasoning="seeded", trajectories=2)
    write_trace(tmp_path / "x.jsonl", requests)
    assert read_trace(tmp_path / "x.jsonl") == requests


def test_tau_bench_becomes_one_request_per_assistant_turn_with_seeded_reasoning():
    plain = tau_bench_trace()
    assert len(plain) == 2454 and len(sessions(plain)) == 200
    assert all(isinstance(r.output, MessageOutput) for r in plain)
    assert not any("reasoning_content" in r.output.message for r in plain)
    seeded = tau_bench_trace(reasoning="seeded", trajectories=3)
    again = tau_bench_trace(reasoning="seeded", trajectories=3)
    other = tau_bench_trace(reasoning="seeded", trajectories=3, seed=1)
    assert [r.output.message["reasoning_content"] for r in seeded] == [
        r.output.message["reasoning_content"] for r in again
    ]
    assert seeded != other
    # a request's history is the previous request's history plus what followed it
    first = [r for r in seeded if r.session == seeded[0].session]
    assert all(b.messages[: len(a.messages)] == a.messages for a, b in itertools.pairwise(first))
    assert not any(m.get("reasoning_content") for r in seeded for m in r.messages)


def test_echoed_reasoning_appears_in_later_requests():
    echoed = tau_bench_trace(reasoning="seeded", echo_reasoning=True, trajectories=1)
    produced = echoed[0].output.message
    later = echoed[1].messages[len(echoed[0].messages)]
    assert later["reasoning_content"] == produced["reasoning_content"]


def test_trace_requests_are_frozen_models():
    r = TraceRequest(session="s", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on assignment
        r.session = "t"


def test_a_production_record_reads_with_its_engine_boundaries(tmp_path):
    line = {
        "session": "p",
        "prompt_token_ids": [5, 6, 7, 8],
        "output": {"token_ids": [9, 2]},
        "u_end": 2,
        "p_end": 4,
        "served_by": "input_end",
        "hit_tokens": 2,
    }
    (request,) = read_trace(_write(tmp_path, [json.dumps(line)]))
    assert request.is_production and request.messages is None
    assert (request.u_end, request.p_end, request.served_by, request.hit_tokens) == (2, 4, "input_end", 2)
    assert request.output == TokenOutput(token_ids=[9, 2])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"session": "p"}, "expected exactly one of messages, prompt_token_ids"),
        (
            {"session": "p", "messages": [{"role": "user", "content": "x"}], "prompt_token_ids": [1]},
            "expected exactly one of messages, prompt_token_ids",
        ),
        ({"session": "p", "prompt_token_ids": [1, 2], "p_end": 3}, "p_end 3 != prompt length 2"),
        ({"session": "p", "prompt_token_ids": [1, 2], "u_end": 3}, "u_end 3 beyond the prompt (2 tokens)"),
        ({"session": "p", "prompt_token_ids": [1], "output": {"text": "a"}}, "a production record's output"),
        ({"session": "p", "prompt_token_ids": [1], "served_by": "nope"}, "served_by: Input should be"),
        (
            {"session": "p", "prompt_token_ids": [1, 2], "output": {"token_ids": [3]}, "d_end": 4},
            "d_end 4 outside the output ([2, 3])",
        ),
        ({"session": "p", "prompt_token_ids": [1, 2], "d_end": 1}, "d_end 1 outside the output ([2, 2])"),
        (
            {"session": "p", "messages": [{"role": "user", "content": "x"}], "policy": "both"},
            "policy belongs to a production record",
        ),
        (
            {"session": "p", "messages": [{"role": "user", "content": "x"}], "u_end": 1},
            "u_end belongs to a production record",
        ),
    ],
)
def test_bad_production_records_name_the_line_and_the_session(tmp_path, line, message):
    with pytest.raises(RequestError) as info:
        read_trace(_write(tmp_path, [json.dumps(line)]))
    text = str(info.value)
    assert text.startswith(f"{tmp_path / 't.jsonl'}:1 (session 'p'): ")
    assert message in text


def test_the_trace_writer_appends_bounded_production_records_the_reader_accepts(tmp_path):
    path = tmp_path / "prod.jsonl"
    with TraceWriter(path, max_records=2, flush_every=1) as writer:
        assert writer.write(production_record("s", [1, 2, 3], [4, 2], u_end=1, served_by=None))
        assert writer.write(
            production_record("s", [1, 2, 3, 4, 5], None, served_by="decode_end", hit_tokens=4)
        )
        assert not writer.write(production_record("s", [1], [2]))
    assert (writer.written, writer.dropped) == (2, 1)
    first, second = read_trace(path)
    assert first.prompt_token_ids == [1, 2, 3] and first.p_end == 3 and first.u_end == 1
    assert second.output is None and second.served_by == "decode_end" and second.hit_tokens == 4


def test_the_trace_writer_bounds_bytes_and_keeps_the_engine_fields(tmp_path):
    path = tmp_path / "bytes.jsonl"
    record = production_record(
        "s", [1, 2, 3], [4, 2], u_end=1, d_end=4, served_by="unattributed", hit_tokens=2, policy="both"
    )
    size = len(record.model_dump_json(exclude_none=True)) + 1
    with TraceWriter(path, max_bytes=2 * size + 1) as writer:
        assert [writer.write(record) for _ in range(3)] == [True, True, False]
    assert (writer.written, writer.bytes, writer.dropped) == (2, 2 * size, 1)
    first, _ = read_trace(path)
    assert (first.d_end, first.served_by, first.policy) == (4, "unattributed", "both")


def _chat(session: str = "a") -> str:
    return json.dumps({"session": session, "messages": [{"role": "user", "content": "hi"}]})


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b'{"session": "a", "messages": [{"role": "us', id="mid_json"),
        pytest.param(
            '{"session": "a", "messages": [{"role": "user", "content": "caf\u00e9'.encode()[:-1],
            id="mid_utf8",
        ),
    ],
)
def test_a_cut_off_last_line_is_skipped_with_a_warning_naming_it(tmp_path, tail):
    path = tmp_path / "t.jsonl"
    path.write_bytes(f"{_chat()}\n{_chat('b')}\n".encode() + tail)
    with pytest.warns(InputWarning) as caught:
        requests = read_trace(path)
    assert [r.session for r in requests] == ["a", "b"]
    assert [str(w.message) for w in caught] == [
        f"{path}:3: the last line is cut off (a recording still being written?); skipped"
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b'{"session": "a", "mess\n', "t.jsonl:1: not JSON", id="last_line_ends_with_a_newline"),
        pytest.param(
            b'{"session": "a", "mess\n' + _chat().encode(), "t.jsonl:1: not JSON", id="not_the_last"
        ),
        pytest.param(
            b'{"session": "a", "messages": []}', "t.jsonl:1 (session 'a'): messages:", id="json_but_bad"
        ),
        pytest.param(b'{"session": "a", "mess\n\n', "t.jsonl:1: not JSON", id="blank_lines_after_it"),
    ],
)
def test_a_bad_line_that_is_not_a_cut_off_last_line_is_an_error(tmp_path, content, message):
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    with pytest.raises(RequestError) as info:
        read_trace(path)
    assert str(info.value).startswith(str(tmp_path / message))


def test_a_line_or_a_trace_past_its_bound_is_refused_naming_its_line(tmp_path, monkeypatch):
    line = _chat()
    path = _write(tmp_path, [line, line, line])
    monkeypatch.setattr(boundary.trace.reader, "MAX_LINE_BYTES", len(line))
    assert len(read_trace(path)) == 3  # a line exactly at the bound; its newline is not counted
    monkeypatch.setattr(boundary.trace.reader, "MAX_LINE_BYTES", len(line) - 1)
    with pytest.raises(RequestError, match=rf"t\.jsonl:1: the line is longer than {len(line) - 1} bytes"):
        read_trace(path)
    monkeypatch.setattr(boundary.trace.reader, "MAX_LINE_BYTES", 64 << 20)
    monkeypatch.setattr(boundary.trace.reader, "MAX_TRACE_BYTES", 3 * (len(line) + 1))
    assert len(read_trace(path)) == 3
    monkeypatch.setattr(boundary.trace.reader, "MAX_TRACE_BYTES", 2 * (len(line) + 1) + 1)
    with pytest.raises(
        RequestError, match=r"t\.jsonl:3: the trace goes on past [\d,]+ bytes, the bound on a trace"
    ):
        read_trace(path)


def test_the_trace_bound_is_the_recorders_cap_so_what_it_records_reads_back():
    recording = pytest.importorskip("boundary_vllm.recording")
    settings = pytest.importorskip("boundary_vllm.settings")
    assert boundary.trace.reader.MAX_LINE_BYTES == 64 << 20
    assert boundary.trace.reader.MAX_TRACE_BYTES == 1 << 30
    assert recording.RecordLimits().max_bytes == boundary.trace.reader.MAX_TRACE_BYTES
    assert settings.IntegrationSettings().record_max_bytes == boundary.trace.reader.MAX_TRACE_BYTES


def test_what_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path, what in [
        ("/dev/zero", "a character device"),
        (tmp_path, "a directory"),
        (tmp_path / "fifo", "a FIFO"),
    ]:
        with pytest.raises(RequestError, match=rf"^{re.escape(str(path))}: not a regular file \({what}\)"):
            read_trace(path)


def test_a_trace_on_stdin_is_read_and_named_stdin(monkeypatch):
    data = f"{_chat()}\n{{bad\n".encode()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    with pytest.raises(RequestError, match=r"^<stdin>:2: not JSON"):
        read_trace("-")
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data[: data.index(b"{bad")])))
    assert read_trace("-")[0].where == "<stdin>:1 (session 'a')"


def test_reading_holds_one_line_of_text_at_a_time_not_the_whole_file(tmp_path):
    """Sixteen lines of 512 KiB (JSON whitespace, parsed to almost nothing): a reader that holds
    the whole file peaks past 8 MiB; one that reads line by line, near one line."""
    pad = " " * (512 << 10)
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            f'{{"session": "s{k}",{pad}"messages": [{{"role": "user", "content": "x"}}]}}\n'
            for k in range(16)
        ),
        encoding="utf-8",
    )
    tracemalloc.start()
    try:
        requests = read_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(requests) == 16
    assert peak < 4 << 20, f"peak {peak / 2**20:.1f} MiB"
