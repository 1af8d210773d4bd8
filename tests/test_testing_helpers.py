"""``boundary.testing``: the checks a template maintainer runs in their own suite pass on a
shipped template and fail, naming the request and why, on templates that break them."""

from __future__ import annotations

import re

import pytest

import boundary
from boundary.testing import (
    assert_exposes_u_end,
    assert_renders_append_only,
    builtin_conversations,
    builtin_corpus,
    check,
    declared_rewrites,
    requests_of,
)

LOOP = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</>{% endfor %}"
GENERATION = "{% if add_generation_prompt %}<assistant>{% endif %}"
# the flag kept in a namespace and the generation prompt printed from it after the loop:
# the render cannot tell where the history ends
FLAG_READ_LATER = (
    "{% set ns = namespace(agp=false) %}{% if add_generation_prompt %}{% set ns.agp = true %}{% endif %}"
    + LOOP
    + "{% if ns.agp %}<assistant>{% endif %}"
)
# the system block carries the message count: it changes with every request
COUNT_IN_SYSTEM = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% if m.role == 'system' %} ({{ messages | length }} messages){% endif %}</>{% endfor %}" + GENERATION
)


@pytest.fixture(scope="module")
def qwen() -> boundary.Family:
    return boundary.load_family("qwen3_5")


def custom(template: str, qwen: boundary.Family) -> boundary.Family:
    return boundary.Family.from_template(template, qwen.tokenizer)


def test_the_builtin_corpus_mixes_tau_bench_and_mt_bench_and_ends_before_an_assistant_turn() -> None:
    conversations = builtin_conversations()
    corpus = builtin_corpus()
    assert conversations == [e.messages for e in corpus]
    names = [e.name for e in corpus]
    assert len(set(names)) == len(names) > 40
    assert names[:3] == ["tau-bench-0", "mt-bench-101", "tau-bench-1"]
    assert any(n.startswith("bfcl-") for n in names) and names[-1].startswith("edge-")
    assert all(e.tools for e in corpus if e.name.startswith(("tau-bench", "bfcl")))
    assert conversations[0][0]["role"] == "system"
    assert any(m.get("tool_calls") for c in conversations for m in c)
    assert any(m["role"] == "tool" for c in conversations for m in c)
    assert [m["role"] for m in conversations[1]] == ["user", "assistant", "user"]
    assert all(c[-1]["role"] == "user" for c in conversations)
    assert builtin_conversations(limit=3) == conversations[:3]
    assert requests_of(conversations[1]) == [1, 3]


def test_the_shipped_qwen3_5_template_passes_both_checks(qwen: boundary.Family) -> None:
    conversations = builtin_conversations(limit=4)
    exposed = assert_exposes_u_end(qwen, conversations)
    appended = assert_renders_append_only(qwen, conversations)
    assert len(exposed.requests) == sum(len(requests_of(c)) for c in conversations) > 8
    follow_ups = [r for r in appended.requests if r.previous is not None]
    assert follow_ups and all(r.extends for r in follow_ups)
    # the generation prompt is not history: the next request never reaches P_end
    assert not any(r.reaches_p_end for r in follow_ups)


def test_a_template_that_cannot_expose_u_end_fails_with_the_reason(qwen: boundary.Family) -> None:
    conversations = builtin_conversations(limit=2)
    assert_exposes_u_end(custom(LOOP + GENERATION, qwen), conversations)  # the same, printed directly
    with pytest.raises(AssertionError) as failed:
        assert_exposes_u_end(custom(FLAG_READ_LATER, qwen), conversations)
    message = str(failed.value)
    total = sum(len(requests_of(c)) for c in conversations)
    assert message.startswith(f"{total} of {total} requests do not expose U_end")
    assert "conversation 0, 2 messages: U_end UNAVAILABLE: " in message
    assert "conversation 1, 3 messages: U_end UNAVAILABLE: " in message
    assert "add_generation_prompt" in message  # the reason the renderer gives


