"""Model presets: the published configs of three hybrid models, as cache-model descriptions.

Where it sits: in the experiment, beside the cache model: the model geometry
(``boundary.cache``) it replays with; ``boundary.cli.experiment`` and ``benchmarks/replay.py``
read it.

Every number below is a ``config.json`` field (or read from the model card where the card is
the publisher's statement), with the vLLM 0.33.0 rule that turns it into bytes:

Qwen3.5-35B-A3B (``Qwen/Qwen3.5-35B-A3B``, ``model_type`` ``qwen3_5_moe``; Qwen3.6-35B-A3B
shares the architecture and model type, per the transformers ``qwen3_5_moe`` docs).
  Model card: "Number of Layers: 40; Hidden Layout: 10 x (3 x (Gated DeltaNet -> MoE) -> 1 x
  (Gated Attention -> MoE)); Gated DeltaNet: 32 linear-attention heads for V and 16 for QK,
  head dimension 128; Gated Attention: 16 heads for Q and 2 for KV, head dimension 256;
  35B in total and 3B activated". ``text_config``: ``full_attention_interval`` 4,
  ``linear_conv_kernel_dim`` 4, ``dtype`` bfloat16, ``mamba_ssm_dtype`` "float32" (vLLM's
  ``Qwen3_5ForConditionalGenerationConfig`` makes it the SSM cache dtype).
Qwen3-Next-80B-A3B (``Qwen/Qwen3-Next-80B-A3B-Instruct`` ``config.json``): 48 layers,
  ``full_attention_interval`` 4, ``num_attention_heads`` 16, ``num_key_value_heads`` 2,
  ``head_dim`` 256, ``linear_num_key_heads`` 16, ``linear_num_value_heads`` 32,
  ``linear_key_head_dim`` / ``linear_value_head_dim`` 128, ``linear_conv_kernel_dim`` 4,
  bfloat16 (no ``mamba_ssm_dtype``: vLLM's "auto" keeps bfloat16); "80B total parameters,
  only 3B active" (model card). transformers' ``Qwen3NextConfig`` defaults, documented as
  that checkpoint, carry the same values.
NVIDIA-Nemotron-3-Nano-30B-A3B (``nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16``
  ``config.json``): 52 layers, ``hybrid_override_pattern``
  "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME" (23 Mamba-2, 23 MoE, 6 attention),
  ``num_attention_heads`` 32, ``num_key_value_heads`` 2, ``head_dim`` 128,
  ``mamba_num_heads`` 64, ``mamba_head_dim`` 64, ``ssm_state_size`` 128, ``n_groups`` 8,
  ``conv_kernel`` 4, bfloat16; vLLM's ``NemotronHForCausalLMConfig`` keeps the SSM state in
  float32 by default. "3.5B active parameters and 30B parameters in total" (NVIDIA NeMo
  Megatron Bridge model page).

Derived with ``boundary.cache.accounting`` (tensor parallel 1, FlashAttention's 16-token
kernel block): align-mode block sizes 1056 (Qwen3.5), 544 (Qwen3-Next), 2096 (Nemotron 3),
matching the 1056 / 2096-token blocks vLLM logs for these models.
"""

from __future__ import annotations

from boundary.cache.accounting import ModelDescription, RecurrentState

BF16, FP32 = 2, 4

# Deliberately alike: each preset spells out one model card's config field by field (data, not
# logic), so a reader checks it against its source without following a shared default.
QWEN3_5_35B_A3B = ModelDescription(
    name="Qwen3.5-35B-A3B",
    num_layers=40,
    attention_layers=10,
    recurrent_layers=30,
    num_attention_heads=16,
    num_kv_heads=2,
    head_dim=256,
    kv_dtype_bytes=BF16,
    recurrent=RecurrentState.gated_delta_net(
        num_k_heads=16,
        num_v_heads=32,
        head_k_dim=128,
        head_v_dim=128,
        conv_kernel=4,
        conv_dtype_bytes=BF16,
        ssm_dtype_bytes=FP32,
    ),
    active_params=3_000_000_000,
    source="Qwen/Qwen3.5-35B-A3B config.json text_config and model card",
)

QWEN3_6_35B_A3B = ModelDescription(
    name="Qwen3.6-35B-A3B",
    num_layers=40,
    attention_layers=10,
    recurrent_layers=30,
    num_attention_heads=16,
    num_kv_heads=2,
    head_dim=256,
    kv_dtype_bytes=BF16,
    recurrent=QWEN3_5_35B_A3B.recurrent,
    active_params=3_000_000_000,
    source="Qwen/Qwen3.6-35B-A3B model card (the Qwen3.5-35B-A3B architecture)",
)

QWEN3_NEXT_80B_A3B = ModelDescription(
    name="Qwen3-Next-80B-A3B",
    num_layers=48,
    attention_layers=12,
    recurrent_layers=36,
    num_attention_heads=16,
    num_kv_heads=2,
    head_dim=256,
    kv_dtype_bytes=BF16,
    recurrent=RecurrentState.gated_delta_net(
        num_k_heads=16,
        num_v_heads=32,
        head_k_dim=128,
        head_v_dim=128,
        conv_kernel=4,
        conv_dtype_bytes=BF16,
        ssm_dtype_bytes=BF16,
    ),
    active_params=3_000_000_000,
    source="Qwen/Qwen3-Next-80B-A3B-Instruct config.json and model card",
)

NEMOTRON_3_NANO_30B_A3B = ModelDescription(
    name="NVIDIA-Nemotron-3-Nano-30B-A3B",
    num_layers=52,
    attention_layers=6,
    recurrent_layers=23,
    num_attention_heads=32,
    num_kv_heads=2,
    head_dim=128,
    kv_dtype_bytes=BF16,
    recurrent=RecurrentState.mamba2(
        num_heads=64,
        head_dim=64,
        state_size=128,
        n_groups=8,
        conv_kernel=4,
        conv_dtype_bytes=BF16,
        ssm_dtype_bytes=FP32,
    ),
    active_params=3_500_000_000,
    source="nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json; NeMo Megatron Bridge model page",
)

PRESETS: dict[str, ModelDescription] = {
    m.name: m for m in (QWEN3_5_35B_A3B, QWEN3_6_35B_A3B, QWEN3_NEXT_80B_A3B, NEMOTRON_3_NANO_30B_A3B)
}

# The preset a family's templates are served with, unless ``--model`` says otherwise.
FAMILY_MODELS: dict[str, str] = {
    "qwen3_5": QWEN3_5_35B_A3B.name,
    "qwen3_6": QWEN3_6_35B_A3B.name,
    "qwen3_next": QWEN3_NEXT_80B_A3B.name,
    "nemotron_3": NEMOTRON_3_NANO_30B_A3B.name,
}


def preset(name: str) -> ModelDescription:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r} (known: {', '.join(PRESETS)})") from None


def preset_for_family(family: str, model: str | None = None) -> ModelDescription:
    if model is not None:
        return preset(model)
    if family not in FAMILY_MODELS:
        raise ValueError(f"no model preset for family {family!r}; pass --model (one of {', '.join(PRESETS)})")
    return PRESETS[FAMILY_MODELS[family]]
