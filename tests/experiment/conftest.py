"""Shared experiment fixtures: small synthetic streams (token level) with arrival times."""

from __future__ import annotations

import pytest

from boundary.experiment.arrivals import interleave
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.stream import Stream
from boundary.experiment.workloads import synthetic


def synthetic_stream(sessions: int = 12, *, client: str = "dropped", seed: int = 0, **shape) -> Stream:
    generated = list(
        synthetic.sessions(
            sessions,
            seed=seed,
            client=client,
            shape=synthetic.SyntheticShape(**shape) if shape else synthetic.SyntheticShape(),
        )
    )
    requests = interleave(generated, PrefillCostModel(QWEN3_5_35B_A3B), concurrency=4, seed=seed)
    return Stream("synthetic", {"workload": "synthetic", "client": client, "seed": seed}, requests)


@pytest.fixture
def stream() -> Stream:
    return synthetic_stream()
