"""A real vLLM engine (CPU build) at vLLM's default unit, the align-mode block: every variant's
reused states give the outputs of computing from scratch, and every hit is the one the cache
model predicts (there U_end and P_end floor to the same block in almost every turn, so the
variants mostly agree with upstream; the plugin warns that it can change next to nothing)."""

from __future__ import annotations

import pytest

from boundary.checkpoints.kinds import CheckpointKind, checkpoint_position
from boundary.checkpoints.retention import Variant
from tests.engine.support import (
    VARIANTS,
    Runs,
    engine_shape,
    in_flight_together,
    turns,
    with_policy,
)

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engine(engine_model):
    from boundary_vllm.engine_run import EngineRun

    run = EngineRun(engine_model, engine_shape(prefix_match_unit=None, max_num_seqs=4))
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


@pytest.mark.parametrize("blocks", [2, 3])
def test_a_prompt_ending_on_a_block_keeps_p_end_one_block_lower_for_a_repeat_and_a_continuation(
    engine, blocks
):
    """The edge of the one checkpoint rule, held to the engine: a prompt of exactly ``blocks``
    blocks keeps no state at its end (its last token is recomputed), so an identical repeat and a
    continuation that extends the prompt both resume one block lower, where
    ``checkpoint_position`` places P_end's state."""
    from boundary_vllm.engine_run import EngineRequest

    block = engine.block_size
    ids = tuple(turns(3, 10)[-1].prompt.token_ids)
    assert len(ids) > blocks * block + block // 2
    prompt = EngineRequest(ids[: blocks * block], max_tokens=4)
    longer = EngineRequest(ids[: blocks * block + block // 2], max_tokens=4)
    expected = checkpoint_position(CheckpointKind.PROMPT_END, blocks * block, blocks * block, block)
    assert expected == (blocks - 1) * block
    for nxt in (prompt, longer):
        engine.reset_prefix_cache()
        ((first, second),) = engine.run_sessions(with_policy([[prompt, nxt]], Variant.MAIN_SPARSE))
        assert first.num_cached_tokens == 0
        assert second.num_cached_tokens == expected
