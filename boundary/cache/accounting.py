"""Bytes from a model description: what one attention block and one recurrent state cost.

Where it sits: the bottom of the cache model: geometry and bytes, read by the cache and the
experiment.

``ModelDescription`` is the physics of a hybrid model (layer counts, KV heads, recurrent-state
shapes, dtypes, active parameters). ``align_mode_geometry`` lays it out the way vLLM 0.33.0
does in Mamba "align" mode:

- ``platforms/interface.py: _align_hybrid_block_size`` inflates the attention block size to
  the smallest multiple of the kernel block alignment whose per-layer attention page holds
  one per-layer recurrent state, and pads the recurrent page up to it;
- ``v1/core/kv_cache_planning.py: _get_kv_cache_groups_uniform_page_size`` splits layers into
  groups of equal size (the smaller layer count, or the larger when it is under 1.5x the
  smaller, padding the last group), every group drawing whole blocks from one pool;
- so one cached attention block costs ``attention_groups`` pages of ``group_size`` layers, and
  one recurrent state ``recurrent_groups`` such pages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class RecurrentKind(StrEnum):
    GATED_DELTA_NET = "gated_delta_net"  # Qwen3-Next / Qwen3.5 linear attention
    MAMBA2 = "mamba2"  # Nemotron-H / Nemotron 3


@dataclass(frozen=True, slots=True)
class RecurrentState:
    """One layer's recurrent state: a convolution window plus the temporal (SSM) state.

    Shapes follow vLLM's ``MambaStateShapeCalculator`` (tensor parallel size 1, no
    speculative tokens); ``flops_per_token`` is the per-layer state update cost used by the
    prefill cost model (an estimate: three ``heads x d_k x d_v`` products per token).
    """

    kind: RecurrentKind
    conv_elements: int
    conv_dtype_bytes: int
    temporal_elements: int
    temporal_dtype_bytes: int
    flops_per_token: int

    @property
    def bytes(self) -> int:
        return self.conv_elements * self.conv_dtype_bytes + self.temporal_elements * self.temporal_dtype_bytes

    # The two constructors mirror vLLM's ``MambaStateShapeCalculator`` one for one (alike by
    # design: each is checked against its vLLM counterpart); ``_shaped`` holds what they share.
    @classmethod
    def gated_delta_net(
        cls,
        *,
        num_k_heads: int,
        num_v_heads: int,
        head_k_dim: int,
        head_v_dim: int,
        conv_kernel: int,
        conv_dtype_bytes: int,
        ssm_dtype_bytes: int,
    ) -> RecurrentState:
        """``MambaStateShapeCalculator.gated_delta_net_state_shape``."""
        conv_dim = head_k_dim * num_k_heads * 2 + head_v_dim * num_v_heads
        temporal = num_v_heads * head_v_dim * head_k_dim
        return cls._shaped(
            RecurrentKind.GATED_DELTA_NET, conv_dim, conv_kernel, temporal, conv_dtype_bytes, ssm_dtype_bytes
        )

    @classmethod
    def mamba2(
        cls,
        *,
        num_heads: int,
        head_dim: int,
        state_size: int,
        n_groups: int,
        conv_kernel: int,
        conv_dtype_bytes: int,
        ssm_dtype_bytes: int,
    ) -> RecurrentState:
        """``MambaStateShapeCalculator.mamba2_state_shape`` (intermediate size = heads x head_dim)."""
        conv_dim = num_heads * head_dim + 2 * n_groups * state_size
        temporal = num_heads * head_dim * state_size
        return cls._shaped(
            RecurrentKind.MAMBA2, conv_dim, conv_kernel, temporal, conv_dtype_bytes, ssm_dtype_bytes
        )

    @classmethod
    def _shaped(
        cls,
        kind: RecurrentKind,
        conv_dim: int,
        conv_kernel: int,
        temporal: int,
        conv_dtype_bytes: int,
        ssm_dtype_bytes: int,
    ) -> RecurrentState:
        """The state from its dimensions: a convolution window of ``conv_kernel - 1`` inputs of
        ``conv_dim`` channels, and ``temporal`` elements of temporal state costing 6 FLOPs each per token."""
        return cls(
            kind, conv_dim * (conv_kernel - 1), conv_dtype_bytes, temporal, ssm_dtype_bytes, 6 * temporal
        )


@dataclass(frozen=True, slots=True)
class ModelDescription:
    """A hybrid model, as much of it as cache bytes and prefill FLOPs need.

    Invariants: ``attention_layers + recurrent_layers <= num_layers`` (the rest carry no
    cache: MoE / MLP layers); every count and size is positive.
    """

    name: str
    num_layers: int
    attention_layers: int
    recurrent_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    kv_dtype_bytes: int
    recurrent: RecurrentState
    active_params: int
    source: str = ""

    def __post_init__(self) -> None:
        if self.attention_layers < 1 or self.recurrent_layers < 1:
            raise ValueError(f"{self.name}: a hybrid model needs attention and recurrent layers")
        if self.attention_layers + self.recurrent_layers > self.num_layers:
            raise ValueError(f"{self.name}: more cache layers than layers")

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        """K and V of one token in one attention layer (``FullAttentionSpec.page_size_bytes`` / block)."""
        return 2 * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self.kv_bytes_per_token_per_layer * self.attention_layers

    @property
    def recurrent_state_bytes(self) -> int:
        """One checkpoint: every recurrent layer's state, unpadded."""
        return self.recurrent.bytes * self.recurrent_layers


