"""The scenarios the engine benchmark and the GPU check run (``boundary_vllm.scenarios``): which
turns write their own tokens, and how a pass's reuse, prefill and TTFT are totalled and set
against ``main_sparse`` and prefix caching off. Outcomes here are made by hand; the engine tier
runs them through a real engine."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm


def test_tool_loop_turns_followed_by_a_request_write_their_own_tokens_and_others_generate_freely():
    from boundary_vllm.scenarios import conversation, session_requests

    turns = conversation(0, 14)
    requests = session_requests(turns, outputs="tool_loops", max_tokens=8)
    assert {t.next_role for t in turns} >= {"tool", "user"}
    assert turns[-1].next_role == "tool"  # the session's last turn: nothing would read its D_end
    for k, (turn, request) in enumerate(zip(turns, requests, strict=True)):
        assert request.prompt_token_ids == tuple(turn.prompt.token_ids)
        assert request.input_end == turn.prompt.u_end
        if turn.next_role == "tool" and k + 1 < len(turns):
            assert request.forced == tuple(turn.output.token_ids) and request.round_trip == 1.0
            assert request.max_tokens == len(turn.output.token_ids)
        else:
            assert request.forced == () and request.max_tokens == 8
            assert request.round_trip == (1.0 if turn.next_role == "tool" else 0.0)
    for turn, later, request in zip(turns, turns[1:], requests, strict=False):
        assert turn.tokens[: request.horizon] == later.prompt.token_ids[: request.horizon]


def _outcome(cached: int, prompt: int, ttft: float, tokens=(1, 2), logprobs=(-0.5, -0.7)):
    from boundary_vllm.engine_run import EngineOutcome
    from boundary_vllm.step_log import LoggedRequest

    logged = LoggedRequest(cached, "n/a", 1, prompt, prefill_chunks=[prompt - cached])
    return EngineOutcome("r", cached, tuple(tokens), tuple(logprobs), (1.0, 1.0), ttft, logged)


def _request(prompt: int):
    from boundary_vllm.engine_run import EngineRequest

    return EngineRequest(tuple(range(prompt)), prompt - 5)


def test_a_pass_is_totalled_and_set_against_main_sparse_and_cache_off():
    from boundary_vllm.scenarios import markdown_table, ratios, summarize

    ss = [[_request(1000), _request(2000)]]
    runs = {
        "cache_off": [[_outcome(0, 1000, 0.4), _outcome(0, 2000, 0.8)]],
        "main_sparse": [[_outcome(0, 1000, 0.4), _outcome(992, 2000, 0.4)]],
        "input_end": [[_outcome(0, 1000, 0.4), _outcome(1488, 2000, 0.2, logprobs=(-0.5, -0.9))]],
    }
    s = summarize(ss, runs)
    assert (s["main_sparse"].cached_tokens, s["main_sparse"].prefill_tokens) == (992, 2008)
    assert s["input_end"].reuse == pytest.approx(1488 / 3000)
    assert s["cache_off"].ttft_mean_s == pytest.approx(0.6) and s["cache_off"].ttft_p50_s == pytest.approx(
        0.6
    )
    assert s["cache_off"].ttft_p95_s == pytest.approx(0.78)  # interpolated between the two
    assert s["main_sparse"].agree == 2 and s["input_end"].agree == 1  # a logprob 0.2 away
    r = ratios(s)
    assert r["input_end"]["main_sparse"]["prefill_tokens"] == pytest.approx(1512 / 2008)
    assert r["input_end"]["cache_off"]["ttft_mean_s"] == pytest.approx(0.3 / 0.6)
    assert r["cache_off"]["cache_off"]["prefill_tokens"] == 1.0
    table = markdown_table(s).splitlines()
    assert len(table) == 2 + 3
    assert table[3].startswith("| `main_sparse` | 2 | 33.1% | 2,008 (1.00× / 0.67×) | 400 ms (1.00× / 0.67×)")
    assert table[4].endswith("| 1/2 |")


def test_ratios_against_a_missing_pass_are_left_blank():
    from boundary_vllm.scenarios import markdown_table, ratios, summarize

    s = summarize([[_request(100)]], {"both": [[_outcome(96, 100, 0.1)]]})
    assert ratios(s)["both"]["cache_off"]["prefill_tokens"] is None
    assert "(– / –)" in markdown_table(s)
