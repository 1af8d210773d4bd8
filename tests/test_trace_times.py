"""Arrival times in a trace (``arrival_s``): read, written by the recorder's record builder, and
refused with the file, line, session and field when bad."""

from __future__ import annotations

import json

import pytest

from boundary.errors import RequestError
from boundary.trace.reader import read_trace
from boundary.trace.records import production_record
from boundary.trace.writer import write_trace

CHAT = {"session": "s1", "messages": [{"role": "user", "content": "hi"}]}
RECORD = {"session": "s1", "prompt_token_ids": [1, 2, 3]}


def _write(tmp_path, lines: list[str]) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_arrival_times_are_read_on_chat_requests_and_production_records(tmp_path):
    path = _write(
        tmp_path,
        [json.dumps({**CHAT, "arrival_s": 10}), json.dumps({**RECORD, "arrival_s": 10.5})],
    )
    assert [r.arrival_s for r in read_trace(path)] == [10.0, 10.5]
    assert all(r.arrival_s is None for r in read_trace(_write(tmp_path, [json.dumps(CHAT)] * 2)))


def test_a_production_record_keeps_its_arrival_time_through_the_file(tmp_path):
    record = production_record("s1", [1, 2, 3], [4, 5], u_end=2, arrival_s=1764650000.25)
    path = tmp_path / "out.jsonl"
    write_trace(path, [record])
    assert json.loads(path.read_text())["arrival_s"] == 1764650000.25
    assert read_trace(path) == [record]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("NaN", "finite number"),
        ("Infinity", "finite number"),
        ("-1", "greater than or equal to 0"),
        ('"12.5"', "valid number"),
        ("true", "valid number"),
    ],
)
def test_a_bad_arrival_time_is_named_by_file_line_session_and_field(tmp_path, value, message):
    good = json.dumps({**CHAT, "arrival_s": 1.0})
    bad = json.dumps(CHAT)[:-1] + f', "arrival_s": {value}}}'
    with pytest.raises(RequestError, match=message) as err:
        read_trace(_write(tmp_path, [good, bad]))
    assert err.value.location == f"{tmp_path / 'trace.jsonl'}:2 (session 's1'): arrival_s"


def test_an_arrival_before_the_sessions_previous_request_is_refused(tmp_path):
    lines = [
        json.dumps({**CHAT, "arrival_s": 9.5}),
        json.dumps({**CHAT, "session": "s2", "arrival_s": 1.0}),  # another session: fine
        json.dumps({**CHAT, "arrival_s": 4.0}),
    ]
    with pytest.raises(RequestError) as err:
        read_trace(_write(tmp_path, lines))
    path = tmp_path / "trace.jsonl"
    assert err.value.location == f"{path}:3 (session 's1'): arrival_s"
    assert err.value.detail == f"4.0 is before 9.5 at {path}:1 (session 's1')"
    equal = [json.dumps({**CHAT, "arrival_s": 4.0})] * 2  # equal times are fine
    assert len(read_trace(_write(tmp_path, equal))) == 2


@pytest.mark.parametrize("first_timed", [True, False])
def test_arrival_times_on_some_lines_only_are_refused(tmp_path, first_timed):
    timed, plain = json.dumps({**CHAT, "arrival_s": 1.0}), json.dumps(CHAT)
    lines = [timed, plain] if first_timed else [plain, timed]
    with pytest.raises(RequestError, match="given on some lines only") as err:
        read_trace(_write(tmp_path, lines))
    assert err.value.location == f"{tmp_path / 'trace.jsonl'}:2 (session 's1'): arrival_s"
