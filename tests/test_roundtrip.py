"""The D_end round-trip verifier.

Oracle (tests only): for every shipped family variant, template-kwarg setting, fixture
conversation and assistant turn in it, the verifier's ``reusable_length`` equals the token
longest common prefix of ``prompt + generated`` with the next request, both rendered and
tokenized by transformers' ``apply_chat_template(tokenize=True)`` (the generated turns there
are format_output's, which tests/outputs/test_codec.py holds to hand-written model output). The
cause tests feed model output written by hand in the test, never format_output's, and check
the cause labels by hand against the known template behaviours (see each test).

Families without an offline vocabulary (Nemotron, Granite, Kimi, MiniMax, Zamba2, gpt-oss,
Mistral) use their labelled stand-in tokenizer (``fam.tokenizer.stand_in``: Qwen3 BPE plus the
family's control tokens); their ids are not the real model's, their texts are.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest

from boundary.checkpoints.kinds import CheckpointKind
from boundary.errors import TemplateRenderError
from boundary.family.facade import family_spec
from boundary.outputs import OutputStatus, format_output, output_format
from boundary.prefixes import common_prefix_length as common_prefix
from boundary.verify.roundtrip import Cause, ClientHabits, Tail, verify_round_trip
from tests.support import (
    FIXED_NOW,
    family,
    fixed_strftime,
    fixture_cases,
    kwarg_settings,
    reference_request,
    reference_tokenizer,
    shipped_variants,
)

CASES = {c["name"]: c for c in fixture_cases()}
DEFAULT_HABITS = ClientHabits()
SYNTHETIC_ANSWER = {
    "role": "assistant",
    "reasoning_content": "The user wants a short answer.",
    "content": "Sure.",
}


def _expressible(name: str, variant: str, message: dict) -> bool:
    fmt = output_format(family_spec(name), variant)
    calls = message.get("tool_calls") or []
    return not calls or (fmt.syntax is not None) or (fmt.harmony and len(calls) == 1)


def _turns(messages: list[dict]) -> list[tuple[int, list[dict] | None, dict]]:
    """(request length, next request or None to probe, the assistant message) per turn."""
    out = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        j = next(
            (k for k in range(i + 1, len(messages)) if messages[k]["role"] == "assistant"), len(messages)
        )
        nxt = messages[:j] if j > i + 1 else [*messages[: i + 1], {"role": "user", "content": "Thanks."}]
        out.append((i, nxt, m))
    if messages[-1]["role"] != "assistant":
        out.append((len(messages), None, SYNTHETIC_ANSWER))
    return out


def _matrix() -> list[Any]:
    params = []
    for name, variant in shipped_variants():
        for kwargs in kwarg_settings(name):
            label = ",".join(f"{k}={v}" for k, v in kwargs.items()) or "defaults"
            for case in CASES.values():
                for i, nxt, m in _turns(case["messages"]):
                    if _expressible(name, variant, m):
                        params.append(
                            pytest.param(
                                name,
                                variant,
                                kwargs,
                                case["name"],
                                i,
                                nxt,
                                m,
                                id=f"{name}-{variant}-{case['name']}-{i}-{label}",
                            )
                        )
    return params


def _reference_ids(name: str, variant: str, messages: list[dict], tools, kwargs: dict) -> list[int]:
    fam = family(name, variant)
    prepared, prepared_tools = reference_request(fam, messages, tools, variant)
    return reference_tokenizer(name, variant).apply_chat_template(
        prepared,
        tools=prepared_tools,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
        strftime_now=fixed_strftime,
        **kwargs,
    )


def _words(message: dict) -> str:
    """Reasoning and content together, tags and framing whitespace aside."""
    parts = (message.get("reasoning_content"), message.get("content"))
    return " ".join(" ".join(p for p in parts if p).replace("<think>", " ").replace("</think>", " ").split())


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize(("name", "variant", "kwargs", "case", "index", "nxt", "message"), _matrix())
def test_reusable_length_equals_the_token_common_prefix_with_the_real_next_rendering(
    name, variant, kwargs, case, index, nxt, message
):
    fam = family(name, variant)
    messages, tools = CASES[case]["messages"][:index], CASES[case].get("tools")
    try:
        prompt_ids = _reference_ids(name, variant, messages, tools, kwargs)
    except Exception as exc:  # the template itself refuses the conversation (e.g. Mistral's role order)
        with pytest.raises(TemplateRenderError, match=re.escape(str(exc))):
            fam.render(messages, tools, variant=variant, now=FIXED_NOW, **kwargs)
        return
    prompt = fam.render(messages, tools, variant=variant, now=FIXED_NOW, **kwargs)
    out = format_output(fam, prompt, message, variant=variant)
    r = fam.verify_round_trip(
        messages, out.token_ids, nxt, tools=tools, variant=variant, now=FIXED_NOW, **kwargs
    )
    assert r.prompt.token_ids == prompt_ids
    if nxt is None:  # probed: the oracle renders the same continuation messages
        from boundary.verify.roundtrip import continuation_messages

        # the continuation is built from boundary's reading of the turn: check that reading
        # against the message the turn was written from (words; the engine keeps framing spaces)
        assert message is SYNTHETIC_ANSWER
        assert _words(r.parsed.message) in ("The user wants a short answer. Sure.", "Sure.")
        for probe in r.probes:
            probe_messages = continuation_messages(messages, r.parsed.message, probe.continuation)
            next_ids = _reference_ids(name, variant, probe_messages, tools, kwargs)
            assert probe.reusable_length == _lcp(prompt_ids + out.token_ids, next_ids)
    else:
        next_ids = _reference_ids(name, variant, nxt, tools, kwargs)
        assert r.reusable_length == _lcp(prompt_ids + out.token_ids, next_ids)
    p = len(prompt_ids)
    assert r.round_trips == (r.reusable_length >= p + r.d_end)
    assert (r.diverged_at is None) == r.round_trips
    assert (r.cause is None) == r.round_trips
    if r.best_checkpoint is not None:
        assert r.best_checkpoint.position <= r.reusable_length


def _verify(
    name: str,
    case: str,
    index: int,
    nxt_end: int | None = None,
    *,
    text: str,
    variant: str | None = None,
    habits: ClientHabits = DEFAULT_HABITS,
    unit: int = 1,
    **kwargs,
):
    """Verify the turn that ``text`` (the model's output, written by hand in the test from the
    family's chat format, stop token included) generates after ``messages[:index]``."""
    fam = family(name, variant)
    c = CASES[case]
    messages, tools = c["messages"][:index], c.get("tools")
    nxt = None if nxt_end is None else c["messages"][:nxt_end]
    return fam.verify_round_trip(
        messages,
        fam.tokenizer.encode_ids(text),
        nxt,
        tools=tools,
        variant=variant,
        now=FIXED_NOW,
        habits=habits,
        unit=unit,
        **kwargs,
    )


PRIME = "221 = 13 * 17, so it is not prime."
QWEN3_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Oslo","unit":"celsius"}}\n'
    "</tool_call><|im_end|>"
)
QWEN3_6_CALL = (
    "I need the current weather in Bergen.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nBergen\n</parameter>\n</function>\n</tool_call><|im_end|>"
)
GPT_OSS_FINAL = "<|channel|>final<|message|>Great choice. When are you travelling?<|return|>"
ANSWER = "No: 221 = 13 × 17."
# (family, variant, template kwargs, the model's answer to "Is 221 prime?" as it writes it)
REASONING_DROPPERS = [
    ("qwen3", None, {}, f"<think>\n{PRIME}\n</think>\n\n{ANSWER}<|im_end|>"),
    ("qwen3_next", None, {}, f"{PRIME}\n</think>\n\n{ANSWER}<|im_end|>"),  # <think>\n pre-filled
    ("qwen3_5", None, {}, f"{PRIME}\n</think>\n\n{ANSWER}<|im_end|>"),
    ("qwen3_6", None, {}, f"{PRIME}\n</think>\n\n{ANSWER}<|im_end|>"),
    ("nemotron_3", None, {}, f"{PRIME}\n</think>\n{ANSWER}<|im_end|>"),
    ("nemotron_nano_v2", None, {}, f"{PRIME}\n</think>\n\n{ANSWER}\n<SPECIAL_12>"),
    ("minimax_m2", None, {}, f"{PRIME}\n</think>\n\n{ANSWER}[e~["),
    ("deepseek_v3", "v3_1", {"thinking": True}, f"{PRIME}</think>{ANSWER}<｜end▁of▁sentence｜>"),
    (
        "gpt_oss",
        None,
        {},
        f"<|channel|>analysis<|message|>{PRIME}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>",
    ),
]


