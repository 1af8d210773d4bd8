"""A whole engine run at the reports' scale, rechecked without the engine: the cache model must
predict every request the engine served.

``data/tau_bench_1056_horizon.json.gz``: vLLM's CPU build with boundary's plugin, shaped to
Qwen3.5-35B-A3B (block 1056, unit 16, a 99-page pool: 2 GiB of the target's), `horizon` over 50
tau-bench sessions (642 requests, five in flight, 3,080 evicted pages), saved by
``benchmarks/engine_experiment.py`` (``boundary_vllm.engine_observations``). The model that kept
a state's three group pages side by side in the free queue missed one request here
(``tau_airline_005``'s turn 8: engine 2,112 tokens, model 4,032): two states copied in one step
interleave their pages in vLLM's queue."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # boundary_vllm is installed with vLLM

RUN = Path(__file__).parent / "data" / "tau_bench_1056_horizon.json.gz"


def test_the_model_predicts_every_request_of_a_recorded_tau_bench_run_at_block_1056():
    from boundary_vllm.engine_observations import load_run, recheck

    run = load_run(RUN)
    assert (run.shape.block_size, run.shape.unit, run.shape.recurrent_groups) == (1056, 16, 3)
    assert run.engine_hits[5][8] == 2112  # the request the model once missed
    result = recheck(run)
    assert (result.requests, result.disagreements) == (642, ())
    assert sum(map(sum, run.engine_hits)) == 2_467_920
