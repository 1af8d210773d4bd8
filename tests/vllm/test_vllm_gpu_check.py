"""The prepared GPU check (``integrations/vllm/gpu_check.py``): its verdict is the vLLM pass's
(the transformers path is reported beside it), its stream holds transformers' renderings and hits
no earlier request could not have served, the replay behind those hits gives hand-worked hits on
a small stream, and its transformers path (reuse against a full prefill) runs here on CPU with
the tiny model. The vLLM pass runs on the CPU build in the engine tier
(``tests/engine/test_engine_gpu_check.py``); the GPU run itself is not part of CI."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

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


def test_the_streams_prompts_are_transformers_renderings_with_u_end_at_the_history_end(gpu_check):
    """Oracle: transformers' apply_chat_template over the same tau-bench messages (Qwen3.5
    template and vocabulary, enable_thinking=True), with and without the generation prompt."""
    from boundary_vllm.workload import with_reasoning

    from boundary.shipped.datasets import tau_bench_airline
    from tests.support import family, reference_tokenizer

    stream = gpu_check.load_stream()
    fam = family("qwen3_5")
    hf = reference_tokenizer("qwen3_5", fam.default_variant)
    im_end = hf.convert_tokens_to_ids("<|im_end|>")
    for conversation in (0, 5):
        stored = [r for r in stream["requests"] if r["conversation"] == conversation]
        messages = with_reasoning(tau_bench_airline()[conversation][: gpu_check.SLICE["messages"]])
        assert [r["message"] for r in stored] == [
            i for i, m in enumerate(messages) if m["role"] == "assistant"
        ]
        for record in stored:
            prepared, _ = fam.prepare(messages[: record["message"]])
            ids = hf.apply_chat_template(
                prepared, add_generation_prompt=True, tokenize=True, return_dict=False, enable_thinking=True
            )
            history = hf.apply_chat_template(
                prepared, add_generation_prompt=False, tokenize=True, return_dict=False, enable_thinking=True
            )
            assert record["prompt"] == ids
            assert record["input_end"] == len(history) and ids[: len(history)] == history
            assert record["output"][-1] == record["stop"] == im_end


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_the_streams_hits_are_block_aligned_prefixes_an_earlier_request_computed(gpu_check):
    """A property of every stored hit: a multiple of the block, never the prompt's last token,
    and within the longest prefix of the prompt some earlier request of the stream computed
    (prompt and output), worked out here from the token ids alone."""
    stream = gpu_check.load_stream()
    block = stream["block_size"]
    earlier: list[list[int]] = []
    for record in stream["requests"]:
        prompt = record["prompt"]
        computed = max((_shared(seq, prompt) for seq in earlier), default=0)
        for policy in gpu_check.POLICIES:
            hit = record["hits"][policy]["tokens"]
            assert hit % block == 0 and hit <= min(computed, len(prompt) - 1), (record["message"], policy)
        earlier.append(prompt + record["output"][:-1])
    assert any(r["hits"]["both"]["tokens"] > r["hits"]["main_sparse"]["tokens"] for r in stream["requests"])


# A three-request stream whose hits are worked out by hand (block 16, stop token 7):
# A: a 40-token prompt with U_end 20; it generates 9 tokens and the stop (D_end 49).
# B: A's prompt and output, then 20 new tokens. C: A's first 20 tokens, then 30 others.
_P = tuple(range(1000, 1040))
_O = (*range(2000, 2009), 7)
HAND_STREAM = [
    (_P, _O, 20),
    (_P + _O + tuple(range(3000, 3020)), (5000, 7), None),
    (_P[:20] + tuple(range(4000, 4030)), (6000, 7), None),
]
# Per policy, each request's hit: A misses. B resumes from A's P_end block (floor(40/16)*16 = 32:
# the twin every policy keeps) or, where D_end is kept, from floor(49/16)*16 = 48. C shares
# only A's first 20 tokens: U_end's block, floor(20/16)*16 = 16, where U_end is kept, else nothing.
HAND_HITS = {
    "main_sparse": [0, 32, 0],
    "input_end": [0, 32, 16],
    "decode_end": [0, 48, 0],
    "both": [0, 48, 16],
}


@pytest.mark.vllm
def test_the_replay_behind_the_streams_hits_gives_the_hits_worked_out_by_hand(gpu_check):
    """The hits in the stream come from this replay (``gpu_check.prepare``: block 16, one fresh
    engine per policy, the stop token as the only stop id)."""
    from boundary_vllm.replay import EngineShape, Replay, ReplayRequest

    from boundary.checkpoints.retention import PHASE_ONE, Variant

    requests = [ReplayRequest(p, o, u, (7,)) for p, o, u in HAND_STREAM]
    assert set(HAND_HITS) == set(gpu_check.POLICIES)
    assert tuple(v.value for v in PHASE_ONE) == gpu_check.POLICIES  # the policy module's names
    for policy, expected in HAND_HITS.items():
        outcomes = Replay(EngineShape(block_size=16, policy=Variant(policy))).run_all(requests)
        assert [o.hit_tokens for o in outcomes] == expected, policy


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
    assert gpu_check._transformers_verdict(result) == "reuse matches full prefill"


def test_a_run_writes_its_report_and_says_why_the_vllm_path_did_not_run(gpu_check, tmp_path):
    report = gpu_check.run(tmp_path, budget_s=60, device="cpu", tiny=True, engines=("vllm",))
    assert report["results"]["vllm"]["status"] == "not run"
    assert "GPU" in report["results"]["vllm"]["reason"]
    assert report["verdict"].startswith("not run") and gpu_check.exit_status(report["verdict"]) == 2
    assert json.loads((tmp_path / "gpu_check.json").read_text())["results"] == report["results"]


def _model(disagreements=(), *, cached=100, complete=True, status="ran"):
    passes = {"cache_off": {"cached_tokens": 0}, "both": {"cached_tokens": cached}}
    return {"status": status, "complete": complete, "passes": passes, "disagreements": list(disagreements)}


def _vllm(**models):
    return {"path": "vllm", "models": models}


def test_the_verdict_is_the_vllm_pass_whatever_the_transformers_path_says(gpu_check):
    """Exit status 0 only when every model ran, reused something and agreed with computing from
    scratch; 1 when a reused state gave other outputs; 2 when nothing was checked."""
    cases = {
        gpu_check.AGREE: _vllm(gdn=_model(), mamba2=_model()),
        gpu_check.AGREE + " (not every variant ran within the budget)": _vllm(gdn=_model(complete=False)),
    }
    for expected, result in cases.items():
        assert gpu_check._verdict(result) == expected and gpu_check.exit_status(expected) == 0
    bad = gpu_check._verdict(_vllm(gdn=_model(), mamba2=_model(["both session 0 request 2 (hit 1312, ...)"])))
    assert bad.startswith(gpu_check.DISAGREE) and "mamba2: 1 requests (both session 0" in bad
    assert gpu_check.exit_status(bad) == 1
    for result in (
        None,
        {"path": "vllm", "status": "not run", "reason": "no GPU"},
        {"path": "vllm", "status": "failed", "error": "RuntimeError()"},
        _vllm(gdn=_model(), mamba2={"status": "failed", "error": "boom"}),
        _vllm(gdn=_model(cached=0)),
    ):
        assert gpu_check.exit_status(gpu_check._verdict(result)) == 2, result
