"""A recording's header (the engine's geometry, what the records hold) and the sessions of
production records no client named, grouped by prefix-chaining of their prompt ids."""

from __future__ import annotations

import json

import pytest

from boundary.errors import RequestError
from boundary.trace.header import RecordedGeometry, RecordingHeader
from boundary.trace.reader import read_header, read_recording, read_trace
from boundary.trace.records import production_record
from boundary.trace.writer import TraceWriter

GEOMETRY = RecordedGeometry(
    block_size=256,
    prefix_match_unit=16,
    page_bytes=65536,
    group_size=2,
    attention_groups=1,
    recurrent_groups=3,
    state_bytes=52224,
    num_pages=101,
)
HEADER = RecordingHeader(engine="vllm==0.34.0", policy="both", sessions="boundary_session", geometry=GEOMETRY)


def unnamed(request_id: str, prompt: list[int], u_end: int, output: list[int] | None = None):
    """A record whose session is the request's own id (no client named one)."""
    return production_record(request_id, prompt, output, u_end=u_end, session_from="request_id")


def test_the_header_is_the_first_line_and_the_reader_returns_it_beside_the_records(tmp_path):
    path = tmp_path / "rec.jsonl"
    with TraceWriter(path, header=HEADER) as writer:
        writer.write(production_record("s", [1, 2, 3], [4]))
    first = json.loads(path.read_text().splitlines()[0])
    assert list(first) == ["recording"] and first["recording"]["geometry"]["block_size"] == 256
    header, records = read_recording(path)
    assert header == HEADER and read_header(path) == HEADER
    assert (
        [r.prompt_token_ids for r in records] == [[1, 2, 3]] == [r.prompt_token_ids for r in read_trace(path)]
    )
    assert GEOMETRY.capacity_bytes == 100 * 65536 * 2  # the null page never holds a block
    padded = tmp_path / "padded.jsonl"
    padded.write_text("\n" + path.read_text())  # a blank line first: skipped by both readers
    assert read_header(padded) == HEADER == read_recording(padded)[0]


def test_a_file_is_appended_to_under_its_own_header_only(tmp_path):
    path = tmp_path / "rec.jsonl"
    with TraceWriter(path, header=HEADER) as writer:
        writer.write(production_record("s", [1, 2, 3], [4]))
    with TraceWriter(path, header=HEADER) as writer:  # the same engine again: one header
        writer.write(production_record("s", [1, 2, 3, 4, 5], [6]))
    assert len(path.read_text().splitlines()) == 3 and len(read_trace(path)) == 2
    other = HEADER.model_copy(update={"geometry": GEOMETRY.model_copy(update={"block_size": 512})})
    with pytest.raises(ValueError, match=r"holds a recording with the header of another engine .*new file"):
        TraceWriter(path, header=other)
    plain = tmp_path / "plain.jsonl"
    with TraceWriter(plain) as writer:
        writer.write(production_record("s", [1], [2]))
    with pytest.raises(ValueError, match="holds a recording with no header; record to a new file"):
        TraceWriter(plain, header=HEADER)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            [
                {
                    "recording": {
                        **HEADER.model_dump(),
                        "geometry": {**GEOMETRY.model_dump(), "prefix_match_unit": 48},
                    }
                }
            ],
            r"rec.jsonl:1: recording.geometry: prefix_match_unit 48 does not divide block_size 256",
        ),
        (
            [{"recording": HEADER.model_dump(), "session": "s"}],
            r"rec.jsonl:1: session: unexpected field",
        ),
        (
            [{"session": "s", "prompt_token_ids": [1]}, {"recording": HEADER.model_dump()}],
            r"rec.jsonl:2: a recording header belongs on the trace's first line only",
        ),
    ],
)
def test_a_bad_or_misplaced_header_is_refused_naming_its_line(tmp_path, lines, message):
    path = tmp_path / "rec.jsonl"
    path.write_text(
        "".join(json.dumps(line) + "\n" for line in lines) + '{"session": "s", "prompt_token_ids": [1]}\n'
    )
    with pytest.raises(RequestError, match=message):
        read_trace(path)


def write(path, records) -> None:
    with TraceWriter(path) as writer:
        for r in records:
            writer.write(r)


def test_unnamed_records_are_chained_into_the_conversation_they_open_with(tmp_path):
    system = [1, 2, 3]
    a1 = [*system, 10, 11, 90]  # U_end 5: the generation prompt (90) is not history
    b1 = [*system, 20, 21, 90]
    a2 = [*system, 10, 11, 12, 13, 14, 90]  # a's history, its reply and a new message
    b2 = [*system, 20, 21, 22, 23, 90]
    a3 = [*system, 10, 11, 13, 14, 15, 16, 90]  # a template dropped a's reply (12): still a
    records = [
        unnamed("r1", a1, 5, [12, 99]),
        unnamed("r2", b1, 5, [22, 99]),
        unnamed("r3", a2, 7),
        unnamed("r4", b2, 7),
        production_record("named", [*system, 10, 11, 12], None, u_end=5),  # a client's session: kept
        unnamed("r6", a3, 9),
        unnamed("r7", [*system, 30, 90], 4),  # opens differently: a conversation of its own
    ]
    path = tmp_path / "rec.jsonl"
    write(path, records)
    assert [r.session for r in read_trace(path)] == ["r1", "r2", "r1", "r2", "named", "r1", "r7"]


def test_the_deepest_opening_wins_and_an_empty_one_opens_nothing(tmp_path):
    records = [
        unnamed("deep", [1, 2, 3, 4, 9], 4),  # opens with [1, 2, 3, 4]
        unnamed("short", [1, 2, 9], 2),  # opens with [1, 2]: not deep's opening, a session of its own
        unnamed("empty", [7, 9], 0),
        unnamed("next", [1, 2, 3, 4, 5, 9], 5),  # both openings are its prefix: the deeper one
        unnamed("short-2", [1, 2, 8, 9], 3),
        unnamed("after-empty", [7, 8, 9], 2),
    ]
    path = tmp_path / "rec.jsonl"
    write(path, records)
    assert [r.session for r in read_trace(path)] == ["deep", "short", "empty", "deep", "short", "after-empty"]
    twins = [
        unnamed("x", [1, 2, 9], 2),
        unnamed("y", [1, 2, 9], 2),  # the same opening: continues "x" (a regenerate)
        unnamed("z", [5, 1, 2, 9], 3),
        unnamed("z2", [5, 1, 2, 3, 9], 4),
    ]
    path = tmp_path / "twins.jsonl"
    write(path, twins)
    assert [r.session for r in read_trace(path)] == ["x", "x", "z", "z"]
