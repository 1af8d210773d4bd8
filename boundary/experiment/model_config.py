"""A model directory's ``config.json`` as a cache-model description, by vLLM's rules.

Where it sits: in the experiment, beside the presets (``presets.py``): the same
``ModelDescription`` for a model a user has, read instead of written out. ``boundary
experiment --model DIR`` uses it; the report header names the directory it came from.

transformers reads the config (``AutoConfig``: its defaults, its layer-type lists from
``layer_types`` or ``hybrid_override_pattern``) and counts the parameters on the meta device
(no weights are read). vLLM 0.33.0's rules turn the fields into cache bytes:

- the KV cache and the convolution state are kept in the model's dtype (``kv_cache_dtype`` and
  ``mamba_cache_dtype`` "auto"); bfloat16 where the config names none;
- the temporal (SSM) state: Qwen3.5's ``mamba_ssm_dtype`` where its config has one
  (``Qwen3_5ForConditionalGenerationConfig``), Nemotron-H's ``mamba_ssm_cache_dtype`` or else
  float32 (``NemotronHForCausalLMConfig``), otherwise the model's dtype;
- state shapes: ``MambaStateShapeCalculator`` (``RecurrentState.gated_delta_net`` / ``mamba2``).

Active parameters (the prefill cost model's FLOPs) are every parameter a token multiplies
through, input embeddings excluded, routed experts counted ``num_experts_per_tok / num_experts``.
Architectures without a rule here are refused by name, never guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from boundary.cache.accounting import ModelDescription, RecurrentState

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
GATED_DELTA_NET_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
MAMBA2_TYPES = ("nemotron_h",)
ATTENTION, LINEAR = "full_attention", "linear_attention"
COUNTED = "parameters counted by transformers"
FP32 = "float32"  # Nemotron-H's temporal state where its config names none


def describe_model(path: Path | str) -> ModelDescription:
    """The description of the hybrid model whose ``config.json`` is in directory ``path``.
    ``ValueError`` names the directory when it holds no readable config or an architecture
    without a rule here."""
    config = _read_config(Path(path))
    text = config.get_text_config()
    kind = text.model_type
    dtype = _dtype_name(getattr(text, "dtype", None) or getattr(config, "dtype", None))
    if kind in GATED_DELTA_NET_TYPES:
        layers = list(text.layer_types)
        ssm = getattr(text, "mamba_ssm_dtype", None) if kind.startswith("qwen3_5") else None
        recurrent = RecurrentState.gated_delta_net(
            num_k_heads=text.linear_num_key_heads,
            num_v_heads=text.linear_num_value_heads,
            head_k_dim=text.linear_key_head_dim,
            head_v_dim=text.linear_value_head_dim,
            conv_kernel=text.linear_conv_kernel_dim,
            conv_dtype_bytes=DTYPE_BYTES[dtype],
            ssm_dtype_bytes=DTYPE_BYTES[_dtype_name(ssm or dtype)],
        )
    elif kind in MAMBA2_TYPES:
        layers = list(text.layers_block_type)
        recurrent = RecurrentState.mamba2(
            num_heads=text.mamba_num_heads,
            head_dim=text.mamba_head_dim,
            state_size=text.ssm_state_size,
            n_groups=text.n_groups,
            conv_kernel=text.conv_kernel,
            conv_dtype_bytes=DTYPE_BYTES[dtype],
            ssm_dtype_bytes=DTYPE_BYTES[
                _dtype_name(getattr(text, "mamba_ssm_cache_dtype", None) or "float32")
            ],
        )
    else:
        known = ", ".join((*GATED_DELTA_NET_TYPES, *MAMBA2_TYPES))
        raise ValueError(
            f"{path}: no cache geometry rule for model_type {kind!r} (known: {known}); pass a preset"
        )
    return ModelDescription(
        name=Path(path).name,
        num_layers=len(layers),
        attention_layers=layers.count(ATTENTION),
        recurrent_layers=layers.count(LINEAR),
        num_attention_heads=text.num_attention_heads,
        num_kv_heads=text.num_key_value_heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
        kv_dtype_bytes=DTYPE_BYTES[dtype],
        recurrent=recurrent,
        active_params=active_parameters(text),
        source=f"{Path(path) / 'config.json'} (model_type {kind}, {dtype}; {COUNTED})",
    )


def active_parameters(text_config: Any) -> int:
    """Parameters one token multiplies through: the model built on the meta device, input
    embeddings left out, each routed expert's weights counted at ``num_experts_per_tok /
    num_experts``."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(text_config)
    routed = getattr(text_config, "num_experts", None) or getattr(text_config, "n_routed_experts", None)
    share = (text_config.num_experts_per_tok / routed) if routed else 1.0
    embeddings = {id(p) for p in model.get_input_embeddings().parameters()}
    total = 0.0
    for name, p in model.named_parameters():
        if id(p) in embeddings:
            continue
        total += p.numel() * (share if ".experts." in name else 1.0)
    return round(total)


def _read_config(path: Path) -> Any:
    from transformers import AutoConfig

    if not (path / "config.json").is_file():
        raise ValueError(f"{path}: no config.json (a model directory carries one)")
    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except (ValueError, KeyError, OSError) as exc:
        raise ValueError(f"{path}/config.json: transformers cannot read it ({exc})") from None


def _dtype_name(dtype: Any) -> str:
    """``"bfloat16"`` for a ``torch.dtype`` or a name; bfloat16 where none is given."""
    name = str(dtype or "bfloat16").removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ValueError(f"unsupported dtype {name!r} (known: {', '.join(DTYPE_BYTES)})")
    return name