@pytest.mark.parametrize(("name", "variant", "kwargs", "text"), REASONING_DROPPERS)
def test_reasoning_of_a_turn_is_dropped_once_a_new_user_message_arrives(name, variant, kwargs, text):
    """shared README: these templates drop earlier reasoning once a new user message arrives."""
    r = _verify(name, "reasoning_in_history", 2, 4, text=text, variant=variant, **kwargs)
    # the engine's reasoning string keeps the newlines around it
    assert r.parsed.reasoning.strip() == PRIME
    assert not r.round_trips
    assert r.cause is Cause.HIDDEN_REASONING_DROPPED
    assert r.best_checkpoint is not None and r.best_checkpoint.kind is not CheckpointKind.DECODE_END


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("qwen3_6", {"preserve_thinking": True}), ("nemotron_3", {"truncate_history_thinking": False})],
)
def test_template_options_that_keep_reasoning_make_history_append_only(name, kwargs):
    """shared README: Qwen3.6 preserve_thinking=True and Nemotron 3 truncate_history_thinking=False."""
    close = "\n</think>\n" if name == "nemotron_3" else "\n</think>\n\n"
    r = _verify(name, "reasoning_in_history", 2, 4, text=f"{PRIME}{close}{ANSWER}<|im_end|>", **kwargs)
    assert r.round_trips and r.cause is None
    assert r.best_checkpoint.kind is CheckpointKind.DECODE_END
    assert r.d_end == len(r.generated)  # the stop token is reproduced too
    assert r.tail is Tail.KEPT


