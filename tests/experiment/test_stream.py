"""Request streams: boundaries, disk round trip, arrival order, prefix ids."""

from __future__ import annotations

import itertools
from array import array

import pytest

from boundary.experiment.stream import Continuation, Stream, StreamRequest, cache_requests
from tests.experiment.conftest import synthetic_stream


def test_a_stream_survives_a_round_trip_through_disk(tmp_path, stream):
    path = tmp_path / "s.jsonl"
    stream.save(path)
    loaded = Stream.load(path)
    assert loaded.name == stream.name and loaded.provenance == stream.provenance
    assert loaded.requests == stream.requests


def test_boundaries_out_of_order_are_refused_naming_the_request():
    with pytest.raises(ValueError, match=r"request 3 \(s turn 1\): boundaries out of order"):
        StreamRequest(
            rid=3,
            session="s",
            turn=1,
            tokens=array("I", range(10)),
            num_prompt_tokens=6,
            u_end=7,
            d_end=9,
            continuation=Continuation.TOOL,
        )


def test_requests_arrive_in_order_and_each_session_is_sequential(stream):
    assert [r.rid for r in stream] == list(range(len(stream)))
    assert all(a.arrival <= b.arrival for a, b in zip(stream.requests, stream.requests[1:], strict=False))
    for requests in stream.sessions().values():
        assert [r.turn for r in requests] == list(range(len(requests)))
        assert all(prev.finish <= nxt.arrival for prev, nxt in itertools.pairwise(requests))


def test_the_schedule_is_reproducible_from_the_seed():
    a, b, c = synthetic_stream(seed=3), synthetic_stream(seed=3), synthetic_stream(seed=4)
    assert [(r.session, r.arrival) for r in a] == [(r.session, r.arrival) for r in b]
    assert [(r.session, r.arrival) for r in a] != [(r.session, r.arrival) for r in c]


def test_equal_prefixes_get_equal_prefix_ids_across_sessions_and_units(stream):
    for unit in (1, 16, 1056):
        prepared = cache_requests(stream, unit)
        first, other = (
            stream.requests[0],
            next(r for r in stream.requests if r.session != stream.requests[0].session),
        )
        shared = 0
        while first.tokens[shared] == other.tokens[shared]:
            shared += 1
        a, b = prepared[first.rid].prefix, prepared[other.rid].prefix
        assert a[: shared // unit] == b[: shared // unit]
        assert len(a) == len(first.tokens) // unit
        if shared // unit < min(len(a), len(b)):
            assert a[shared // unit] != b[shared // unit]
