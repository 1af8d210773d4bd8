"""Counters, and their Prometheus export.

``prometheus_client`` comes with vLLM, not with boundary's base and test extras: only the export
test needs it, and it skips with the reason when it is absent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from boundary_vllm.counters import MISS, CheckpointCounters, PrometheusExport

from boundary.checkpoints.kinds import CheckpointKind

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """A sample of an export without engine labels (both are then empty)."""
    return registry.get_sample_value(name, {"model_name": "", "engine": "", **labels})


def test_the_export_adds_only_what_changed_since_the_last_snapshot():
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed (the vllm extra brings it)"
    )
    registry = prometheus_client.CollectorRegistry()
    export = PrometheusExport(registry)
    counters = CheckpointCounters()
    counters.record_created(CheckpointKind.INPUT_END, 1000, new_checkpoint=True)
    counters.record_hit(CheckpointKind.INPUT_END, 1312)
    counters.record_hit(MISS, 0)
    counters.forced_splits = 1
    counters.hints["accepted"] = 2
    counters.retained_bytes = {"input_end": 1000}
    before = CheckpointCounters()
    export.add(counters, before, decode_end_consumable=True)
    snapshot = counters.snapshot()
    counters.record_hit(CheckpointKind.INPUT_END, 16)
    export.add(counters, snapshot, decode_end_consumable=False)

    assert sample(registry, "boundary_checkpoints_created_total", kind="input_end") == 1
    assert sample(registry, "boundary_checkpoint_bytes_retained_total", kind="input_end") == 1000
    assert sample(registry, "boundary_prefix_hits_total", kind="input_end") == 2
    assert sample(registry, "boundary_prefix_hit_tokens_total", kind="input_end") == 1328
    assert sample(registry, "boundary_prefix_hits_total", kind=MISS) == 1
    assert sample(registry, "boundary_forced_splits_total") == 1
    assert sample(registry, "boundary_requests_total", hints="accepted") == 2
    assert sample(registry, "boundary_retained_bytes", kind="input_end") == 1000
    assert sample(registry, "boundary_decode_end_consumable") == 0


def test_the_summary_line_names_every_counter():
    counters = CheckpointCounters()
    counters.record_created(CheckpointKind.DECODE_END, 64, new_checkpoint=True)
    line = counters.summary()
    for part in ("checkpoints created: decode_end=1", "hits: none", "forced splits: 0", "retained bytes"):
        assert part in line


def test_a_kind_no_longer_held_reads_zero_and_engines_stay_apart():
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed (the vllm extra brings it)"
    )
    registry = prometheus_client.CollectorRegistry()
    export = PrometheusExport(registry)
    held = CheckpointCounters(retained_bytes={"decode_end": 4096})
    a = {"model_name": "m", "engine": "0"}
    b = {"model_name": "m", "engine": "1"}
    export.add(held, CheckpointCounters(), decode_end_consumable=True, labels=a)
    export.add(held, CheckpointCounters(), decode_end_consumable=True, labels=b)
    export.add(CheckpointCounters(), held, decode_end_consumable=True, labels=a)  # evicted, or a reset
    assert registry.get_sample_value("boundary_retained_bytes", {**a, "kind": "decode_end"}) == 0
    assert registry.get_sample_value("boundary_retained_bytes", {**b, "kind": "decode_end"}) == 4096
