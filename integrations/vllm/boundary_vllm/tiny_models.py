"""Tiny random-weight hybrid models for running a real vLLM engine without a model hub.

Where it sits: beside the engine end, as test and benchmark input: the engine test tier,
``benchmarks/engine.py`` and ``integrations/vllm/gpu_check.py`` load models from it; it imports
``boundary`` (the shipped family) and ``boundary.shipped.resources``.

Each model is built from a transformers config (seeded random weights, bf16) and saved with
boundary's shipped Qwen3.5 vocabulary and chat template, so prompts rendered by boundary are
exactly the ids the engine reads. Built once per config and cached under boundary's cache
directory (``BOUNDARY_CACHE_DIR``); a cached directory is used only when its recorded
fingerprint (config, seed, vocabulary and template) matches, and is rebuilt otherwise.

- ``gdn``: ``Qwen3NextForCausalLM``, three Gated DeltaNet layers and one full-attention layer,
  a few MoE experts (vLLM's Qwen3-Next needs MoE layers); GDN on CPU needs bf16 and a linear
  head dimension its kernel supports (128).
- ``mamba2``: ``NemotronHForCausalLM``, Mamba-2 / attention / MLP layers.
- ``gdn@B`` (``shaped_kind``): the ``gdn`` model with the value heads from which vLLM's CPU
  build, started at its attention kernel's alignment (``block_size=32``), derives ``B`` itself
  (``shaped_config``): a target model's block, its state filling the page as a real hybrid
  model's does; ``max_position_embeddings`` raised for long sessions.

Random weights make the outputs meaningless but deterministic. Two changes to the random
initialisation make what the model predicts depend on its whole recurrent state, so that a
wrong state shows: the recurrent layers barely decay (``A_log`` set to ``RECURRENT_A_LOG``; at
the default initialisation they forget within ~10 tokens), and their output projections are
scaled up (``RECURRENT_OUT_SCALE``). Measured with the ``gdn`` model: a state carrying 16 tokens
twice moved the last logprobs by 0.5 nats (by 0.008, one bf16 step, before these changes).
Needs torch and transformers (not vLLM).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import boundary
from boundary.shipped.resources import cache_dir

FAMILY, VARIANT = "qwen3_5", "think"  # the vocabulary and template the models are saved with
VOCAB_SIZE = 248320  # Qwen3.5's padded embedding size (248,044 ranks + added tokens fit)
SEED = 0
RECURRENT_OUT_SCALE = 16.0
RECURRENT_OUT = {"gdn": ".linear_attn.out_proj.weight", "mamba2": ".mixer.out_proj.weight"}
RECURRENT_A_LOG = -8.0  # decay rate exp(A_log) per unit step: the state keeps its history

CONFIGS: dict[str, dict[str, Any]] = {
    "gdn": {
        "model_type": "qwen3_next",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "linear_num_key_heads": 1,
        "linear_num_value_heads": 2,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 128,
        "decoder_sparse_step": 1,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    },
    "mamba2": {
        "model_type": "nemotron_h",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "hybrid_override_pattern": "M*M-",
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "mamba_num_heads": 8,
        "mamba_head_dim": 32,
        "ssm_state_size": 64,
        "n_groups": 1,
        "conv_kernel": 4,
        "chunk_size": 128,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    },
}


# The shaped GDN model's page arithmetic (bf16 states, vLLM's GDN state shapes): one attention
# token is K and V of 2 heads x 64 dims x 2 bytes; a value head holds a 128 x 128 state and adds
# 128 conv channels, the key head's 2 x 128 conv channels come once; a conv channel keeps
# (kernel - 1) positions.
ATTENTION_TOKEN_BYTES = 2 * 2 * 64 * 2
VALUE_STATE_BYTES = 128 * 128 * 2
# vLLM's CPU attention backend takes blocks in multiples of 32 tokens (its kernel block); an engine
# started with ``block_size=32`` derives the least multiple of 32 whose attention page holds
# the recurrent page, as a GPU engine does at its backend's alignment.
CPU_BLOCK_ALIGNMENT = 32
SHAPED_MAX_POSITIONS = 65536


def shaped_kind(block_size: int) -> str:
    """The tiny model kind from which vLLM's CPU build derives ``block_size`` (``shaped_config``)."""
    return f"gdn@{block_size}"


