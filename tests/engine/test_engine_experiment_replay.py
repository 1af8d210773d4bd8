"""A recorded engine run whose eviction order the cache model once got wrong: vLLM's CPU engine
with boundary's plugin (``--executor engine``, main_sparse, block 544, unit 16, a 21-page pool,
two tau-bench sessions in flight) served the second session's second request 1,328 tokens from
that session's own prompt-end state. A model that frees the pages behind a request one step late,
as under async scheduling, puts the shared 1,088-token state behind that state in the free queue,
evicts it at step 54 and predicts 1,088; the CPU engine schedules synchronously and frees them in
the step that moves past them (the recording's ``async_scheduling: false``).

Replayed from ``data/main_sparse_544_evicting.json`` (the engine's step log, outputs and hits), so
it runs without an engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm  # boundary_vllm is installed with vLLM

RECORDING = Path(__file__).parent / "data" / "main_sparse_544_evicting.json"


def observed(data: dict) -> list[list]:
    """The recording's requests as the prediction reads them."""
    from boundary_vllm.engine_observations import observed_from

    return [[observed_from(r) for r in session] for session in data["sessions"]]


def replay() -> tuple[list[list[int]], list[list[int]], list[list[str]]]:
    """(the engine's hits, the model's predictions, the kinds the engine served)."""
    from boundary_vllm.prediction import ModelShape, predicted_hits

    from boundary.checkpoints.retention import Variant

    data = json.loads(RECORDING.read_text(encoding="utf-8"))
    shape = ModelShape(**data["shape"], engine_steps=True)
    return (
        data["engine_hits"],
        predicted_hits(observed(data), Variant.MAIN_SPARSE, shape),
        data["engine_kinds"],
    )


def test_the_model_predicts_every_hit_the_engine_served_through_the_eviction():
    engine, model, kinds = replay()
    assert model == engine == [[0, 1328, 1360], [1088, 1328]]
    assert kinds == [["miss", "prompt_end", "prompt_end"], ["prompt_end_block", "prompt_end"]]


def test_freeing_one_step_late_as_under_async_scheduling_evicts_the_state_the_engine_kept():
    """The same steps under the async scheduler's one-step lag: a different, wrong answer here,
    so the engine's scheduling mode is what decides it."""
    from boundary_vllm.prediction import ModelShape, predicted_hits

    from boundary.checkpoints.retention import Variant

    data = json.loads(RECORDING.read_text(encoding="utf-8"))
    shape = ModelShape(**{**data["shape"], "async_scheduling": True}, engine_steps=True)
    engine, _, _ = replay()
    lagged = predicted_hits(observed(data), Variant.MAIN_SPARSE, shape)
    assert lagged == [[0, 1328, 1360], [1088, 1088]] != engine


def test_a_disagreement_is_named_with_the_request_and_the_kind_the_engine_served():
    """The run summary of the lagged model beside the engine: agreement 4/5, and the one
    disagreement's row."""
    from boundary_vllm.engine_experiment import RequestRow, run_summary
    from boundary_vllm.prediction import ModelShape, predicted_hits

    from boundary.checkpoints.retention import Variant

    data = json.loads(RECORDING.read_text(encoding="utf-8"))
    lagged = ModelShape(**{**data["shape"], "async_scheduling": True}, engine_steps=True)
    model = predicted_hits(observed(data), Variant.MAIN_SPARSE, lagged)
    rows = []
    for si, session in enumerate(data["sessions"]):
        for ri, r in enumerate(session):
            hit, kind = data["engine_hits"][si][ri], data["engine_kinds"][si][ri]
            rows.append(
                RequestRow(
                    len(rows), f"s{si}", ri, len(r["prompt_token_ids"]), hit, model[si][ri], None, kind
                )
            )
    summary = run_summary(Variant.MAIN_SPARSE, rows, {}, 0, preempted=False)
    assert summary["model_agreement"] == pytest.approx(0.8) and summary["disagreements"] == 1
    assert summary["first_disagreements"] == [
        {
            "request": 4,
            "session": "s1",
            "turn": 1,
            "engine_hit": 1328,
            "model_hit": 1088,
            "engine_kind": "prompt_end",
        }
    ]


def test_a_saved_run_reads_back_and_rechecks_the_model_as_it_is_now(tmp_path):
    """The recording saved as ``--executor engine`` runs save theirs, read back, and rechecked:
    the model now agrees on all five requests; the lagged model's one disagreement is named."""
    from boundary_vllm.engine_observations import SavedRun, load_run, recheck, save_run
    from boundary_vllm.prediction import ModelShape

    from boundary.checkpoints.retention import Variant

    data = json.loads(RECORDING.read_text(encoding="utf-8"))
    sessions = tuple(tuple(s) for s in observed(data))
    hits = tuple(tuple(h) for h in data["engine_hits"])
    for lag, agreeing, differ in ((False, 5, ()), (True, 4, ((1, 1, 1328, 1088),))):
        shape = ModelShape(**{**data["shape"], "async_scheduling": lag}, engine_steps=True)
        save_run(tmp_path / "run.json.gz", SavedRun(Variant.MAIN_SPARSE, shape, sessions, hits))
        saved = load_run(tmp_path / "run.json.gz")
        assert saved == SavedRun(Variant.MAIN_SPARSE, shape, sessions, hits)
        result = recheck(saved)
        assert (result.requests, result.agreeing, result.disagreements) == (5, agreeing, differ)
