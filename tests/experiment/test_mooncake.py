"""The Mooncake trace converter on a small made-up trace (blocks of 4 tokens), worked by hand,
and the converted trace replayed with its real times and ``--sessions``."""

from __future__ import annotations

import json

import pytest

from boundary.experiment.workloads import WorkloadOptions, build_stream
from boundary.experiment.workloads.mooncake import MooncakeError, convert, convert_file
from boundary.trace.reader import read_trace
from tests.experiment.test_recorded_arrivals import COST

LINES = [
    {"timestamp": 0, "input_length": 6, "output_length": 2, "hash_ids": [0, 1]},  # a: block 1 partial
    {"timestamp": 500, "input_length": 8, "output_length": 1, "hash_ids": [3, 4]},  # b opens
    {"timestamp": 120000, "input_length": 12, "output_length": 3, "hash_ids": [0, 5, 6]},  # a again
    {"timestamp": 121000, "input_length": 9, "output_length": 0, "hash_ids": [3, 4, 7]},  # b again
]


def test_sessions_chain_by_whole_blocks_and_a_replaced_partial_block_keeps_its_tokens():
    """Line 3 starts with line 1's whole block (0), so it continues a; block 5 replaces line 1's
    partial block 1 and starts with its 2 tokens, so line 1's prompt is a prefix of line 3's,
    and line 1's 2 output tokens are line 3's tokens 6-7 (history carries the reply). Line 4
    continues b (whole blocks 3, 4); line 2's one output token is line 4's token 8. Line 3 has
    no next request: its 3 output tokens are drawn; line 4 produced none."""
    one, two, three, four = convert(LINES, block_tokens=4)
    assert [r.session for r in (one, two, three, four)] == ["mooncake-0", "mooncake-1"] * 2
    assert [r.arrival_s for r in (one, two, three, four)] == [0.0, 0.5, 120.0, 121.0]
    assert [len(r.prompt_token_ids or []) for r in (one, two, three, four)] == [6, 8, 12, 9]
    p1, p3 = one.prompt_token_ids or [], three.prompt_token_ids or []
    assert p3[:6] == p1 and p3[:4] != (two.prompt_token_ids or [])[:4]
    assert one.output is not None and one.output.token_ids == p3[6:8]
    assert two.output is not None and two.output.token_ids == (four.prompt_token_ids or [])[8:9]
    assert three.output is not None and len(three.output.token_ids or []) == 3
    assert four.output is None
    again = list(convert(LINES, block_tokens=4))  # seeded: the same trace converts the same
    assert [r.prompt_token_ids for r in again] == [r.prompt_token_ids for r in (one, two, three, four)]


def test_a_line_out_of_the_format_is_refused_by_line_number():
    bad = [LINES[0], {"timestamp": 1, "input_length": 9, "output_length": 1, "hash_ids": [0, 1]}]
    with pytest.raises(MooncakeError, match="line 2: 2 hash_ids for input_length 9"):
        list(convert(bad, block_tokens=4))
    with pytest.raises(MooncakeError, match="line 1: 'timestamp'"):
        list(convert([{"input_length": 4, "output_length": 1, "hash_ids": [0]}], block_tokens=4))


def test_the_converted_trace_replays_on_its_times_and_takes_the_first_sessions(tmp_path):
    source, target = tmp_path / "mooncake.jsonl", tmp_path / "trace.jsonl"
    source.write_text("".join(json.dumps(x) + "\n" for x in LINES), encoding="utf-8")
    assert convert_file(source, target, block_tokens=4) == 4
    assert len(read_trace(str(target))) == 4
    stream = build_stream(str(target), WorkloadOptions(family="qwen3_5"), COST, use_cache=False)
    assert stream.provenance["arrivals"]["source"] == "recorded"
    assert sorted(r.arrival for r in stream.requests) == pytest.approx([0.0, 0.5, 120.0, 121.0])
    first = build_stream(str(target), WorkloadOptions(family="qwen3_5", sessions=1), COST, use_cache=False)
    assert {r.session for r in first.requests} == {"mooncake-0"} and len(first.requests) == 2
