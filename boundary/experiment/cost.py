"""The prefill cost model: FLOPs from the model description, and a labelled TTFT estimate.

Where it sits: in the experiment, beside the replay: the prefill cost each ``RequestRecord``
carries; ``replay``, ``arrivals``, ``harness``, ``sweep`` and ``boundary.cli.experiment`` read
it.

The token at position ``t`` costs, in a forward pass,

- ``2 * active_params``: one multiply-add per active weight (MoE: routed + shared experts);
- ``4 * num_attention_heads * head_dim * t`` per full-attention layer: ``Q K^T`` and the
  weighted sum over the ``t`` tokens before it (causal);
- ``recurrent.flops_per_token`` per recurrent layer: the state update and readout.

So prefilling ``[start, end)`` costs ``a * (end - start) + b * sum(t for t in [start, end))``
with ``a`` the position-independent part and ``b`` the per-position attention part. The
estimated time divides by ``peak_flops * utilization`` (an H200's dense BF16 peak and a
utilization typical of long prefills by default). TTFT here is that estimate, not a
measurement: no queueing, no kernel launch overhead, no memory-bound phases.
"""

from __future__ import annotations

from dataclasses import dataclass

from boundary.cache.accounting import ModelDescription

H200_BF16_DENSE_FLOPS = 989e12


@dataclass(frozen=True, slots=True)
class PrefillCostModel:
    model: ModelDescription
    peak_flops: float = H200_BF16_DENSE_FLOPS
    utilization: float = 0.4
    decode_seconds_per_token: float = 0.02

    @property
    def flops_per_token(self) -> float:
        m = self.model
        return 2.0 * m.active_params + m.recurrent_layers * m.recurrent.flops_per_token

    @property
    def flops_per_position(self) -> float:
        m = self.model
        return 4.0 * m.attention_layers * m.num_attention_heads * m.head_dim

    def flops(self, start: int, end: int) -> float:
        """FLOPs to prefill positions ``[start, end)``."""
        if end <= start:
            return 0.0
        positions = end * (end - 1) / 2 - start * (start - 1) / 2
        return self.flops_per_token * (end - start) + self.flops_per_position * positions

    def seconds(self, start: int, end: int) -> float:
        """Estimated time to prefill ``[start, end)`` (labelled an estimate wherever shown)."""
        return self.flops(start, end) / (self.peak_flops * self.utilization)

    def decode_seconds(self, tokens: int) -> float:
        return tokens * self.decode_seconds_per_token

    def describe(self) -> dict[str, float | str]:
        return {
            "model": self.model.name,
            "flops_per_token": self.flops_per_token,
            "flops_per_position": self.flops_per_position,
            "peak_flops": self.peak_flops,
            "utilization": self.utilization,
            "decode_seconds_per_token": self.decode_seconds_per_token,
        }
