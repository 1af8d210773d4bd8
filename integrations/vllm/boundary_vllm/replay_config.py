# ruff: noqa: E402  (the vLLM version is checked before vLLM is imported)
"""The engine a replay builds: its shape (``EngineShape``) and the vLLM configs made from it.

Where it sits: the engine end, under ``boundary_vllm.replay`` (which alone calls it and
re-exports ``EngineShape`` to the ``vllm`` test tier and the benchmarks); it imports ``pin``,
``boundary.checkpoints.retention`` (the variant) and vLLM's config classes.

The vLLM config is built from a throwaway ``config.json`` (a tiny Llama: the scheduler reads only
lengths and flags from it); the hybrid part is the hand-built ``KVCacheConfig``.
"""

from __future__ import annotations

from boundary_vllm.pin import check_vllm, installed_vllm

check_vllm(installed_vllm(), required=True)  # builds non-public vLLM classes

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVEventsConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec

from boundary.checkpoints.retention import Variant

TINY_MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 262144,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


@dataclass(frozen=True, slots=True)
class EngineShape:
    """The KV-cache layout and scheduler settings of a replay.

    ``plugin=False`` replays through vLLM's own ``Scheduler`` (the baseline); ``policy`` applies
    only with the plugin. ``prefix_match_unit`` below ``block_size`` turns on vLLM's sub-block hits.
    """

    block_size: int = 16
    prefix_match_unit: int | None = None
    num_blocks: int = 4096
    max_num_batched_tokens: int = 8192
    max_model_len: int = 65536
    max_num_seqs: int = 16
    plugin: bool = True
    policy: Variant = Variant.BOTH
    async_scheduling: bool = False
    mamba_layers: int = 3  # 0: no Mamba group (a plain attention model)
    mamba_groups: int = 1  # vLLM groups layers by the attention layer count: 3 GDN + 1 attention = 3 groups
    mamba_state_shapes: tuple[tuple[int, ...], ...] = ((3, 512), (8, 64, 64))  # conv state, recurrent state
    attention_layers: int = 1
    exported_checkpoints: bool = False  # the kernels export the prompt checkpoint (GDN on FlashInfer)
    kv_events: bool = False  # ``enable_kv_cache_events`` (published to the "null" publisher)
    settings: dict[str, Any] = field(default_factory=dict)  # further ``additional_config["boundary"]`` keys
    kv_transfer: dict[str, Any] | None = None  # ``KVTransferConfig`` arguments (a real connector)
    cache: dict[str, Any] = field(default_factory=dict)  # further ``CacheConfig`` arguments


def vllm_config(shape: EngineShape, model_dir: Path) -> VllmConfig:
    (model_dir / "config.json").write_text(json.dumps(TINY_MODEL), encoding="utf-8")
    model = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, max_model_len=shape.max_model_len)
    cache = CacheConfig(
        block_size=shape.block_size,
        enable_prefix_caching=True,
        mamba_cache_mode="align",
        prefix_match_unit=shape.prefix_match_unit,
        **shape.cache,
    )
    scheduler = SchedulerConfig(
        max_num_seqs=shape.max_num_seqs,
        max_num_batched_tokens=shape.max_num_batched_tokens,
        max_model_len=shape.max_model_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        async_scheduling=shape.async_scheduling,
    )
    config = VllmConfig(
        model_config=model,
        cache_config=cache,
        scheduler_config=scheduler,
        device_config=DeviceConfig(device="cpu"),
        kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="null")
        if shape.kv_events
        else None,
        kv_transfer_config=KVTransferConfig(**shape.kv_transfer) if shape.kv_transfer else None,
        additional_config={"boundary": {"policy": shape.policy.value, "log_interval_s": 0, **shape.settings}},
    )
    config.cache_config.num_gpu_blocks = shape.num_blocks
    return config


def kv_cache_config(shape: EngineShape, retention_interval: int | None) -> KVCacheConfig:
    attention = FullAttentionSpec(
        block_size=shape.block_size, num_kv_heads=2, head_size=64, dtype=torch.bfloat16
    )
    mamba = MambaSpec(
        block_size=shape.block_size,
        shapes=shape.mamba_state_shapes,
        dtypes=(torch.bfloat16,) + (torch.float32,) * (len(shape.mamba_state_shapes) - 1),
        mamba_cache_mode="align",
        num_prefill_checkpoint_blocks=int(shape.exported_checkpoints),
        prefill_checkpoint_alignment=(shape.prefix_match_unit or shape.block_size)
        if shape.exported_checkpoints
        else None,
    )
    return KVCacheConfig(
        num_blocks=shape.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                [f"model.layers.{i}.self_attn.attn" for i in range(shape.attention_layers)], attention
            ),
            *(  # no Mamba layers: a plain attention model, for which the plugin stays inactive
                KVCacheGroupSpec(
                    [
                        f"model.layers.{i}.linear_attn"
                        for i in range(g, shape.mamba_layers, shape.mamba_groups)
                    ],
                    mamba,
                )
                for g in range(shape.mamba_groups if shape.mamba_layers else 0)
            ),
        ],
        prefix_cache_retention_interval=retention_interval,  # as vLLM's KV-cache planning copies it
    )
