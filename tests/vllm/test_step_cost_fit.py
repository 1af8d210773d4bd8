"""The step cost fit (``boundary_vllm.step_costs.fit``) on synthetic samples: constants known
by construction, so the fitting and its stability verdict are checked without timing anything
(measured step times are the benchmark's, ``benchmarks/calibrate_steps.py``)."""

from __future__ import annotations

import pytest
from boundary_vllm.step_costs import StepSamples, fit


def samples(step: float, per_token: float, base: float, per_seq: float, noise: float = 0.0) -> StepSamples:
    """Exact step times of the load model's form; ``noise`` moves alternate points up and down."""
    sign = [1.0, -1.0, 1.0, -1.0]
    sizes, batches = (256, 512, 1024, 2048), (1, 2, 4, 8)
    prefill = {n: (step + per_token * n) * (1 + noise * sign[i]) for i, n in enumerate(sizes)}
    decode = {b: (step + base + per_seq * b) * (1 + noise * sign[i]) for i, b in enumerate(batches)}
    return StepSamples(prefill, decode)


def test_the_fit_recovers_the_constants_of_exact_samples():
    f = fit(samples(0.002, 2e-5, 0.006, 1e-4))
    assert f.step_overhead_seconds == pytest.approx(0.002)
    assert f.prefill_seconds_per_token == pytest.approx(2e-5)
    assert f.decode_base_seconds == pytest.approx(0.006)
    assert f.decode_seconds_per_sequence == pytest.approx(1e-4)
    assert f.prefill_max_relative_residual == pytest.approx(0.0, abs=1e-9)
    assert f.decode_max_relative_residual == pytest.approx(0.0, abs=1e-9)
    assert f.instabilities() == []


def test_a_fit_with_a_large_residual_is_reported_unstable():
    f = fit(samples(0.002, 2e-5, 0.006, 1e-4, noise=0.4))
    assert f.prefill_max_relative_residual > 0.25
    reasons = f.instabilities()
    assert any(r.startswith("prefill residual") for r in reasons)
    assert any(r.startswith("decode residual") for r in reasons)


def test_constants_of_the_wrong_sign_are_reported_unstable():
    # prefill that gets cheaper per token than free (negative step overhead), decode per sequence
    # dearer than the fixed decode cost
    f = fit(samples(-0.001, 2e-5, 0.002, 0.01))
    reasons = f.instabilities(largest_batch=8)
    assert any(r.startswith("step overhead") for r in reasons)
    assert any(r.startswith("decode per sequence") for r in reasons)
    assert not any("residual" in r for r in reasons)


def test_a_small_negative_decode_slope_is_noise_not_instability():
    f = fit(samples(0.002, 2e-5, 0.006, -0.00005))  # -0.05 ms against the bound -0.1 ms
    assert f.instabilities(largest_batch=8) == []
    assert fit(samples(0.002, 2e-5, 0.006, -0.0002)).instabilities(largest_batch=8)
