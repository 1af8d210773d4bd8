"""Workloads rendered with real templates and tokenizers."""

from __future__ import annotations

import itertools
import json

import pytest

from boundary.errors import RequestError
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.stream import Continuation
from boundary.experiment.workloads import (
    WorkloadOptions,
    bfcl,
    build_stream,
    mt_bench,
    rendered_sessions,
    synthetic,
)
from boundary.experiment.workloads.script import client_history, with_own_system_prompt

COST = PrefillCostModel(QWEN3_5_35B_A3B)


def extends(longer, shorter, length: int) -> bool:
    return list(longer[:length]) == list(shorter[:length])


def test_tau_bench_requests_carry_ordered_boundaries_and_the_session_shape():
    stream = rendered_sessions("tau_bench", WorkloadOptions(family="qwen3_5", sessions=2), use_cache=False)
    sessions = stream.sessions()
    assert len(sessions) == 2
    for requests in sessions.values():
        assert requests[0].continuation is Continuation.FIRST
        assert {r.continuation for r in requests[1:]} <= {Continuation.TOOL, Continuation.USER}
        for r in requests:
            assert r.u_end is not None and r.u_end < r.num_prompt_tokens < r.d_end < len(r.tokens)
    assert stream.provenance["output_source"] == "boundary.outputs.format_output"
    assert stream.provenance["synthesised"] == ["reasoning"]


def test_dropped_reasoning_breaks_d_end_and_a_new_user_message_can_rewrite_history_before_u_end():
    stream = rendered_sessions("tau_bench", WorkloadOptions(family="qwen3_5", sessions=1), use_cache=False)
    requests = next(iter(stream.sessions().values()))
    rewritten = 0
    for prev, nxt in itertools.pairwise(requests):
        assert not extends(nxt.tokens, prev.tokens, prev.d_end)  # the hidden reasoning is gone
        assert prev.round_trip is False
        if nxt.continuation is Continuation.TOOL:
            assert extends(nxt.tokens, prev.tokens, prev.u_end)
        else:  # turns after the previous user message lose their empty think blocks
            rewritten += not extends(nxt.tokens, prev.tokens, prev.u_end)
    assert rewritten > 0


def test_with_preserved_thinking_and_echoed_reasoning_the_verifier_predicts_each_round_trip():
    options = WorkloadOptions(
        family="qwen3_6", sessions=2, client="kept", template_kwargs={"preserve_thinking": True}
    )
    pairs = [
        (prev, nxt)
        for requests in rendered_sessions("tau_bench", options, use_cache=False).sessions().values()
        for prev, nxt in itertools.pairwise(requests)
    ]
    outcomes = [extends(nxt.tokens, prev.tokens, prev.d_end) for prev, nxt in pairs]
    assert outcomes == [prev.round_trip for prev, _ in pairs]
    assert sum(outcomes) > len(outcomes) / 2


def test_per_session_system_prompts_part_sessions_before_the_system_policy():
    def split(mode: str) -> int:
        options = WorkloadOptions(family="qwen3_5", sessions=2, system_prompt=mode)
        a, b = (r[0] for r in rendered_sessions("tau_bench", options, use_cache=False).sessions().values())
        return next(i for i, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=False)) if x != y)

    # Qwen3.5 renders the tools block first: it stays shared; the ~1.3k-token airline policy does not.
    assert split("per_session") + 1000 < split("shared")


def test_the_client_drops_reasoning_only_from_assistant_turns():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "a", "reasoning_content": "r"},
    ]
    assert client_history(messages, "dropped")[1] == {"role": "assistant", "content": "a"}
    assert client_history(messages, "kept")[1]["reasoning_content"] == "r"
    assert (
        with_own_system_prompt(bfcl.scripts()[0], seed=0)
        .messages[0]["content"]
        .startswith("Conversation reference:")
    )


