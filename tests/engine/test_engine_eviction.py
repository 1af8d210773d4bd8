"""A real vLLM engine (CPU build) at unit 16 with a block pool small enough to evict, three
sessions in flight: every hit is the one the cache model predicts when the model runs vLLM's
block pool page by page (``engine_steps``: one page per group and block, freed pages reused
first, Mamba pages released behind the running position) at the engine's geometry, and reused
states still give the outputs of computing from scratch."""

from __future__ import annotations

import pytest

from tests.engine.support import (
    UNIT,
    VARIANTS,
    Runs,
    in_flight_together,
)

pytestmark = pytest.mark.engine

NUM_BLOCKS = 36  # pages in the pool, shared by the attention group and the three Mamba groups


@pytest.fixture(scope="module")
def engine(engine_model):
    from boundary_vllm.engine_run import EngineRun, EngineShape

    run = EngineRun(engine_model, EngineShape(prefix_match_unit=UNIT, num_blocks=NUM_BLOCKS, max_num_seqs=4))
    yield run
    run.close()


@pytest.fixture(scope="module")
def runs(engine):
    return Runs(engine, in_flight=3)


def groups(engine) -> tuple[int, int, int]:
    """(attention groups, recurrent groups, page bytes) of the engine's KV-cache layout."""
    from vllm.v1.kv_cache_interface import MambaSpec

    specs = [g.kv_cache_spec for g in engine.scheduler.kv_cache_config.kv_cache_groups]
    recurrent = sum(isinstance(s, MambaSpec) for s in specs)
    return len(specs) - recurrent, recurrent, specs[0].page_size_bytes


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_with_eviction_every_hit_is_the_one_the_cache_model_predicts(engine, runs, variant):
    from boundary_vllm.prediction import ModelShape

    attention, recurrent, page = groups(engine)
    shape = ModelShape(
        engine.block_size,
        UNIT,
        page_bytes=page,
        attention_groups=attention,
        recurrent_groups=recurrent,
        capacity_bytes=(NUM_BLOCKS - 1) * page,  # vLLM keeps one page as the null block
        engine_steps=True,
    )
    models: list = []
    assert not runs.hits_unpredicted(variant, shape, models)
    assert sum(models[0].stats.evictions.values()) > 0  # the pool did evict
    assert in_flight_together(runs.served(variant))


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_with_eviction_reused_states_give_the_outputs_of_computing_from_scratch(runs, variant):
    assert not runs.outputs_disagreeing(variant)
