"""Model presets laid out as vLLM 0.33.0 lays out align-mode caches."""

from __future__ import annotations

import pytest

from boundary.cache import align_mode_geometry, geometry_for_unit
from boundary.cache.accounting import group_layout
from boundary.experiment.presets import (
    NEMOTRON_3_NANO_30B_A3B,
    QWEN3_5_35B_A3B,
    QWEN3_NEXT_80B_A3B,
    preset_for_family,
)


@pytest.mark.parametrize(
    ("model", "block", "groups"),
    [
        (QWEN3_5_35B_A3B, 1056, (10, 1, 3)),
        (QWEN3_NEXT_80B_A3B, 544, (12, 1, 3)),
        (NEMOTRON_3_NANO_30B_A3B, 2096, (6, 1, 4)),
    ],
)
def test_presets_get_the_block_size_and_groups_vllm_computes(model, block, groups):
    g = align_mode_geometry(model)
    layout = group_layout(model)
    assert g.block_size == block and g.unit == block
    assert (layout.group_size, layout.attention_groups, layout.recurrent_groups) == groups
    assert g.page_bytes == block * model.kv_bytes_per_token_per_layer >= model.recurrent.bytes
    assert g.block_bytes == g.page_bytes * layout.group_size * layout.attention_groups
    assert g.state_bytes == g.page_bytes * layout.group_size * layout.recurrent_groups


def test_qwen3_5_recurrent_state_counts_its_fp32_ssm_state():
    per_layer = QWEN3_5_35B_A3B.recurrent
    assert per_layer.temporal_elements == 32 * 128 * 128 and per_layer.temporal_dtype_bytes == 4
    assert per_layer.conv_elements == (16 * 128 * 2 + 32 * 128) * 3
    assert QWEN3_5_35B_A3B.recurrent_state_bytes == 30 * per_layer.bytes


def test_a_unit_that_does_not_divide_the_block_grows_the_block_to_admit_it():
    assert geometry_for_unit(QWEN3_5_35B_A3B, 16).block_size == 1056
    assert geometry_for_unit(QWEN3_5_35B_A3B, 64).block_size == 1088  # the smallest multiple of 64 >= 1056
    assert geometry_for_unit(QWEN3_5_35B_A3B, 2096).block_size == 2096  # a block-sized unit
    assert geometry_for_unit(NEMOTRON_3_NANO_30B_A3B, 528).block_size == 2112


def test_a_block_size_below_the_align_mode_minimum_is_refused():
    with pytest.raises(ValueError, match="below"):
        align_mode_geometry(QWEN3_5_35B_A3B, block_size=528)
    with pytest.raises(ValueError, match="must divide"):
        align_mode_geometry(QWEN3_5_35B_A3B, unit=64)


def test_families_map_to_their_presets_and_unknown_ones_ask_for_a_model():
    assert preset_for_family("qwen3_next") is QWEN3_NEXT_80B_A3B
    with pytest.raises(ValueError, match="--model"):
        preset_for_family("qwen3")
    assert preset_for_family("qwen3", "Qwen3.5-35B-A3B") is QWEN3_5_35B_A3B
