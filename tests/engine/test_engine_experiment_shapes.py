"""The tiny models shaped to a target's block (``tiny_models.shaped_config``) and the engine
executor's pool in the target's pages: arithmetic only, no engine (the engine tier checks that
vLLM derives the same block, ``test_engine_experiment.py``)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("block", "heads"), [(544, 8), (1056, 16)])
def test_a_shaped_model_has_the_state_from_which_vllm_derives_the_block(block, heads):
    from boundary_vllm.tiny_models import (
        ATTENTION_TOKEN_BYTES,
        CPU_BLOCK_ALIGNMENT,
        derived_block,
        recurrent_page_bytes,
        shaped_config,
    )

    config = shaped_config(block)
    assert config["linear_num_value_heads"] == heads
    state = recurrent_page_bytes(heads, config["linear_conv_kernel_dim"])
    assert (block - CPU_BLOCK_ALIGNMENT) * ATTENTION_TOKEN_BYTES < state <= block * ATTENTION_TOKEN_BYTES
    assert derived_block(state) == block


def test_a_block_the_cpu_backend_cannot_derive_is_refused_with_the_reason():
    from boundary_vllm.tiny_models import shaped_config

    with pytest.raises(ValueError, match="aligns blocks to 32 tokens"):
        shaped_config(528)


@pytest.mark.vllm  # the executor imports vLLM
def test_the_pool_has_the_targets_pages_and_refuses_one_too_small():
    from array import array

    from boundary_vllm.engine_experiment import EngineExperimentConfig, EngineExperimentError, PoolPlan

    from boundary.cache.accounting import geometry_for_unit, minimum_block_size
    from boundary.experiment.presets import PRESETS
    from boundary.experiment.stream import Continuation, StreamRequest

    model = PRESETS["Qwen3-Next-80B-A3B"]
    geometry = geometry_for_unit(model, minimum_block_size(model))
    request = StreamRequest(0, "s", 0, array("I", range(2000)), 1990, None, 2000, Continuation.FIRST)
    plan = PoolPlan.of(geometry, [[request]], EngineExperimentConfig(capacity_gib=1.0, concurrency=8))
    assert plan.pages == 2**30 // geometry.pool_page_bytes == 80
    assert plan.max_model_len == 4 * 544  # 2,001 tokens rounded up to the block
    assert plan.per_request == 4 + 2 * 3  # attention blocks, two pages per recurrent group
    assert plan.concurrency == 8
    with pytest.raises(EngineExperimentError, match="needs 10"):
        PoolPlan.of(geometry, [[request]], EngineExperimentConfig(capacity_gib=0.1))
