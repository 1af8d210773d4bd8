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
utilization typical of long prefills by default). TTFT here is that estimate plus a step's
fixed cost (``step_overhead_seconds``, the load model's, ``boundary.experiment.calibration``)
for every scheduler step the prefill runs in: a forced split (a chunk stopped where a kept
state must be copied out) is one more step, and pays one more. Not a measurement: no
queueing, no memory-bound phases.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from boundary.cache.accounting import ModelDescription
from boundary.experiment.calibration import ASSUMED_H200, StepConstants

H200_BF16_DENSE_FLOPS = 989e12


@dataclass(frozen=True, slots=True)
class PrefillCostModel:
    model: ModelDescription
    peak_flops: float = H200_BF16_DENSE_FLOPS
    utilization: float = 0.4
    decode_seconds_per_token: float = 0.02
    step_overhead_seconds: float = ASSUMED_H200.step_overhead_seconds

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

    def ttft_seconds(self, start: int, end: int, steps: int) -> float:
        """The TTFT estimate of a prefill of ``[start, end)`` run in ``steps`` scheduler steps."""
        return self.seconds(start, end) + steps * self.step_overhead_seconds

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
            "step_overhead_seconds": self.step_overhead_seconds,
        }


@dataclass(frozen=True, slots=True)
class StepCostModel:
    """One scheduler step's time (``boundary.experiment.calibration``): overhead, the decode
    batch's memory-bound cost, the prefill chunks' FLOPs at the prefill model's rate."""

    prefill: PrefillCostModel
    constants: StepConstants = ASSUMED_H200

    def decode_seconds(self, batch: int) -> float:
        """The decode part of a step that advances ``batch`` sequences by one token each."""
        c = self.constants
        return c.decode_base_seconds + c.decode_seconds_per_sequence * batch if batch > 0 else 0.0

    def seconds(self, decode: int, prefill_flops: float) -> float:
        """A step with ``decode`` decoding sequences and ``prefill_flops`` of prefill chunks
        (0 for an empty step)."""
        if decode <= 0 and prefill_flops <= 0:
            return 0.0
        p = self.prefill
        return (
            self.constants.step_overhead_seconds
            + self.decode_seconds(decode)
            + prefill_flops / (p.peak_flops * p.utilization)
        )

    def prefill_tokens_per_second(self, context: int = 0) -> float:
        """Prefill rate for one token at ``context`` earlier positions (the header's figure)."""
        return 1.0 / self.prefill.seconds(context, context + 1)

    def describe(self) -> dict[str, Any]:
        return {
            **self.constants.describe(),
            "prefill_tokens_per_second_at_0": self.prefill_tokens_per_second(0),
            "prefill_tokens_per_second_at_32k": self.prefill_tokens_per_second(32768),
        }


def family_assumptions(models: Iterable[ModelDescription], utilization: float) -> list[dict[str, Any]]:
    """Per model: one recurrent state's bytes (unpadded), the same in KV tokens (a state costs
    as much memory as that many tokens of attention KV), the prefill rate at context 0 and its
    source; every report header lists them."""
    out = []
    for m in models:
        prefill = PrefillCostModel(m, utilization=utilization)
        out.append(
            {
                "model": m.name,
                "recurrent_kind": m.recurrent.kind.value,
                "state_bytes": m.recurrent_state_bytes,
                "kv_bytes_per_token": m.kv_bytes_per_token,
                "state_in_kv_tokens": m.recurrent_state_bytes / m.kv_bytes_per_token,
                "prefill_tokens_per_second": 1.0 / prefill.seconds(0, 1),
                "source": m.source,
            }
        )
    return out
