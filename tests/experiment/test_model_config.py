"""``describe_model``: a model directory's ``config.json`` read by transformers gives, by vLLM's
rules, the description each preset writes out field by field from the published config — the
same layers, heads, dtypes and state shapes, so the same align-mode block — and a config
without a rule is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import LlamaConfig, NemotronHConfig, Qwen3_5MoeConfig, Qwen3NextConfig

from boundary.cache.accounting import align_mode_geometry
from boundary.experiment.model_config import describe_model
from boundary.experiment.presets import PRESETS

CACHE_FIELDS = (
    "num_layers",
    "attention_layers",
    "recurrent_layers",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "kv_dtype_bytes",
    "recurrent",
)


def published(name: str) -> object:
    """Each model's published config, in transformers' config class (fields as the presets
    quote them; transformers' defaults where they are that checkpoint's)."""
    if name == "Qwen3-Next-80B-A3B":
        return Qwen3NextConfig(dtype="bfloat16")
    if name == "Qwen3.5-35B-A3B":
        return Qwen3_5MoeConfig(text_config={"mamba_ssm_dtype": "float32", "dtype": "bfloat16"})
    return NemotronHConfig(
        hybrid_override_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        num_hidden_layers=52,
        hidden_size=2688,
        num_attention_heads=32,
        num_key_value_heads=2,
        head_dim=128,
        mamba_num_heads=64,
        mamba_head_dim=64,
        ssm_state_size=128,
        n_groups=8,
        conv_kernel=4,
        n_routed_experts=128,
        num_experts_per_tok=6,
        moe_intermediate_size=1856,
        moe_shared_expert_intermediate_size=3712,
        dtype="bfloat16",
    )


@pytest.mark.parametrize(
    ("name", "block"),
    [("Qwen3-Next-80B-A3B", 544), ("Qwen3.5-35B-A3B", 1056), ("NVIDIA-Nemotron-3-Nano-30B-A3B", 2096)],
)
def test_a_published_config_gives_its_presets_cache_geometry(tmp_path: Path, name: str, block: int) -> None:
    published(name).save_pretrained(tmp_path)  # type: ignore[attr-defined]
    model, preset = describe_model(tmp_path), PRESETS[name]
    assert {f: getattr(model, f) for f in CACHE_FIELDS} == {f: getattr(preset, f) for f in CACHE_FIELDS}
    assert align_mode_geometry(model).block_size == block  # the block vLLM logs for the model
    assert 0.8 < model.active_params / preset.active_params < 1.25  # the card's rounded figure
    assert str(tmp_path / "config.json") in model.source


def test_without_mamba_ssm_dtype_qwen3_5_keeps_its_state_in_the_model_dtype(tmp_path: Path) -> None:
    Qwen3_5MoeConfig(text_config={"dtype": "bfloat16"}).save_pretrained(tmp_path)
    model = describe_model(tmp_path)
    assert model.recurrent.temporal_dtype_bytes == 2
    assert model.recurrent.temporal_elements == PRESETS["Qwen3.5-35B-A3B"].recurrent.temporal_elements


def test_a_model_without_a_geometry_rule_is_refused_by_name(tmp_path: Path) -> None:
    LlamaConfig(num_hidden_layers=2).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no cache geometry rule for model_type 'llama'"):
        describe_model(tmp_path)


def test_a_directory_without_config_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no config\.json"):
        describe_model(tmp_path)