def test_qwen3_re_serialises_tool_call_json_with_its_own_spacing():
    """The model wrote {"city":"Oslo",...}; the template writes tojson's ', ' / ': '."""
    r = _verify("qwen3", "tool_loop", 2, 4, text=QWEN3_CALL)
    assert r.cause is Cause.TOOL_CALL_RESERIALIZED
    assert r.detail.startswith("JSON spacing")
    assert r.best_checkpoint.kind is CheckpointKind.PROMPT_END


def test_qwen3_round_trips_a_tool_call_when_the_client_sends_arguments_as_written():
    r = _verify("qwen3", "tool_loop", 2, 4, text=QWEN3_CALL, habits=ClientHabits(arguments="string"))
    assert r.round_trips and r.best_checkpoint.kind is CheckpointKind.DECODE_END


def test_minimax_adds_a_newline_before_its_tool_call():
    """The model writes </think>\\n\\n<minimax:tool_call>; the template writes a third newline."""
    r = _verify(
        "minimax_m2",
        "reasoning_tool_loop",
        1,
        text="I need the current weather in Bergen.\n</think>\n\n<minimax:tool_call>\n"
        '<invoke name="get_weather">\n<parameter name="city">Bergen</parameter>\n</invoke>\n'
        "</minimax:tool_call>[e~[",
    )
    assert r.continuation == "tool_result"
    assert r.cause is Cause.WHITESPACE
    assert "<minimax:tool_call>" in r.detail


def test_nemotron_3_with_thinking_off_adds_a_newline_after_the_empty_think_block():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
        "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>\n<|im_end|>"
    )
    r = _verify("nemotron_3", "tool_loop", 2, 4, text=text, enable_thinking=False)
    assert r.cause is Cause.WHITESPACE
    assert r.prompt.text.endswith("<think></think>")
    assert "'<tool_call>" in r.detail and "'\\n<tool_call>" in r.detail


def test_gpt_oss_reorders_the_tool_call_header():
    text = (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Oslo","unit":"celsius"}<|call|>'
    )
    r = _verify("gpt_oss", "tool_loop", 2, 4, text=text)
    assert r.cause is Cause.ROLE_HEADER
    assert "to=functions.get_weather" in r.detail


def test_gpt_oss_writes_end_where_the_model_wrote_return_so_d_end_excludes_it():
    r = _verify("gpt_oss", "multi_turn", 2, 4, text=GPT_OSS_FINAL)
    assert r.round_trips
    assert r.tail is Tail.REWRITTEN
    assert r.d_end == len(r.generated) - 1
    assert r.best_checkpoint.kind is CheckpointKind.DECODE_END


