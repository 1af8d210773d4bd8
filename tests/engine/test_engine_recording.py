"""Production traces from a real engine: with ``record_path`` set, the engine (CPU build, unit 16)
writes a production record per finished request; ``boundary audit`` and ``boundary experiment``
replay the file as it is, and the experiment's replay of it, at the engine's geometry and under
the engine's policy, gives every request the hit the engine served."""

from __future__ import annotations

import dataclasses
import json

import pytest

from boundary.cli.main import main as boundary_main
from boundary.trace.reader import read_trace
from tests.engine.support import UNIT, engine_shape, requests, turns
from tests.support import family

pytestmark = pytest.mark.engine

CONVERSATIONS = ((0, 12), (11, 6))  # a tool loop, then U_end's case: one session after the other


@pytest.fixture(scope="module")
def recorded(engine_model, tmp_path_factory):
    """The file, the sessions sent and the engine's outcomes (one session in flight, so the
    file's order is the order the engine served)."""
    from boundary_vllm.engine_run import EngineRun

    path = tmp_path_factory.mktemp("recorded") / "engine.jsonl"
    shape = engine_shape(prefix_match_unit=UNIT, policy="both", settings={"record_path": str(path)})
    run = EngineRun(engine_model, shape)
    sessions = [
        [dataclasses.replace(r, session=f"tau-{c}") for r in requests(turns(c, m))] for c, m in CONVERSATIONS
    ]
    outcomes = run.run_sessions(sessions, concurrency=1)
    layout = run.layout
    run.close()  # closes the recorder: everything queued is written
    return path, sessions, outcomes, layout


def test_every_finished_request_is_recorded_with_the_hit_the_engine_served(recorded):
    path, sessions, outcomes, _ = recorded
    records = read_trace(path)
    sent = [r for s in sessions for r in s]
    served = [o for s in outcomes for o in s]
    assert len(records) == len(sent)
    for record, request, outcome in zip(records, sent, served, strict=True):
        assert record.prompt_token_ids == list(request.prompt_token_ids)
        assert record.output is not None and tuple(record.output.token_ids) == outcome.output_token_ids
        assert record.u_end == request.input_end and record.p_end == len(request.prompt_token_ids)
        assert record.hit_tokens == outcome.num_cached_tokens
        assert record.served_by == (None if outcome.logged.kind == "miss" else outcome.logged.kind)
        assert record.policy == "both"
    assert {r.served_by for r in records} >= {None, "input_end"}


def test_the_experiment_replays_the_file_with_the_hits_the_engine_served(recorded):
    from boundary.cache import CacheConfig, CacheGeometry
    from boundary.cache.retention import engine_geometry
    from boundary.experiment.cost import PrefillCostModel
    from boundary.experiment.policies import policy
    from boundary.experiment.presets import preset_for_family
    from boundary.experiment.replay import BudgetMode, event_order, replay, replay_oracle
    from boundary.experiment.stream import Stream, cache_requests
    from boundary.experiment.workloads.rendering import native_output
    from boundary.experiment.workloads.trace import render_trace

    path, _, _, layout = recorded
    records = read_trace(path)
    fam = family("qwen3_5")
    stream = Stream("engine", {})
    rendered = [
        r for ss in render_trace(fam, records, {"variant": "think"}, native_output).values() for r in ss
    ]
    # as the engine served them: one request at a time, in the file's order
    stream.requests = [
        dataclasses.replace(r, rid=k, arrival=2.0 * k, finish=2.0 * k + 1.0) for k, r in enumerate(rendered)
    ]
    geometry = CacheGeometry(
        layout.block_size,
        UNIT,
        page_bytes=layout.page_bytes,
        group_size=1,
        attention_groups=layout.attention_groups,
        recurrent_groups=layout.recurrent_groups,
    )
    reqs = cache_requests(stream, UNIT)
    events = event_order(reqs)
    run = replay(
        stream,
        reqs,
        policy("both"),
        CacheConfig(geometry, float("inf")),
        PrefillCostModel(preset_for_family("qwen3_5")),
        replay_oracle(reqs, UNIT, events),
        budget=BudgetMode.EQUAL_CAPACITY,
        events=events,
        geometry=engine_geometry(geometry),
    )
    by_key = {(r.session, r.turn): r.joint for r in run.records}
    replayed = [by_key[(r.session, k)] for s in _by_session(records) for k, r in enumerate(s)]
    assert replayed == [r.hit_tokens for s in _by_session(records) for r in s]


def _by_session(records):
    sessions: dict[str, list] = {}
    for r in records:
        sessions.setdefault(r.session, []).append(r)
    return list(sessions.values())


def test_boundary_audit_and_experiment_replay_the_file_as_it_is(recorded, tmp_path):
    path, *_ = recorded
    records = read_trace(path)
    audit = tmp_path / "audit.json"
    args = [
        "audit",
        str(path),
        "--family",
        "qwen3_5",
        "--unit",
        str(UNIT),
        "--no-what-if",
        "--json",
        str(audit),
    ]
    assert boundary_main(args) == 0
    assert len(json.loads(audit.read_text())["turns"]) == len(records)
    out = tmp_path / "experiment.json"
    args = [
        "experiment",
        "--workload",
        str(path),
        "--unit",
        str(UNIT),
        "--capacity-gib",
        "4",
        "--json",
        str(out),
    ]
    assert boundary_main(args) == 0
    stream = json.loads(out.read_text())["stream"]
    assert stream["requests"] == len(records) and stream["sessions"] == len(CONVERSATIONS)
