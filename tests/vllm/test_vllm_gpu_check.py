"""The prepared GPU check (``integrations/vllm/gpu_check.py``): its stream is current, and its
transformers path runs here on CPU with the tiny model. The GPU run itself is not part of CI."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.vllm.streams import turns

SCRIPT = Path(__file__).resolve().parents[2] / "integrations" / "vllm" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_the_stream_file_is_small_enough_to_upload(gpu_check):
    assert gpu_check.STREAM.stat().st_size < 1 << 20


def test_the_stream_holds_todays_renderings(gpu_check):
    stream = gpu_check.load_stream()
    stored = [r for r in stream["requests"] if r["conversation"] == 0]
    fresh = turns(0)
    assert [(r["message"], r["prompt"], r["output"], r["input_end"]) for r in stored] == [
        (t.index, t.prompt.token_ids, t.output.token_ids, t.prompt.u_end) for t in fresh
    ]


@pytest.mark.vllm
def test_the_stream_holds_todays_vllm_hits(gpu_check):
    from boundary_vllm.replay import EngineShape, ReplayRequest, replay
    from boundary_vllm.settings import Policy

    stream = gpu_check.load_stream()
    stored = [r for r in stream["requests"] if r["conversation"] == 0]  # first in the stream: its own hits
    requests = [ReplayRequest.from_turn(t) for t in turns(0)]
    for policy in map(Policy, gpu_check.POLICIES):  # the variants the prepared stream holds
        outcomes = replay(requests, EngineShape(block_size=stream["block_size"], policy=policy))
        assert [o.hit_tokens for o in outcomes] == [r["hits"][policy.value]["tokens"] for r in stored]


@pytest.fixture
def one_thread():
    """The CPU reference kernels thrash with more threads than free cores (CI runs two workers on two)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_transformers_path_resumes_from_a_kept_state_with_the_full_prefill_logits(gpu_check, one_thread):
    record = next(r for r in gpu_check.load_stream()["requests"] if r["hits"]["both"]["tokens"] > 0)
    result = gpu_check.transformers_check(
        {"requests": [record]}, device="cpu", dtype="float32", shape=gpu_check.TINY, deadline=float("inf")
    )
    assert result["complete"]
    summary = result["summary"]["both"]
    assert summary["hits"] == summary["last_argmax_equal"] == summary["greedy_equal"] == 1
    assert summary["max_logit_diff"] < 1e-4
    assert gpu_check._verdict(result) == "reuse matches full prefill"


def test_a_run_writes_its_report_and_says_why_the_vllm_path_did_not_run(gpu_check, tmp_path):
    report = gpu_check.run(tmp_path, budget_s=60, device="cpu", tiny=True, engines=("vllm",))
    assert report["results"]["vllm"]["status"] == "not run"
    assert "GPU" in report["results"]["vllm"]["reason"]
    assert report["verdict"] == "not run"
    assert json.loads((tmp_path / "gpu_check.json").read_text())["results"] == report["results"]
