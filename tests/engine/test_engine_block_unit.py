"""A real vLLM engine (CPU build) at vLLM's default unit, the align-mode block: every variant's
reused states give the outputs of computing from scratch, and every hit is the one the cache
model predicts (there U_end and P_end floor to the same block in almost every turn, so the
variants mostly agree with upstream; the plugin warns that it can change next to nothing)."""

from __future__ import annotations

import pytest

from tests.engine.support import (
    VARIANTS,
    Runs,
    in_flight_together,
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
    assert not runs.outputs_disagreeing(variant)
    assert runs.reused_requests(variant) >= 8


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_every_hit_is_the_one_the_cache_model_predicts(engine, runs, variant):
    from boundary_vllm.prediction import ModelShape

    block = engine.block_size
    assert not runs.hits_unpredicted(variant, ModelShape(block, block))
    outcomes = runs.served(variant)
    assert all(o.num_cached_tokens % block == 0 for s in outcomes for o in s)  # hits land on blocks only
    assert in_flight_together(outcomes)
