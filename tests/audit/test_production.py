"""A production trace (token ids as the engine saw them) audited as recorded, and replayed by
``boundary audit`` and ``boundary experiment`` from the same file."""

from __future__ import annotations

import json

import pytest

from boundary.audit.production import stop_ids
from boundary.audit.runner import AuditSettings, audit_requests
from boundary.cli.main import main
from boundary.errors import RequestError
from boundary.trace.reader import read_trace
from boundary.trace.records import TraceRequest, production_record
from boundary.trace.writer import TraceWriter
from tests.support import family


def _recorded(stop: int) -> list[TraceRequest]:
    return [
        production_record("p", [1, 2, 3, 4], [5, 6, stop], u_end=2),
        production_record("p", [1, 2, 3, 4, 5, 6, 7], None, u_end=6, served_by="decode_end", hit_tokens=6),
        production_record("p", [1, 2, 3, 9], [8, stop], u_end=3),
    ]


def test_each_recorded_checkpoint_is_checked_against_the_next_prompt_by_token_prefix():
    fam = family("qwen3_5")
    stop = min(stop_ids(fam))
    run = audit_requests(fam, _recorded(stop), AuditSettings(unit=1))
    first, second, third = run.records
    assert {k: (c.logical, c.reused_by_next) for k, c in first.checkpoints.items()} == {
        "prompt_end": (4, True),
        "input_end": (2, True),
        "decode_end": (6, True),  # 4 prompt + 2 committed ids; the stop token is not part of D_end
    }
    assert (first.d_end, first.next_common_prefix, first.round_trips) == (2, 6, True)
    assert {k: (c.logical, c.reused_by_next) for k, c in second.checkpoints.items()} == {
        "prompt_end": (7, False),
        "input_end": (6, False),
    }
    assert second.next_common_prefix == 3 and second.round_trips is None
    assert (second.reuses.kind, second.reuses.position, second.reuses.producer_age) == ("decode_end", 6, 1)
    # the first prompt's P_end state covers [1, 2, 3] (its last token is recomputed), a prefix of
    # the third prompt: deeper than its U_end state
    assert (third.reuses.kind, third.reuses.position, third.reuses.producer_age) == ("prompt_end", 3, 2)
    assert run.production and run.summary.kinds["decode_end"].reached == 1


def test_a_session_mixing_production_records_and_chat_requests_is_refused():
    mixed = [
        production_record("m", [1, 2], [3]),
        TraceRequest(session="m", messages=[{"role": "user", "content": "x"}]),
    ]
    with pytest.raises(RequestError, match="session 'm'"):
        audit_requests(family("qwen3_5"), mixed)


def test_audit_and_experiment_replay_one_recorded_file_as_it_is(tmp_path, capsys):
    fam = family("qwen3_5")
    stop = min(stop_ids(fam))
    path = tmp_path / "recorded.jsonl"
    with TraceWriter(path) as writer:
        for r in _recorded(stop):
            writer.write(r)
    assert len(read_trace(path)) == 3
    rc = main(["audit", str(path), "--family", "qwen3_5", "--unit", "1", "--json", "-", "--no-what-if"])
    assert rc == 0
    audit = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [t["turn"] for t in audit["turns"]] == [0, 1, 2]
    out = tmp_path / "r.json"
    rc = main(
        ["experiment", "--workload", str(path), "--unit", "1", "--capacity-gib", "4", "--json", str(out)]
    )
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["stream"]["requests"] == 3 and result["units"][0]["unit"] == 1


def test_a_recorded_d_end_is_the_decode_end_checkpoint():
    recorded = [
        production_record("d", [1, 2, 3, 4], [5, 6, 7], d_end=5),  # the engine committed one token
        production_record("d", [1, 2, 3, 4, 5, 9], None),
    ]
    first, _ = audit_requests(family("qwen3_5"), recorded, AuditSettings(unit=1)).records
    assert (first.d_end, first.checkpoints["decode_end"].logical, first.round_trips) == (1, 5, True)


def test_the_audit_counts_unknown_hits_apart_from_misses(tmp_path, capsys):
    fam = family("qwen3_5")
    stop = min(stop_ids(fam))
    recorded = [
        production_record("p", [1, 2, 3, 4], [5, stop], u_end=2, hit_tokens=0),
        production_record(
            "p", [1, 2, 3, 4, 5, 6], [7, stop], u_end=5, served_by="unattributed", hit_tokens=4
        ),
        production_record("p", [1, 2, 3, 4, 5, 6, 7, 8], [9, stop], u_end=7, served_by="unknown"),
        production_record("p", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], None, u_end=9),
    ]
    hits = audit_requests(fam, recorded, AuditSettings(unit=1)).summary.recorded_hits
    assert hits is not None
    assert (hits.records, hits.reported, hits.misses, hits.unknown, hits.absent) == (4, 2, 1, 1, 1)
    assert (hits.hit_tokens, hits.prompt_tokens) == (4, 10)
    path = tmp_path / "recorded.jsonl"
    with TraceWriter(path) as writer:
        for r in recorded:
            writer.write(r)
    assert main(["audit", str(path), "--family", "qwen3_5", "--unit", "1", "--no-what-if"]) == 0
    out = capsys.readouterr().out
    reported = "Recorded hits: 2 of 4 records report one, 4 tokens (40.0% of their prompt tokens)"
    assert f"{reported}, 1 of them misses; " in out
    assert (
        "1 unknown (the server did not report cached tokens: start vLLM with --enable-prompt-tokens-details)"
        in out
    )


def test_an_unknown_hit_with_a_length_is_refused():
    with pytest.raises(ValueError, match="an unknown hit has none"):
        production_record("p", [1, 2], [3], served_by="unknown", hit_tokens=0)
