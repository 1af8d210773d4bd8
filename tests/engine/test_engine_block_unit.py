"""A real vLLM engine (CPU build) at vLLM's default unit, the align-mode block: every variant's
reused states give the outputs of computing from scratch, and every hit is the one the cache
model predicts (there U_end and P_end floor to the same block in almost every turn, so the
variants mostly agree with upstream; the plugin warns that it can change next to nothing)."""

from __future__ import annotations

import pytest

from tests.engine.support import (
    VARIANTS,
    Runs,
    differences,
    disagreements,
    in_flight_together,
    observed,
    sessions,
)

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engine(engine_model):
    from boundary_vllm.engine_run import EngineRun, EngineShape

    run = EngineRun(engine_model, EngineShape(prefix_match_unit=None, max_num_seqs=4))
    yield run
    run.close()


@pytest.fixture(scope="module")
def runs(engine):
    return Runs(engine, in_flight=3)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_reused_states_give_the_outputs_of_computing_from_scratch(runs, variant):
    outcomes = runs.served(variant)
    assert not disagreements(outcomes, runs.reference())
    assert sum(o.num_cached_tokens > 0 for s in outcomes for o in s) >= 8


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_every_hit_is_the_one_the_cache_model_predicts(engine, runs, variant):
    from boundary_vllm.prediction import ModelShape, predicted_hits

    outcomes = runs.served(variant)
    hits = [[o.num_cached_tokens for o in s] for s in outcomes]
    block = engine.block_size
    model = predicted_hits(observed(sessions(), outcomes), variant, ModelShape(block, block))
    assert not differences(hits, model)
    assert all(h % block == 0 for row in hits for h in row)  # hits land on blocks only
    assert in_flight_together(outcomes)