@dataclass(frozen=True, slots=True)
class CacheGeometry:
    """vLLM align-mode layout of one model at one ``prefix_match_unit``.

    Invariants: ``block_size % unit == 0``; ``page_bytes >= `` the per-layer recurrent state
    (padded up to it); a cache hit lands on a multiple of ``unit`` when ``unit < block_size``
    (fine-grained hits) and on a multiple of ``block_size`` otherwise, which is the same rule
    since then ``unit == block_size``.
    """

    block_size: int
    unit: int
    page_bytes: int
    group_size: int
    attention_groups: int
    recurrent_groups: int

    def __post_init__(self) -> None:
        if self.unit < 1 or self.block_size % self.unit:
            raise ValueError(
                f"prefix_match_unit={self.unit} must divide the block size {self.block_size} "
                "(vLLM: block sizes must be divisible by prefix_match_unit)"
            )

    @property
    def fine_grained(self) -> bool:
        """Sub-block hits (vLLM ``partial_hash_hits_enabled``): align-mode Mamba with block > unit."""
        return self.unit < self.block_size

    @property
    def units_per_block(self) -> int:
        return self.block_size // self.unit

    @property
    def block_bytes(self) -> int:
        """One attention block (``block_size`` tokens of every attention layer)."""
        return self.page_bytes * self.group_size * self.attention_groups

    @property
    def pool_page_bytes(self) -> int:
        """One block id of vLLM's pool: a page in each of the ``group_size`` shared tensors. An
        attention block takes ``attention_groups`` of them, a state ``recurrent_groups``."""
        return self.page_bytes * self.group_size

    @property
    def state_bytes(self) -> int:
        """One recurrent state (every recurrent layer, padded pages)."""
        return self.page_bytes * self.group_size * self.recurrent_groups


def minimum_block_size(model: ModelDescription, kernel_block_alignment: int = 16) -> int:
    """The attention block size vLLM picks in align mode (``_align_hybrid_block_size``)."""
    per_token = model.kv_bytes_per_token_per_layer
    return kernel_block_alignment * cdiv(model.recurrent.bytes, kernel_block_alignment * per_token)


@dataclass(frozen=True, slots=True)
class GroupLayout:
    """How vLLM splits a hybrid model's cache layers into equal-size groups."""

    group_size: int
    attention_groups: int
    recurrent_groups: int


def group_layout(model: ModelDescription) -> GroupLayout:
    small = min(model.attention_layers, model.recurrent_layers)
    large = max(model.attention_layers, model.recurrent_layers)
    size = large if large < small * 1.5 else small
    return GroupLayout(size, cdiv(model.attention_layers, size), cdiv(model.recurrent_layers, size))


def align_mode_geometry(
    model: ModelDescription,
    unit: int | None = None,
    *,
    block_size: int | None = None,
    kernel_block_alignment: int = 16,
) -> CacheGeometry:
    """The layout for ``prefix_match_unit=unit`` (default: the block size, vLLM's default).

    ``block_size`` overrides the block size the way ``--block-size`` does: vLLM raises a
    smaller one to the minimum; here that is an error, so a sweep never silently changes it.
    """
    minimum = minimum_block_size(model, kernel_block_alignment)
    block = minimum if block_size is None else block_size
    if block < minimum:
        raise ValueError(f"block size {block} is below {model.name}'s align-mode minimum {minimum}")
    if block % kernel_block_alignment:
        raise ValueError(
            f"block size {block} is not a multiple of the kernel block size {kernel_block_alignment}"
        )
    groups = group_layout(model)
    page = block * model.kv_bytes_per_token_per_layer
    return CacheGeometry(
        block,
        block if unit is None else unit,
        page,
        groups.group_size,
        groups.attention_groups,
        groups.recurrent_groups,
    )


def geometry_for_unit(
    model: ModelDescription, unit: int, *, kernel_block_alignment: int = 16
) -> CacheGeometry:
    """One point of a ``prefix_match_unit`` sweep. A unit that divides the model's align-mode
    block size keeps it; otherwise the block grows to the smallest size vLLM would accept
    with that unit (``--block-size``: a multiple of both the unit and the kernel block, at
    least the minimum), so a block-sized unit such as 2096 is its own block size."""
    minimum = minimum_block_size(model, kernel_block_alignment)
    if minimum % unit == 0:
        return align_mode_geometry(model, unit, kernel_block_alignment=kernel_block_alignment)
    step = math.lcm(unit, kernel_block_alignment)
    block = step * cdiv(minimum, step)
    return align_mode_geometry(model, unit, block_size=block, kernel_block_alignment=kernel_block_alignment)