def recurrent_page_bytes(value_heads: int, conv_kernel: int) -> int:
    """One GDN layer's state bytes (bf16): the recurrent state and the conv state."""
    return value_heads * VALUE_STATE_BYTES + (2 * 128 + 128 * value_heads) * (conv_kernel - 1) * 2


def derived_block(state_bytes: int, alignment: int = CPU_BLOCK_ALIGNMENT) -> int:
    """The block vLLM derives for a recurrent page of ``state_bytes`` at ``alignment``: the least
    multiple of it whose attention page holds the state."""
    return alignment * -(-state_bytes // (alignment * ATTENTION_TOKEN_BYTES))


def shaped_config(block_size: int) -> dict[str, Any]:
    """``gdn`` with the value heads and conv kernel from which vLLM's CPU build derives
    ``block_size`` (the state then fills most of the page, as a real hybrid model's does);
    ``ValueError`` naming why when none does (a block not a multiple of 32, or too small)."""
    if block_size % CPU_BLOCK_ALIGNMENT:
        raise ValueError(
            f"block {block_size}: vLLM's CPU attention backend aligns blocks to {CPU_BLOCK_ALIGNMENT} "
            f"tokens, so no CPU engine derives {block_size} (a GPU backend aligned to 16 can)"
        )
    for heads in range(64, 0, -1):
        for kernel in (4, 3, 2):
            if derived_block(recurrent_page_bytes(heads, kernel)) == block_size:
                return {
                    **CONFIGS["gdn"],
                    "linear_num_value_heads": heads,
                    "linear_conv_kernel_dim": kernel,
                    "max_position_embeddings": SHAPED_MAX_POSITIONS,
                }
    raise ValueError(f"block {block_size}: no tiny GDN model (1-64 value heads) derives it")


def _config(kind: str) -> dict[str, Any]:
    base, _, block = kind.partition("@")
    if base == "gdn" and block.isdigit():
        return shaped_config(int(block))
    if kind not in CONFIGS:
        raise ValueError(f"unknown tiny model {kind!r}; known: {', '.join(CONFIGS)}, gdn@BLOCK")
    return CONFIGS[kind]


def model_dir(kind: str, root: Path | None = None) -> Path:
    """A directory holding the tiny ``kind`` model, its tokenizer and chat template (built once)."""
    _config(kind)  # refuses an unknown kind
    fingerprint = _fingerprint(kind)
    target = (root or cache_dir() / "engine-models") / f"{kind.replace('@', '-b')}-{fingerprint[:16]}"
    stamp = target / "boundary-model.json"
    if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")).get("fingerprint") == fingerprint:
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    _build(kind, staging)
    (staging / "boundary-model.json").write_text(
        json.dumps({"kind": kind, "fingerprint": fingerprint, "seed": SEED}), encoding="utf-8"
    )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)  # a crash mid-build leaves only the staging directory
    return target


def _fingerprint(kind: str) -> str:
    family = boundary.load_family(FAMILY)
    parts = {
        "config": _config(kind),
        "seed": SEED,
        "recurrent_out_scale": RECURRENT_OUT_SCALE,
        "recurrent_a_log": RECURRENT_A_LOG,
        "template": family.template(VARIANT),
        "vocabulary": family.tokenizer.source,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


def _build(kind: str, target: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(_config(kind))
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        suffix = RECURRENT_OUT[kind.partition("@")[0]]
        scaled = [w for name, w in model.named_parameters() if name.endswith(suffix)]
        if not scaled:
            raise RuntimeError(f"no recurrent output projection in the {kind} model")
        for weight in scaled:
            weight.mul_(RECURRENT_OUT_SCALE)
        for name, weight in model.named_parameters():
            if name.endswith(".A_log"):
                weight.fill_(RECURRENT_A_LOG)
    model.save_pretrained(target)
    family = boundary.load_family(FAMILY)
    family.tokenizer.to_transformers(family.template(VARIANT)).save_pretrained(target)