def test_gpt_oss_puts_todays_date_in_the_system_message():
    fam = family("gpt_oss")
    c = CASES["multi_turn"]
    prompt = fam.render(c["messages"][:2], now=FIXED_NOW)
    r = fam.verify_round_trip(
        c["messages"][:2],
        fam.tokenizer.encode_ids(GPT_OSS_FINAL),
        c["messages"][:4],
        now=FIXED_NOW,
        next_now=datetime(2026, 5, 16, 0, 0, 1),
    )
    assert r.cause is Cause.SYSTEM_PROMPT and "date" in r.detail
    assert r.best_checkpoint is None or r.best_checkpoint.position < prompt.u_end


def test_granite_replaces_its_default_system_prompt_when_tools_arrive():
    fam = family("granite_4_h")
    c = CASES["tool_loop"]
    messages = c["messages"][1:2]  # no system message: the template injects its default one
    r = fam.verify_round_trip(
        messages,
        fam.tokenizer.encode_ids("Let me check.<|end_of_text|>"),
        [
            *messages,
            {"role": "assistant", "content": "Let me check."},
            {"role": "user", "content": "Please do."},
        ],
        next_tools=c["tools"],
    )
    assert r.cause is Cause.SYSTEM_PROMPT
    assert r.best_checkpoint is None


def test_qwen3_5_tool_loop_without_reasoning_re_merges_the_newline_after_the_prefilled_think():
    """<think>\\n is prefilled and the model writes \\n</think>: re-encoded, \\n\\n is one token."""
    text = (
        "\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
        "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call><|im_end|>"
    )
    r = _verify("qwen3_5", "tool_loop", 2, 4, text=text)
    assert r.cause is Cause.BPE_REMERGE
    assert r.diverged_at == len(r.prompt.token_ids) - 1


def test_qwen3_5_drops_the_empty_think_block_of_a_tool_call_turn_once_a_user_message_arrives():
    text = (
        "\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
        "</function>\n</tool_call><|im_end|>"
    )
    r = _verify("qwen3_5", "tool_loop_two_steps", 4, text=text)
    assert r.probe("new_user").cause is Cause.EMPTY_THINK_BLOCK


def test_a_client_that_drops_reasoning_content_breaks_the_tool_loop_round_trip():
    echo = _verify("qwen3_6", "reasoning_tool_loop", 1, text=QWEN3_6_CALL)
    dropped = _verify(
        "qwen3_6", "reasoning_tool_loop", 1, text=QWEN3_6_CALL, habits=ClientHabits(echo_reasoning=False)
    )
    assert echo.round_trips and echo.continuation == "tool_result"
    assert not dropped.round_trips and dropped.cause is Cause.HIDDEN_REASONING_DROPPED


def test_without_next_messages_both_continuations_are_probed():
    r = _verify("qwen3_6", "reasoning_tool_loop", 1, text=QWEN3_6_CALL)
    assert [p.continuation for p in r.probes] == ["tool_result", "new_user"]
    assert r.probe("tool_result").round_trips
    assert r.probe("new_user").cause is Cause.HIDDEN_REASONING_DROPPED


def test_a_malformed_call_reads_as_content_as_vllm_returns_it_and_round_trips_as_such():
    fam = family("qwen3")
    c = CASES["tool_loop"]
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": Oslo}}\n</tool_call><|im_end|>'
    ids = fam.tokenizer.encode_ids(bad)
    r = fam.verify_round_trip(c["messages"][:2], ids, tools=c["tools"])
    assert r.parsed.status is OutputStatus.MALFORMED and r.parsed.problem.startswith("tool call 0")
    assert r.parsed.content == bad.removesuffix("<|im_end|>") and not r.parsed.tool_calls
    assert r.round_trips  # the client sends the text back as content; the template writes it verbatim


def test_a_cut_off_call_keeps_its_status_while_the_engine_returns_it_as_content():
    fam = family("qwen3")
    c = CASES["tool_loop"]
    cut = '<tool_call>\n{"name": "get_weather", "argu'
    r = fam.verify_round_trip(c["messages"][:2], fam.tokenizer.encode_ids(cut), tools=c["tools"])
    assert r.parsed.status is OutputStatus.TRUNCATED
    # vLLM's hermes parser returns a call it cannot read as content, and the template writes
    # that content back verbatim: the cut-off text is reused
    assert r.parsed.content == cut and not r.parsed.tool_calls
    assert r.round_trips


