"""MiniMax-M1 and LFM2.5: what their templates do to U_end and to history, held to hand-written
model output and to transformers' own rendering.

Oracles: the model's turns are written by hand in each test from the family's chat format
(never by ``format_output``); the next request and the history rendering come from
transformers' ``apply_chat_template`` over the same template and tokenizer. Neither family has
a vocabulary offline: both render with their labelled stand-in tokenizer (Qwen3 BPE plus the
family's control tokens), so texts are the model's and ids are not.
"""

from __future__ import annotations

from typing import Any

import pytest

import boundary
from boundary.verify.divergence import Cause
from boundary.verify.horizon import stability_horizon
from tests.support import (
    FIXED_NOW,
    WEATHER_TOOLS,
    family,
    fixed_strftime,
    reference_request,
    reference_tokenizer,
)

USER = [{"role": "user", "content": "Weather in Oslo?"}]
TOOLS = WEATHER_TOOLS


def _call(arguments: str, call_id: str = "call0") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


def _reference(name: str, messages: list[dict], tools: Any, agp: bool, **kwargs: Any) -> str:
    fam = family(name)
    prepared, prepared_tools = reference_request(fam, messages, tools)
    return reference_tokenizer(name, fam.default_variant).apply_chat_template(
        prepared,
        tools=prepared_tools,
        add_generation_prompt=agp,
        tokenize=False,
        strftime_now=fixed_strftime,
        **kwargs,
    )


def _verify(
    name: str, messages: list[dict], text: str, nxt: list[dict] | None, tools: Any = TOOLS, **kwargs: Any
):
    fam = family(name)
    return fam.verify_round_trip(
        messages, fam.tokenizer.encode_ids(text), nxt, tools=tools, now=FIXED_NOW, **kwargs
    )


def _horizon_kinds(
    name: str, messages: list[dict], text: str, tools: Any = TOOLS, **kwargs: Any
) -> list[str]:
    fam = family(name)
    prompt = fam.render(messages, tools, now=FIXED_NOW, **kwargs)
    ids = fam.tokenizer.encode_ids(text)
    parsed = boundary.outputs.parse_output(fam, ids, prompt, tools=tools)
    horizon = stability_horizon(fam, prompt, ids, parsed, messages, template_kwargs=kwargs)
    return [limit.rewrite for limit in horizon.limits]


# -- MiniMax-M1 --------------------------------------------------------------------------------

M1_CALL = (
    '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_calls><end_of_sentence>'
)


def test_minimax_m1_facts_are_labelled() -> None:
    fam = family("minimax_m1")
    assert fam.spec.hybrid and "MiniMaxText01ForCausalLM" in fam.spec.architecture
    assert fam.tokenizer.stand_in and "no MiniMax-M1 vocabulary" in fam.tokenizer.source
    assert fam.spec.output.vllm_tool_parser is None  # vLLM 0.33.0 ships no parser for <tool_calls>


@pytest.mark.parametrize(
    ("messages", "tools"),
    [
        (USER, None),
        ([{"role": "system", "content": "Be brief."}, *USER], None),
        (USER, TOOLS),
        (
            [
                *USER,
                {"role": "assistant", "content": None, "tool_calls": [_call('{"city": "Oslo"}')]},
                {"role": "tool", "tool_call_id": "call0", "content": "sunny"},
            ],
            TOOLS,
        ),
    ],
    ids=["chat", "system", "tools", "tool_result"],
)
def test_minimax_m1_exposes_u_end_where_transformers_history_ends(messages, tools) -> None:
    r = family("minimax_m1").render(messages, tools, now=FIXED_NOW)
    history = _reference("minimax_m1", messages, tools, False)
    assert r.input_end.status is boundary.BoundaryStatus.FOUND
    assert r.input_end.char == len(history) and r.text.startswith(history)
    assert r.text[len(history) :] == "<beginning_of_sentence>ai name=assistant\n"


def test_minimax_m1_continued_message_starts_at_its_header_and_a_continued_call_is_refused() -> None:
    fam = family("minimax_m1")
    r = fam.render([*USER, {"role": "assistant", "content": "It is"}], continue_final_message=True)
    assert r.text.endswith("<beginning_of_sentence>ai name=assistant\nIt is")
    assert r.input_end.char == len(_reference("minimax_m1", USER, None, False))
    called = [*USER, {"role": "assistant", "content": "", "tool_calls": [_call('{"city": "Oslo"}')]}]
    with pytest.raises(boundary.TemplateRenderError, match="drops part of the final message"):
        fam.render(called, TOOLS, continue_final_message=True)


