"""The frontend side: one rendering, sent as exactly those tokens plus its boundaries."""

from __future__ import annotations

import json

import pytest
from boundary_vllm.client import UNBOUNDED_OUTPUT, chat_request
from boundary_vllm.hints import (
    HORIZON_KEY,
    INPUT_END_KEY,
    PROMPT_END_KEY,
    ROUND_TRIP_KEY,
    HintStatus,
    decode_hints,
)

from boundary.shipped.datasets import tau_bench_airline
from boundary.verify.roundtrip import ClientHabits
from tests.support import family

MODEL = "Qwen/Qwen3.5-4B"


def request(**kw):
    messages = tau_bench_airline()[11][:4]
    return chat_request(
        family("qwen3_5"),
        messages,
        model=MODEL,
        template_kwargs={"enable_thinking": True},
        max_tokens=64,
        **kw,
    )


def test_the_body_carries_the_rendered_tokens_and_their_boundaries():
    req = request()
    r = req.rendering
    assert req.body["kv_transfer_params"] == {"prompt_token_ids": r.token_ids}
    # Qwen3.5 drops this turn's think block once a new user message arrives: the horizon is U_end
    assert req.body["vllm_xargs"] == {
        INPUT_END_KEY: r.u_end,
        PROMPT_END_KEY: r.p_end,
        ROUND_TRIP_KEY: 0.0,
        HORIZON_KEY: r.u_end,
    }
    assert r.u_end < r.p_end
    assert req.body["chat_template_kwargs"] == {"enable_thinking": True}  # for vLLM's reasoning parser
    assert req.body["messages"] == tau_bench_airline()[11][:4]
    assert req.body["model"] == MODEL and req.body["max_tokens"] == 64
    json.dumps(req.body)  # a plain JSON body


def test_a_template_that_keeps_the_output_sends_an_output_horizon_and_a_round_trip():
    messages = tau_bench_airline()[11][:4]
    req = chat_request(
        family("qwen3_6"),
        messages,
        model=MODEL,
        template_kwargs={"preserve_thinking": True},
        habits=ClientHabits(echo_reasoning=True),
    )
    assert req.body["vllm_xargs"][ROUND_TRIP_KEY] == 1.0
    assert req.body["vllm_xargs"][HORIZON_KEY] == UNBOUNDED_OUTPUT


def test_other_vllm_xargs_are_kept_beside_the_hints():
    req = request(vllm_xargs={"session_id": "abc"})
    assert req.body["vllm_xargs"]["session_id"] == "abc"
    assert req.body["vllm_xargs"][INPUT_END_KEY] == req.rendering.u_end


@pytest.mark.vllm
def test_vllm_accepts_the_body_and_hands_the_hints_to_the_scheduler():
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    req = request()
    parsed = ChatCompletionRequest.model_validate(json.loads(json.dumps(req.body)))
    assert parsed.kv_transfer_params["prompt_token_ids"] == req.rendering.token_ids
    # vLLM's renderer pops the ids before the sampling params are built (online_renderer.py).
    parsed.kv_transfer_params.pop("prompt_token_ids")
    params = parsed.to_sampling_params(64, {})
    hints = decode_hints(params.extra_args, len(req.rendering.token_ids))
    assert hints.status is HintStatus.ACCEPTED and hints.input_end == req.rendering.u_end


def test_the_example_client_prints_the_body_it_would_send(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(tau_bench_airline()[11][:4]))
    script = Path(__file__).resolve().parents[2] / "integrations" / "vllm" / "examples" / "chat_client.py"
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--model",
            MODEL,
            "--messages",
            str(messages),
            "--thinking",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == request().body | {"max_tokens": 512}


def test_a_recorded_request_carries_its_session_and_the_frontend_can_record_the_reply(tmp_path):
    from boundary_vllm.client import finished_from_reply
    from boundary_vllm.hints import SESSION_KEY
    from boundary_vllm.recording import TraceRecorder

    from boundary.trace.reader import read_trace

    assert SESSION_KEY not in request().body["vllm_xargs"]  # recording is opt-in
    assert "return_token_ids" not in request().body
    req = request(session="s1", record=True)
    xargs = req.body["vllm_xargs"]
    assert xargs[SESSION_KEY] == "s1"
    assert all(isinstance(v, str | int | float) for v in xargs.values())  # what vllm_xargs accepts
    assert req.body["return_token_ids"] is True

    def reply(cached: int | None) -> dict:
        details = None if cached is None else {"cached_tokens": cached}  # null: vLLM's default
        return {
            "id": "chatcmpl-1",
            "choices": [{"message": {"role": "assistant", "content": "ok"}, "token_ids": [9, 10]}],
            "usage": {"prompt_tokens": 5, "prompt_tokens_details": details},
        }

    recorder = TraceRecorder(tmp_path / "frontend.jsonl")
    recorder.submit(finished_from_reply(req, reply(128), arrival_s=1764650000.5))
    recorder.submit(finished_from_reply(req, reply(0), arrival_s=1764650001.0))
    recorder.submit(finished_from_reply(req, reply(None), arrival_s=1764650002.0))
    recorder.close()
    assert (recorder.stats.written, recorder.stats.unknown_hits) == (3, 1)
    hit, miss, unknown = read_trace(tmp_path / "frontend.jsonl")  # production records
    assert hit.session == "s1" and hit.output is not None and hit.output.token_ids == [9, 10]
    assert hit.prompt_token_ids == req.rendering.token_ids
    assert (hit.u_end, hit.p_end) == (req.rendering.u_end, req.rendering.p_end)
    assert (hit.hit_tokens, hit.served_by, hit.d_end, hit.policy) == (128, "unattributed", None, None)
    assert (miss.hit_tokens, miss.served_by) == (0, None)
    assert (unknown.hit_tokens, unknown.served_by) == (None, "unknown")  # not reported: never a miss
    assert (hit.arrival_s, miss.arrival_s) == (1764650000.5, 1764650001.0)


def test_cached_tokens_that_are_not_a_count_are_refused_not_recorded():
    from boundary_vllm.client import finished_from_reply

    req = request(session="s1", record=True)
    bad = {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "token_ids": [9]}],
        "usage": {"prompt_tokens_details": {"cached_tokens": "12"}},
    }
    with pytest.raises(ValueError, match=r"cached_tokens: expected a non-negative int, got '12'"):
        finished_from_reply(req, bad)


def test_replies_recorded_without_a_session_are_grouped_by_their_prompts(tmp_path):
    from boundary_vllm.client import finished_from_reply
    from boundary_vllm.recording import TraceRecorder

    from boundary.trace.reader import read_trace

    conversation = tau_bench_airline()[11]
    users = [k for k, m in enumerate(conversation) if m["role"] == "user"]
    fam = family("qwen3_5")
    recorder = TraceRecorder(tmp_path / "frontend.jsonl")
    for n, end in enumerate(users[1:4]):  # three requests of one conversation, no session named
        req = chat_request(fam, conversation[: end + 1], model=MODEL, record=True)
        reply = {
            "id": f"chatcmpl-{n}",
            "choices": [{"message": {"role": "assistant", "content": "ok"}, "token_ids": [9]}],
            "usage": {"prompt_tokens_details": {"cached_tokens": 0}},
        }
        recorder.submit(finished_from_reply(req, reply))
    recorder.close()
    records = read_trace(tmp_path / "frontend.jsonl")
    assert [r.session_from for r in records] == ["request_id"] * 3
    assert [r.session for r in records] == ["chatcmpl-0"] * 3  # one session, chained by prefix