def test_a_template_that_rewrites_the_system_block_fails_naming_the_message(qwen: boundary.Family) -> None:
    conversations = builtin_conversations(limit=1)  # a tau-bench trajectory: system, then turns
    assert_renders_append_only(custom(LOOP + GENERATION, qwen), conversations)
    with pytest.raises(AssertionError) as failed:
        assert_renders_append_only(custom(COUNT_IN_SYSTEM, qwen), conversations)
    message = str(failed.value)
    assert "conversation 0, 4 messages: does not start with the request of 2 messages" in message
    assert "first difference in messages[0]: " in message
    assert "P_end unreachable too" in message
    assert len(check(custom(COUNT_IN_SYSTEM, qwen), conversations).rewrites) == 2


def test_qwen3_5s_declared_empty_think_block_rewrite_is_caught(qwen: boundary.Family) -> None:
    """Qwen3.5 gives the assistant turns after the last user query a think block and drops it
    once a new user message arrives (its declared ``empty_think_block`` history rewrite): a
    tool loop followed by a user turn is not append-only."""
    conversation = builtin_conversations(limit=5)[4]
    with pytest.raises(AssertionError) as failed:
        assert_renders_append_only(qwen, [conversation])
    message = str(failed.value)
    rewritten = check(qwen, [conversation]).rewrites
    assert [r.messages for r in rewritten] == [14]
    assert conversation[13]["role"] == "user"
    first = re.search(r"first difference in messages\[(\d+)\]", message)
    assert first is not None
    assert conversation[int(first.group(1))]["role"] == "assistant"
    assert "think>" in message


def test_a_declared_rewrite_is_named_and_excused_only_when_allowed(qwen: boundary.Family) -> None:
    conversation = builtin_conversations(limit=5)[4]
    (rewrite,) = check(qwen, [conversation]).rewrites
    assert rewrite.declared == "empty_think_block"
    assert "empty_think_block" in declared_rewrites(qwen)
    assert_renders_append_only(qwen, [conversation], allow=declared_rewrites(qwen))
    with pytest.raises(AssertionError, match=r"the family declares it \(empty_think_block\)"):
        assert_renders_append_only(qwen, [conversation], allow=["drop_reasoning_before_last_user"])
    # a template without a rule table explains nothing: the same allowance does not excuse it
    counted = custom(COUNT_IN_SYSTEM, qwen)
    assert declared_rewrites(counted) == []
    with pytest.raises(AssertionError, match="no declared rewrite"):
        assert_renders_append_only(counted, builtin_conversations(limit=1), allow=declared_rewrites(qwen))


def test_texts_and_ids_are_compared_with_transformers(qwen: boundary.Family) -> None:
    corpus = [e for e in builtin_corpus() if e.name.startswith(("tau-bench-0", "bfcl-", "edge-"))]
    result = check(qwen, corpus, compare_with_transformers=True)
    assert result.requests and all(r.target_equal is True for r in result.requests)
    assert all(r.target_equal is None for r in check(qwen, corpus[:1]).requests)


def test_a_render_that_fails_is_recorded_and_fails_the_u_end_assertion(qwen: boundary.Family) -> None:
    no_tools = (
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool turns') }}"
        "{% endif %}<{{ m.role }}>{{ m.content }}</>{% endfor %}" + GENERATION
    )
    fam = custom(no_tools, qwen)
    conversation = next(e for e in builtin_corpus() if e.name == "edge-parallel-tool-calls")
    result = check(fam, [conversation])
    assert result.errors and all("no tool turns" in str(r.error) for r in result.errors)
    assert all(r.u_end is not None for r in result.requests if r.error is None)
    with pytest.raises(AssertionError, match=r"render failed: .*no tool turns"):
        assert_exposes_u_end(fam, [conversation])


def test_each_answer_is_round_tripped_against_the_next_request(qwen: boundary.Family) -> None:
    edges = {e.name: e for e in builtin_corpus() if e.name.startswith("edge-")}
    first = check(qwen, [edges["edge-reasoning-in-history"]]).requests[0]
    assert first.answer is not None and first.answer.round_trips is False
    assert first.answer.cause == "hidden_reasoning_dropped"
    assert check(qwen, [edges["edge-single-user"]]).requests[0].answer is None  # nothing follows
    # a template of its own has no tool-call format: the tool-calling answer is skipped, by name
    calls = check(custom(LOOP + GENERATION, qwen), [edges["edge-parallel-tool-calls"]]).requests[0]
    assert calls.answer is not None and calls.answer.round_trips is None
    assert "no tool-call format" in str(calls.answer.skipped)
