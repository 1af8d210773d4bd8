"""A real vLLM engine (CPU build) at unit 16 with a block pool small enough to evict, three
sessions in flight: every hit is the one the cache model predicts when the model runs vLLM's
block pool page by page (``engine_steps``: one page per group and block, freed pages reused
first, Mamba pages released behind the running position) at the engine's geometry, and reused
states still give the outputs of computing from scratch.

The pool is sized for the block vLLM derives on this host (``engine_run.probe_layout``: an engine
started and read first): the pages of each session's longest request, all sessions in flight at
once, and nothing more; ``max_model_len`` is the longest request rounded up to the block. So
whatever requests are in flight together fit (none is preempted), and the states the sessions
keep beside them do not all fit: the pool evicts. How much each variant keeps beside its requests
depends on the block (at 256-token blocks decode_end's few states fit in the pages the shorter
requests leave free, at 384 they do not), so eviction is required of the variants together, and
every variant's hits are checked whether it evicted or not."""

from __future__ import annotations

import math

import pytest

from tests.engine.support import (
    UNIT,
    VARIANTS,
    Runs,
    engine_shape,
    in_flight_together,
    sessions,
)

pytestmark = pytest.mark.engine

IN_FLIGHT = 3  # all three sessions at once


def longest_requests() -> list[int]:
    """Tokens of each session's longest request, prompt and output."""
    return [max(len(r.prompt_token_ids) + r.max_tokens for r in s) for s in sessions()]


@pytest.fixture(scope="module")
def engine(engine_model):
    from boundary_vllm.engine_run import EngineRun, probe_layout

    shape = engine_shape(prefix_match_unit=UNIT, max_num_seqs=4)
    layout = probe_layout(engine_model, shape)
    longest = longest_requests()
    assert len(longest) == IN_FLIGHT
    max_len = math.ceil(max(longest) / layout.block_size) * layout.block_size
    pages = 1 + sum(layout.pages_per_request(n) for n in longest)  # and vLLM's null block
    run = EngineRun(
        engine_model,
        engine_shape(prefix_match_unit=UNIT, max_num_seqs=4, num_blocks=pages, max_model_len=max_len),
    )
    assert run.layout.block_size == layout.block_size  # the geometry the pool was sized for
    assert run.layout.num_blocks == pages
    yield run
    run.close()


@pytest.fixture(scope="module")
def runs(engine):
    return Runs(engine, in_flight=IN_FLIGHT)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_with_eviction_every_hit_is_the_one_the_cache_model_predicts(engine, runs, variant):
    assert not runs.hits_unpredicted(variant, model_shape(engine))
    assert in_flight_together(runs.served(variant))


def model_shape(engine):
    from boundary_vllm.engine_experiment import model_shape as at_engine_layout

    return at_engine_layout(engine, UNIT)


def test_the_pool_evicts_kept_states(engine, runs):
    evictions = {}
    for variant in VARIANTS:
        models: list = []
        runs.hits_unpredicted(variant, model_shape(engine), models)
        evictions[variant.value] = sum(models[0].stats.evictions.values())
    assert sum(evictions.values()) > 0, evictions


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.value)
def test_with_eviction_reused_states_give_the_outputs_of_computing_from_scratch(runs, variant):
    assert not runs.outputs_disagreeing(variant)
