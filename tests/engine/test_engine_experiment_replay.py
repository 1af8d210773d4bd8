"""A recorded engine run the cache model does not yet predict: vLLM's CPU engine with boundary's
plugin (``--executor engine``, main_sparse, block 544, unit 16, a 21-page pool, two tau-bench
sessions in flight) served the second session's second request 1,328 tokens from that session's
own prompt-end state; the page-by-page pool, fed the engine's own steps, evicts that state at
step 54 (when the other session's second request allocates its prefill) and predicts 1,088.

Replayed from ``data/main_sparse_544_evicting.json`` (the engine's step log, outputs and hits), so
it runs without an engine. The engine is right; the xfail names what the model gets wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm  # boundary_vllm is installed with vLLM

RECORDING = Path(__file__).parent / "data" / "main_sparse_544_evicting.json"


def replay() -> tuple[list[list[int]], list[list[int]], list[list[str]]]:
    """(the engine's hits, the model's predictions, the kinds the engine served)."""
    from boundary_vllm.prediction import ModelShape, Observed, predicted_hits

    from boundary.checkpoints.retention import Variant

    data = json.loads(RECORDING.read_text(encoding="utf-8"))
    sessions = [
        [
            Observed(
                tuple(r["prompt_token_ids"]),
                tuple(r["output_token_ids"]),
                r["input_end"],
                tuple(r["stop_token_ids"]),
                r["round_trip"],
                r["horizon"],
                r["admitted"],
                r["finished"],
                tuple(tuple(step) for step in r["steps"]),
            )
            for r in session
        ]
        for session in data["sessions"]
    ]
    shape = ModelShape(**data["shape"], engine_steps=True)
    return data["engine_hits"], predicted_hits(sessions, Variant.MAIN_SPARSE, shape), data["engine_kinds"]


def test_the_model_predicts_the_requests_before_the_eviction():
    engine, model, kinds = replay()
    assert engine[0] == model[0] == [0, 1328, 1360]
    assert engine[1][0] == model[1][0] == 1088
    assert kinds[1] == ["prompt_end_block", "prompt_end"]


@pytest.mark.xfail(
    strict=True,
    reason="boundary.cache.engine_steps makes session 1's sub-block prompt-end state (1,328, inside its "
    "request's last block) evictable one step after copying it aside (_copy_aside, hold_until_step_end) "
    "and evicts it at step 54 as the free queue's oldest entry; vLLM still serves it at step 56, so its "
    "block pool does not hold that page at the queue's head while the request runs on in that block",
)
def test_the_model_predicts_the_state_vllm_kept():
    engine, model, _ = replay()
    assert model == engine
