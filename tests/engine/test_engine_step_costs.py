"""The step timer (``boundary_vllm.step_costs.measure``) on a real vLLM engine (CPU build, tiny
GDN model): it times every prefill size and decode batch asked for. No measured time is
asserted: how well the load model's form fits the engine's step times depends on the host and
its load, and ``benchmarks/calibrate_steps.py`` reports it (with ``StepFit.instabilities``);
the fitting itself is checked on synthetic samples (``tests/vllm/test_step_cost_fit.py``)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.engine


def test_every_shape_asked_for_is_timed(engine_model):
    from boundary_vllm.step_costs import fit, measure

    samples = measure(engine_model, (64, 256), (1, 2), repeats=1, decode_steps=2)
    assert sorted(samples.prefill) == [64, 256]
    assert sorted(samples.decode) == [1, 2]
    assert all(t > 0 for t in (*samples.prefill.values(), *samples.decode.values()))
    fit(samples)  # two points each: the fit is determined
