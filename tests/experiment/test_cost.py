"""The prefill cost model."""

from __future__ import annotations

import pytest

from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.presets import QWEN3_5_35B_A3B


def test_prefill_flops_add_up_over_chunks():
    cost = PrefillCostModel(QWEN3_5_35B_A3B)
    assert cost.flops(0, 3000) + cost.flops(3000, 5000) == pytest.approx(cost.flops(0, 5000))
    assert cost.flops(100, 100) == 0.0


def test_later_positions_cost_more_because_attention_reads_every_earlier_token():
    cost = PrefillCostModel(QWEN3_5_35B_A3B)
    assert cost.flops(9000, 10000) > cost.flops(0, 1000)
    per_token = 2 * QWEN3_5_35B_A3B.active_params + 30 * QWEN3_5_35B_A3B.recurrent.flops_per_token
    assert cost.flops(0, 1) == pytest.approx(per_token)


def test_estimated_time_is_flops_over_effective_throughput():
    cost = PrefillCostModel(QWEN3_5_35B_A3B, peak_flops=1e15, utilization=0.5)
    assert cost.seconds(0, 4096) == pytest.approx(cost.flops(0, 4096) / 5e14)
