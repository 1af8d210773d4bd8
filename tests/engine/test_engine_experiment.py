"""``boundary experiment --executor engine`` on the CPU engine: tau-bench sessions at a real
target's block (Qwen3-Next-80B-A3B's 544, derived by vLLM from the shaped tiny model) and unit 16,
with a pool sized in the target's pages small enough to evict; the cache model's prediction is
checked against every request the engine served, and one two-request session has a hand-worked
answer."""

from __future__ import annotations

from array import array
from dataclasses import replace

import pytest

from boundary.experiment.stream import Continuation, Stream, StreamRequest
from boundary.prefixes import common_prefix_length
from tests.engine.support import turns

pytestmark = pytest.mark.engine

TARGET = "Qwen3-Next-80B-A3B"
UNIT = 16
POLICIES = ("main_sparse", "decode_end", "both")
GIB = 2**30


def target_geometry():
    from boundary.cache.accounting import geometry_for_unit, minimum_block_size
    from boundary.experiment.presets import PRESETS

    model = PRESETS[TARGET]
    return replace(geometry_for_unit(model, minimum_block_size(model)), unit=UNIT)


def capacity_for(pages: int) -> float:
    """The GiB in which the target's pool has ``pages`` pages (half a page over, for rounding)."""
    return (pages + 0.5) * target_geometry().pool_page_bytes / GIB


def stream_of(sessions) -> Stream:
    """Sessions of rendered turns as the experiment's stream, with the hints a frontend sends."""
    requests = []
    for s, ts in enumerate(sessions):
        for k, t in enumerate(ts):
            n, output = len(t.prompt.token_ids), t.output.token_ids
            later = ts[k + 1] if k + 1 < len(ts) else None
            stops = output[-1] == t.output.stop_token_id
            requests.append(
                StreamRequest(
                    rid=len(requests),
                    session=f"s{s}",
                    turn=k,
                    tokens=array("I", t.tokens),
                    num_prompt_tokens=n,
                    u_end=t.prompt.u_end,
                    d_end=n + len(output) - stops,
                    continuation=Continuation.FIRST if k == 0 else Continuation.TOOL,
                    round_trip=t.next_role == "tool",
                    horizon=None if later is None else common_prefix_length(t.tokens, later.prompt.token_ids),
                )
            )
    return Stream("tau_bench slice", {"workload": "tau_bench"}, requests)


@pytest.fixture(scope="module")
def result():
    from boundary_vllm.engine_experiment import EngineExperimentConfig, run_engine_experiment

    stream = stream_of([turns(0, 8), turns(3, 6)])
    config = EngineExperimentConfig(
        policies=POLICIES, units=(UNIT,), capacity_gib=capacity_for(21), concurrency=2
    )
    return run_engine_experiment(stream, target_geometry(), config)


def test_the_engine_runs_at_the_targets_block_and_pool(result):
    unit = result["units"][0]
    assert unit["block_size"] == 544 and unit["engine_layout"]["block_size"] == 544
    assert unit["pages"] == 21 and unit["engine_layout"]["num_blocks"] == 22  # and vLLM's null block
    assert [r["policy"] for r in unit["runs"]] == list(POLICIES)
    assert {r["executor"] for r in unit["runs"]} == {"engine"}


def test_the_pool_evicts(result):
    runs = {r["policy"]: r for r in result["units"][0]["runs"]}
    assert runs["main_sparse"]["evictions"] > 0 and runs["both"]["evictions"] > 0
    for r in runs.values():
        assert not r["preempted"]
        assert 0 < r["reused_tokens"] <= r["oracle_tokens"]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_model_predicts_every_hit_the_engine_served(result, policy):
    run = next(r for r in result["units"][0]["runs"] if r["policy"] == policy)
    assert run["model_agreement"] == 1.0, run["first_disagreements"]
    assert run["model_reused_tokens"] == run["reused_tokens"]


def test_a_hand_worked_session():
    """One prompt of 1,200 tokens, then the same 1,200 and 100 more: under main_sparse the second
    request resumes from the first's prompt-end state, which vLLM keeps at the deepest unit
    boundary before that prompt's last token, 16 x floor(1,199 / 16) = 1,184 tokens, while the
    oracle reuses all 1,200; the model predicts 1,184."""
    from boundary_vllm.engine_experiment import EngineExperimentConfig, run_engine_experiment

    first = list(range(1000, 2200))
    output = [7, 8, 9, 10]
    requests = [
        StreamRequest(0, "s", 0, array("I", first + output), 1200, None, 1204, Continuation.FIRST),
        StreamRequest(
            1,
            "s",
            1,
            array("I", first + list(range(5000, 5100)) + output),
            1300,
            None,
            1304,
            Continuation.USER,
        ),
    ]
    config = EngineExperimentConfig(
        policies=("main_sparse",), units=(UNIT,), capacity_gib=capacity_for(40), concurrency=1
    )
    run = run_engine_experiment(Stream("hand", {}, requests), target_geometry(), config)["units"][0]["runs"][
        0
    ]
    assert run["reused_tokens"] == 1184 and run["model_reused_tokens"] == 1184
    assert run["served_by"] == {"miss": 1, "prompt_end": 1}
    assert run["oracle_tokens"] == 1200
