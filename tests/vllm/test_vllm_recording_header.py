"""The engine's own recorder writes the header (the engine's geometry) first, and names a session
no client named after the request, marked so that readers chain it by prefix: the real scheduler,
two tau-bench sessions without ``boundary_session``, in flight together."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from boundary_vllm.replay import EngineShape, Replay, ReplayRequest

from boundary.checkpoints.retention import Variant
from boundary.trace.reader import read_recording
from boundary.trace.records import sessions
from tests.vllm.streams import turns

pytestmark = pytest.mark.vllm


def test_the_engine_records_its_geometry_first_and_unnamed_sessions_chain(tmp_path):
    path = tmp_path / "rec.jsonl"
    shape = EngineShape(
        block_size=16, prefix_match_unit=4, policy=Variant.BOTH, settings={"record_path": str(path)}
    )
    run = Replay(shape)
    conversations = (11, 5)
    unnamed = [[ReplayRequest.from_turn(t) for t in turns(c)[:4]] for c in conversations]
    run.run_sessions(unnamed, concurrency=2)
    run.scheduler.shutdown()
    header, records = read_recording(path)
    assert header is not None and header.policy == "both"
    g = header.geometry
    assert (g.block_size, g.prefix_match_unit, g.num_pages) == (16, 4, shape.num_blocks)
    assert {r.session_from for r in records} == {"request_id"}
    grouped = sessions(records)
    assert len(grouped) == len(conversations)  # 8 request ids, chained into the 2 conversations
    by_first_prompt = {
        tuple(s[0].prompt_token_ids): [r.prompt_token_ids for r in s] for s in grouped.values()
    }
    for session in unnamed:
        assert by_first_prompt[tuple(session[0].prompt_token_ids)] == [
            list(q.prompt_token_ids) for q in session
        ]
