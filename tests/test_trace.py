"""Trace I/O: JSONL requests with sessions and outputs; the tau-bench converter."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from boundary.errors import RequestError
from boundary.trace import (
    MessageOutput,
    TextOutput,
    TokenOutput,
    TraceRequest,
    TraceWriter,
    production_record,
    read_trace,
    sessions,
    tau_bench_trace,
    write_trace,
)


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