def test_minimax_m1_tool_call_written_as_the_template_writes_it_round_trips() -> None:
    nxt = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [_call('{"city": "Oslo"}')]},
        {"role": "tool", "tool_call_id": "call0", "content": "sunny"},
    ]
    r = _verify("minimax_m1", USER, M1_CALL, nxt)
    assert r.parsed.tool_calls[0]["function"]["arguments"] == '{"city": "Oslo"}'
    assert r.round_trips and r.cause is None


def test_minimax_m1_re_serialises_compact_arguments() -> None:
    compact = M1_CALL.replace('{"city": "Oslo"}', '{"city":"Oslo"}')
    nxt = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [_call('{"city":"Oslo"}')]},
        {"role": "tool", "tool_call_id": "call0", "content": "sunny"},
    ]
    r = _verify("minimax_m1", USER, compact, nxt)
    assert not r.round_trips and r.cause is Cause.TOOL_CALL_RESERIALIZED
    assert "reserialize_tool_arguments" in _horizon_kinds("minimax_m1", USER, compact)


def test_minimax_m1_drops_the_content_of_a_tool_call_turn() -> None:
    text = "Checking.\n" + M1_CALL
    nxt = [
        *USER,
        {"role": "assistant", "content": "Checking.", "tool_calls": [_call('{"city": "Oslo"}')]},
        {"role": "tool", "tool_call_id": "call0", "content": "sunny"},
    ]
    r = _verify("minimax_m1", USER, text, nxt)
    assert r.parsed.content == "Checking."
    history = _reference("minimax_m1", nxt, TOOLS, False)
    assert "Checking." not in history  # the template renders the calls alone
    assert not r.round_trips
    assert r.diverged_at is not None and r.diverged_at <= len(r.prompt.token_ids) + 1
    assert "drop_tool_call_content" in _horizon_kinds("minimax_m1", USER, text)


def test_minimax_m1_never_renders_reasoning_and_keeps_an_answer_without_it() -> None:
    answer = "The sky is clear.<end_of_sentence>"
    nxt = [
        *USER,
        {"role": "assistant", "content": "The sky is clear."},
        {"role": "user", "content": "Thanks."},
    ]
    assert _verify("minimax_m1", USER, answer, nxt, tools=None).round_trips
    thought = "<think>\nIt is sunny.\n</think>\n\n" + answer
    nxt[1] = {"role": "assistant", "content": "The sky is clear.", "reasoning_content": "It is sunny."}
    r = _verify("minimax_m1", USER, thought, nxt, tools=None)
    assert r.parsed.reasoning == "It is sunny."
    assert "It is sunny." not in _reference("minimax_m1", nxt, None, False)
    assert not r.round_trips and r.cause is Cause.HIDDEN_REASONING_DROPPED
    assert "drop_all_reasoning" in _horizon_kinds("minimax_m1", USER, thought, tools=None)


# -- LFM2.5 ------------------------------------------------------------------------------------

LFM_CALL = "<|tool_call_start|>[get_weather(city='Oslo', days=2)]<|tool_call_end|><|im_end|>"
LFM_LOOP = [
    *USER,
    {"role": "assistant", "content": "", "tool_calls": [_call('{"city": "Oslo", "days": 2}')]},
    {"role": "tool", "tool_call_id": "call0", "content": "sunny"},
]


def test_lfm2_facts_are_labelled() -> None:
    fam = family("lfm2")
    assert fam.spec.hybrid and "Lfm2MoeForCausalLM" in fam.spec.architecture
    assert fam.tokenizer.stand_in and "no LFM2.5 vocabulary" in fam.tokenizer.source
    assert "LFM Open License" in fam.spec.variants[0].license
    assert (boundary.shipped.resources.data_dir("templates") / "lfm2" / "NOTICE").is_file()