def test_bfcl_calls_parse_into_openai_tool_calls_with_positional_arguments():
    docs = {"sort": {"parameters": {"properties": {"file_name": {}}}}}
    assert bfcl.parse_call("sort('final_report.pdf')", docs) == ("sort", {"file_name": "final_report.pdf"})
    assert bfcl.parse_call("mv(source='a', destination='b')", {}) == (
        "mv",
        {"source": "a", "destination": "b"},
    )
    script = bfcl.scripts()[0]
    assert all(t["function"]["parameters"]["type"] == "object" for t in script.tools)
    calls = [m for m in script.messages if m["role"] == "assistant" and m.get("tool_calls")]
    assert [json.loads(c["tool_calls"][0]["function"]["arguments"]) for c in calls[:3]] == [
        {"folder": "document"},
        {"dir_name": "temp"},
        {"source": "final_report.pdf", "destination": "temp"},
    ]


def test_mt_bench_uses_gpt4_reference_answers_where_shipped():
    scripts = {s.name: s for s in mt_bench.scripts()}
    assert scripts["mt_bench_101"].synthesised == ()
    assert scripts["mt_bench_081"].synthesised == ("assistant answers",)
    assert all(len(s.messages) == 4 for s in scripts.values())


def test_synthetic_sessions_are_reproducible_and_follow_the_template_rule():
    a = [r for s in synthetic.sessions(5, seed=1) for r in s]
    b = [r for s in synthetic.sessions(5, seed=1) for r in s]
    assert a == b
    for requests in (list(s) for s in synthetic.sessions(20, seed=2, client="kept")):
        for prev, nxt in itertools.pairwise(requests):
            if nxt.continuation is Continuation.TOOL:  # a new user message rewrites the think blocks
                assert extends(nxt.tokens, prev.tokens, prev.u_end)
            assert extends(nxt.tokens, prev.tokens, prev.d_end) == prev.round_trip


def test_a_trace_file_renders_into_a_stream(tmp_path):
    lines = [
        {
            "session": "a",
            "messages": [{"role": "user", "content": "What is 2+2?"}],
            "output": {"text": "4<|im_end|>"},
        },
        {
            "session": "a",
            "messages": [
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "4"},
                {"role": "user", "content": "And 3+3?"},
            ],
        },
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    stream = build_stream(
        str(path), WorkloadOptions(family="qwen3_5", reasoning=False), COST, use_cache=False
    )
    first, second = stream.requests
    assert first.d_end == len(first.tokens) - 1 and second.d_end == second.num_prompt_tokens
    assert second.continuation is Continuation.USER


def test_a_bad_trace_line_is_named_by_line_number(tmp_path):
    path = tmp_path / "trace.jsonl"
    good = '{"session": "a", "messages": [{"role": "user", "content": "hi"}]}'
    path.write_text(good + '\n{"session": 3, "messages": []}\n', encoding="utf-8")
    with pytest.raises(RequestError, match=r"trace.jsonl:2: session"):
        build_stream(str(path), WorkloadOptions(), COST, use_cache=False)


def test_the_rendered_stream_cache_is_keyed_by_the_inputs_not_just_the_options(tmp_path, monkeypatch):
    from boundary.experiment import workloads
    from boundary.experiment.workloads import WorkloadOptions, rendered_sessions, tau_bench

    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path))
    options = WorkloadOptions(family="qwen3_5", sessions=1)
    first = rendered_sessions("tau_bench", options)
    assert rendered_sessions("tau_bench", options).provenance == first.provenance  # served from the cache
    original = tau_bench.scripts

    def fewer_tools():
        return [type(s)(s.name, s.messages, (s.tools or [])[:3], s.synthesised) for s in original()]

    monkeypatch.setattr(workloads.tau_bench, "scripts", fewer_tools)
    changed = rendered_sessions("tau_bench", options)
    assert changed.provenance["scripts_sha"] != first.provenance["scripts_sha"]
    assert len(changed.requests[0].tokens) < len(first.requests[0].tokens)  # re-rendered, not cached