def test_a_cut_off_call_the_engine_reads_fails_the_round_trip_with_a_parse_failure():
    fam = family("qwen3_5")
    c = CASES["tool_loop"]
    cut = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs"
    r = fam.verify_round_trip(c["messages"][:2], fam.tokenizer.encode_ids(cut), tools=c["tools"])
    assert r.parsed.status is OutputStatus.TRUNCATED
    assert not r.round_trips and r.cause is Cause.PARSE_FAILURE


def test_every_shipped_tool_call_format_gets_a_verdict_without_a_next_request():
    """Mistral rejects a user message right after tool results: that probe is skipped with
    the template's reason and the final answer stands in for it."""
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "abcdefghi", "type": "function", "function": {"name": "f", "arguments": '{"q": "x"}'}}
        ],
    }
    tools = [
        {"type": "function", "function": {"name": "f", "description": "F.", "parameters": {"type": "object"}}}
    ]
    msgs = [{"role": "user", "content": "Go."}]
    for name, variant in shipped_variants():
        fam = family(name, variant)
        fmt = output_format(fam, variant)
        if fmt.syntax is None and not fmt.harmony:
            continue
        out = format_output(fam, fam.render(msgs, tools, variant=variant), call, variant=variant)
        r = verify_round_trip(fam, msgs, out, tools=tools, variant=variant)
        assert r.continuation == "tool_result" and r.probe("tool_result") is not None, name
        if name == "mistral":
            assert [c for c, _ in r.skipped] == ["new_user"] and "alternate" in r.skipped[0][1]
            assert r.probe("final_answer") is not None
        else:
            assert r.skipped == () and r.probe("new_user") is not None, name


def test_an_edited_history_is_named():
    fam = family("qwen3")
    c = CASES["multi_turn"]
    out = fam.tokenizer.encode_ids("May is mild and sunny. Do you want a day-by-day plan?<|im_end|>")
    edited = [dict(m) for m in c["messages"]]
    edited[1]["content"] = "Hi! I want to visit Porto."
    r = fam.verify_round_trip(c["messages"][:4], out, edited)
    assert r.cause is Cause.HISTORY_EDITED


def test_best_checkpoint_is_materialized_at_the_unit_and_only_where_its_state_is_a_prefix():
    r = _verify(
        "qwen3_6", "reasoning_in_history", 2, 4, text=f"{PRIME}\n</think>\n\n{ANSWER}<|im_end|>", unit=16
    )
    assert not r.round_trips
    assert r.best_checkpoint.position % 16 == 0
    assert r.best_checkpoint.position <= r.reusable_length
    kinds = {c.kind: c for c in r.checkpoints}
    assert kinds[CheckpointKind.DECODE_END].position > r.reusable_length


def test_common_prefix_finds_the_first_mismatch_past_a_chunk():
    a = list(range(2000))
    b = [*a[:1500], -1, *a[1501:]]
    assert common_prefix(a, b) == 1500
    assert common_prefix(a, a[:700]) == 700


def test_qwen3_5_writes_a_boolean_parameter_back_as_python_true():
    fam = family("qwen3_5")
    messages = [{"role": "user", "content": "go"}]
    message = {
        "role": "assistant",
        "reasoning_content": "call f",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"ok":true}'}}
        ],
    }
    out = fam.tokenizer.encode_ids(
        "call f\n</think>\n\n<tool_call>\n<function=f>\n<parameter=ok>\ntrue\n</parameter>\n</function>\n"
        "</tool_call><|im_end|>"
    )
    r = fam.verify_round_trip(
        messages, out, [*messages, message, {"role": "tool", "tool_call_id": "a", "content": "x"}]
    )
    assert r.cause is Cause.TOOL_CALL_RESERIALIZED
    assert r.detail.startswith("value form") and "'True\\n</parameter>" in r.detail


def test_deepseek_v3_drops_the_tool_outputs_end_once_an_assistant_turn_follows_tool_outputs():
    text = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city":"Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>'
    )
    r = _verify("deepseek_v3", "tool_loop_two_steps", 4, 6, text=text)
    assert r.cause is Cause.OTHER
    assert "<｜tool▁outputs▁end｜>" in r.detail


def test_mistral_moves_its_tool_list_to_the_new_last_user_message():
    r = _verify("mistral", "tool_loop", 4, None, text="Sure.</s>")
    new_user = r.probe("new_user")
    assert new_user.cause is Cause.OTHER
    assert "the template writes something new before messages[1]" in new_user.detail
    assert "[AVAILABLE_TOOLS]" in new_user.detail