@pytest.mark.parametrize("kwargs", [{}, {"preserve_thinking": True}], ids=["defaults", "preserve"])
@pytest.mark.parametrize(
    ("messages", "tools"),
    [
        (USER, None),
        ([{"role": "system", "content": "Be brief."}, *USER], TOOLS),
        (LFM_LOOP, TOOLS),
        ([*USER, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Easy."}, *USER], None),
    ],
    ids=["chat", "system_tools", "tool_result", "reasoning_then_user"],
)
def test_lfm2_exposes_u_end_where_transformers_history_ends(messages, tools, kwargs) -> None:
    r = family("lfm2").render(messages, tools, now=FIXED_NOW, **kwargs)
    history = _reference("lfm2", messages, tools, False, **kwargs)
    assert r.input_end.status is boundary.BoundaryStatus.FOUND
    assert r.input_end.char == len(history) and r.text.startswith(history)
    assert r.text[len(history) :] == "<|im_start|>assistant\n"
    assert len(r.generation_spans) == sum(
        m["role"] == "assistant" for m in messages
    )  # one {% generation %} a turn


def test_lfm2_continued_message_starts_at_its_header() -> None:
    r = family("lfm2").render([*USER, {"role": "assistant", "content": "It is"}], continue_final_message=True)
    assert r.text.endswith("<|im_start|>assistant\nIt is")
    assert r.input_end.char == len(_reference("lfm2", USER, None, False))


def test_lfm2_tool_call_in_the_templates_own_python_round_trips() -> None:
    r = _verify("lfm2", USER, LFM_CALL, LFM_LOOP)
    assert [c["function"]["arguments"] for c in r.parsed.tool_calls] == ['{"city": "Oslo", "days": 2}']
    assert r.round_trips and r.cause is None
    assert "reserialize_tool_arguments" not in _horizon_kinds("lfm2", USER, LFM_CALL)


def test_lfm2_re_writes_double_quoted_strings_in_single_quotes() -> None:
    text = LFM_CALL.replace("'Oslo'", '"Oslo"')
    r = _verify("lfm2", USER, text, LFM_LOOP)
    assert r.parsed.tool_calls[0]["function"]["arguments"] == '{"city": "Oslo", "days": 2}'
    assert "city='Oslo'" in _reference("lfm2", LFM_LOOP, TOOLS, False)
    assert not r.round_trips and r.cause is Cause.TOOL_CALL_RESERIALIZED
    assert "reserialize_tool_arguments" in _horizon_kinds("lfm2", USER, text)


def test_lfm2_reads_a_call_that_is_not_python_as_a_problem() -> None:
    fam = family("lfm2")
    prompt = fam.render(USER, TOOLS)
    for text, problem in [
        ("<|tool_call_start|>[get_weather('Oslo')]<|tool_call_end|><|im_end|>", "keyword arguments"),
        ("<|tool_call_start|>[get_weather(city=x)]<|tool_call_end|><|im_end|>", "not a literal"),
        ("<|tool_call_start|>[get_weather(city=]<|tool_call_end|><|im_end|>", "not Python"),
    ]:
        parsed = boundary.outputs.parse_output(fam, text, prompt, tools=TOOLS)
        assert parsed.status is boundary.outputs.OutputStatus.MALFORMED and problem in (parsed.problem or "")


def test_lfm2_keeps_reasoning_in_the_tool_loop_and_drops_it_at_the_next_user_message() -> None:
    text = "<think>Need the weather.</think>" + LFM_CALL
    loop = [*LFM_LOOP]
    loop[1] = {**loop[1], "reasoning_content": "Need the weather."}
    assert _verify("lfm2", USER, text, loop).round_trips
    answer = "<think>Easy.</think>Sunny.<|im_end|>"
    nxt = [*USER, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Easy."}, *USER]
    dropped = _verify("lfm2", USER, answer, nxt, tools=None)
    assert "Easy." not in _reference("lfm2", nxt, None, False)
    assert not dropped.round_trips and dropped.cause is Cause.HIDDEN_REASONING_DROPPED
    assert "drop_reasoning_before_last_user" in _horizon_kinds("lfm2", USER, answer, tools=None)
    kept = _verify("lfm2", USER, answer, nxt, tools=None, preserve_thinking=True)
    assert "<think>Easy.</think>Sunny." in _reference("lfm2", nxt, None, False, preserve_thinking=True)
    assert kept.round_trips
    assert _horizon_kinds("lfm2", USER, answer, tools=None, preserve_thinking=True) == []


def test_minimax_m1_trims_an_answer_and_the_horizon_stops_before_the_trimmed_whitespace() -> None:
    nxt = [*USER, {"role": "assistant", "content": "Sunny.  "}, {"role": "user", "content": "Thanks."}]
    r = _verify("minimax_m1", USER, "Sunny.  <end_of_sentence>", nxt, tools=None)
    assert "Sunny.<end_of_sentence>" in _reference("minimax_m1", nxt, None, False)
    assert not r.round_trips and r.cause is Cause.WHITESPACE
    fam = family("minimax_m1")
    prompt = fam.render(USER, now=FIXED_NOW)
    ids = fam.tokenizer.encode_ids("Sunny.  <end_of_sentence>")
    parsed = boundary.outputs.parse_output(fam, ids, prompt)
    horizon = stability_horizon(fam, prompt, ids, parsed, USER)
    assert horizon.limit is not None and horizon.limit.rewrite == "trim_content"
    assert horizon.position <= r.reusable_length
    assert "trim_content" not in _horizon_kinds("minimax_m1", USER, "Sunny.<end_of_sentence>", tools=None)
