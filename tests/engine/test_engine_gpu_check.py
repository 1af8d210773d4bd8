"""The GPU check's verdict, its vLLM pass (``integrations/vllm/gpu_check.py``), run here on the
CPU build: the same scenarios as the engine benchmark through a real engine at unit 16, written
to one JSON with per-request hits, output equality and time to first token.

On the CPU build the pass runs the synchronous ``BoundaryScheduler`` (no async scheduling) and
the Gated DeltaNet model only, and its kernels never export a prompt checkpoint: this tests the
check, not the GPU. Its own engine, on a two-session slice.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

SCRIPT = Path(__file__).resolve().parents[2] / "integrations" / "vllm" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(gpu_check, engine_model, tmp_path_factory):
    from boundary_vllm.scenarios import Slice

    out = tmp_path_factory.mktemp("gpu-check")
    # a tool loop whose third turn is forced (conversation 0) beside a short chat (11)
    spec = Slice(((0, 10), (11, 4)), concurrency=2)
    report = gpu_check.run(out, budget_s=600, device="cpu", engines=("vllm",), spec=spec)
    return report, out


def test_the_vllm_pass_is_the_verdict_and_reuse_matches_computing_from_scratch(gpu_check, report):
    report, out = report
    result = report["results"]["vllm"]
    assert result["prefix_match_unit"] == 16
    gdn = result["models"]["gdn"]
    assert gdn["status"] == "ran" and gdn["complete"], gdn.get("traceback")
    assert gdn["scheduler"] == "BoundaryScheduler"  # the CPU build; AsyncBoundaryScheduler on a GPU
    assert report["verdict"] == gpu_check.AGREE and gpu_check.exit_status(report["verdict"]) == 0
    assert report["transformers_verdict"] == "not run"
    assert json.loads((out / "gpu_check.json").read_text())["verdict"] == report["verdict"]


def test_each_request_has_its_hit_the_predicted_hit_output_equality_and_ttft(report):
    report, _ = report
    gdn = report["results"]["vllm"]["models"]["gdn"]
    assert set(gdn["passes"]) == {
        "cache_off",
        "main_sparse",
        "input_end",
        "decode_end",
        "both",
        "chat_aware",
        "horizon",
    }
    for name, rows in gdn["requests"].items():
        assert len(rows) == 5  # four turns and one
        for row in rows:
            assert row["ttft_s"] > 0
            if name == "cache_off":
                assert row["cached_tokens"] == 0
                continue
            assert row["agrees"] and row["predicted_hit"] == row["cached_tokens"], row
        if name != "cache_off":
            assert sum(r["cached_tokens"] > 0 for r in rows) >= 2, name
    assert gdn["hit_differences"] == [] and gdn["disagreements"] == []
    forced = [r for r in gdn["requests"]["both"] if r["forced"]]
    assert forced and all(r["forced_as_written"] for r in forced)  # a tool-loop turn wrote its own tokens
    assert gdn["passes"]["main_sparse"]["ratios"]["cache_off"]["prefill_tokens"] < 0.5
