"""format_output / parse_output against hand-written model output and vLLM's own parsers.

The oracles: model output written by hand from each family's chat format (what format_output
must write, what parse_output must read from it), and vLLM 0.33.0's composed parsers reading
format_output's turns over every shipped family variant and fixture conversation.

Families without an offline vocabulary (Nemotron, Granite, Kimi, MiniMax, Zamba2, gpt-oss,
Mistral) run on their labelled stand-in tokenizer (``fam.tokenizer.stand_in``: Qwen3 BPE plus
the family's control tokens as single tokens); token ids there are not the real model's.
"""

from __future__ import annotations

import json

import pytest

import boundary
from boundary.errors import RequestError
from boundary.outputs import (
    OutputStatus,
    RegionKind,
    format_output,
    generation_suffix,
    output_format,
    parse_output,
)
from tests.support import FIXED_NOW, WEATHER_TOOLS, family, fixture_cases, shipped_variants

HAND_TOOLS = WEATHER_TOOLS
CALL = {
    "role": "assistant",
    "reasoning_content": "Need the weather.",
    "content": "Checking.",
    "tool_calls": [
        {
            "id": "abcdefghi",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo","days":2}'},
        }
    ],
}
ANSWER = {"role": "assistant", "reasoning_content": "Easy.", "content": "Hello."}
TWO_CALLS = {
    "role": "assistant",
    "reasoning_content": "Need both.",
    "content": None,
    "tool_calls": [
        {
            "id": "abcdefghi",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
        },
        {
            "id": "bcdefghij",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Rome","days":3}'},
        },
    ],
}
BOTH = [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome", "days": 3})]
WEATHER = [("get_weather", {"city": "Oslo", "days": 2})]
# (family, variant, message, the model's output written by hand from its chat format,
#  what a client reads back: (reasoning, content, calls), whitespace around text aside)
HAND_WRITTEN = [
    (
        "qwen3",
        "current",
        CALL,
        "<think>\nNeed the weather.\n</think>\n\nChecking.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city":"Oslo","days":2}}\n</tool_call><|im_end|>',
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "qwen3",
        "current",
        TWO_CALLS,
        "<think>\nNeed both.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Oslo"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Rome","days":3}}\n'
        "</tool_call><|im_end|>",
        ("Need both.", None, BOTH),
    ),
    (
        "qwen3_5",
        "think",
        TWO_CALLS,
        "Need both.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n"
        "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>",
        ("Need both.", None, BOTH),
    ),
    (
        "kimi_linear",
        "instruct",
        TWO_CALLS,
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city":"Oslo"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1'
        '<|tool_call_argument_begin|>{"city":"Rome","days":3}<|tool_call_end|><|tool_calls_section_end|><|im_end|>',
        (None, None, BOTH),
    ),
    (
        "minimax_m2",
        "m2",
        TWO_CALLS,
        "Need both.\n</think>\n\n<minimax:tool_call>\n"
        '<invoke name="get_weather">\n<parameter name="city">Oslo'
        '</parameter>\n</invoke>\n<invoke name="get_weather">\n<parameter name="city">Rome</parameter>\n'
        '<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>[e~[',
        ("Need both.", None, BOTH),
    ),
    (
        "qwen3_next",
        "thinking",
        ANSWER,
        "Easy.\n</think>\n\nHello.<|im_end|>",
        ("Easy.", "Hello.", []),
    ),
    (
        "granite_4_h",
        "small",
        CALL,
        'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Oslo","days":2}}\n'
        "</tool_call><|end_of_text|>",
        (None, "Checking.", WEATHER),
    ),
    (
        "qwen3_5",
        "think",
        CALL,
        "Need the weather.\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
        "</tool_call><|im_end|>",
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "qwen3_5",
        "nothink",
        ANSWER,
        "Hello.<|im_end|>",
        (None, "Hello.", []),
    ),
    (
        "nemotron_3",
        "nano",
        CALL,
        "Need the weather.\n</think>\nChecking.\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
        "</tool_call>\n<|im_end|>",
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "kimi_linear",
        "instruct",
        CALL,
        "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city":"Oslo","days":2}<|tool_call_end|>'
        "<|tool_calls_section_end|><|im_end|>",
        (None, "Checking.", WEATHER),
    ),
    (
        "minimax_m2",
        "m2",
        CALL,
        "Need the weather.\n</think>\n\nChecking.\n<minimax:tool_call>\n"
        '<invoke name="get_weather">\n<parameter name="city">Oslo</parameter>\n'
        '<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>[e~[',
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "mistral",
        "small_3_2",
        CALL,
        'Checking.[TOOL_CALLS]get_weather[CALL_ID]abcdefghi[ARGS]{"city":"Oslo","days":2}</s>',
        # the stand-in's [CALL_ID] is no special token: vLLM's mistral parser keeps it in the name
        (None, "Checking.", [("get_weather[CALL_ID]abcdefghi", {"city": "Oslo", "days": 2})]),
    ),
    (
        "deepseek_v3",
        "v3",
        CALL,
        "Need the weather.\n</think>\n\nChecking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
        '<｜tool▁sep｜>get_weather\n```json\n{"city":"Oslo","days":2}\n```<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "deepseek_v3",
        "v3_1",
        CALL,
        "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city":"Oslo","days":2}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
        (None, "Checking.", WEATHER),
    ),
    (
        "nemotron_nano_v2",
        "9b_v2",
        CALL,
        "Need the weather.\n</think>\n\nChecking.\n\n"
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city":"Oslo","days":2}}]</TOOLCALL>\n<SPECIAL_12>',
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "gpt_oss",
        "harmony",
        CALL,
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary"
        "<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
        '<|constrain|>json<|message|>{"city":"Oslo","days":2}<|call|>',
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "gpt_oss",
        "harmony",
        ANSWER,
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|return|>",
        ("Easy.", "Hello.", []),
    ),
    (
        "minimax_m1",
        "m1",
        CALL,
        "<think>\nNeed the weather.\n</think>\n\nChecking.\n<tool_calls>\n"
        '{"name": "get_weather", "arguments": {"city":"Oslo","days":2}}\n</tool_calls><end_of_sentence>',
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "minimax_m1",
        "m1",
        TWO_CALLS,
        "<think>\nNeed both.\n</think>\n\n<tool_calls>\n"
        '{"name": "get_weather", "arguments": {"city":"Oslo"}}\n'
        '{"name": "get_weather", "arguments": {"city":"Rome","days":3}}\n</tool_calls><end_of_sentence>',
        ("Need both.", None, BOTH),
    ),
    (
        "minimax_m1",
        "m1",
        ANSWER,
        "<think>\nEasy.\n</think>\n\nHello.<end_of_sentence>",
        ("Easy.", "Hello.", []),
    ),
    (
        "lfm2",
        "8b_a1b",
        CALL,
        "<think>Need the weather.</think>Checking.<|tool_call_start|>"
        '[get_weather(city="Oslo", days=2)]<|tool_call_end|><|im_end|>',
        ("Need the weather.", "Checking.", WEATHER),
    ),
    (
        "lfm2",
        "8b_a1b",
        TWO_CALLS,
        "<think>Need both.</think><|tool_call_start|>"
        '[get_weather(city="Oslo"), get_weather(city="Rome", days=3)]<|tool_call_end|><|im_end|>',
        ("Need both.", None, BOTH),
    ),
    (
        "lfm2",
        "8b_a1b",
        ANSWER,
        "<think>Easy.</think>Hello.<|im_end|>",
        ("Easy.", "Hello.", []),
    ),
    (
        "zamba2",
        "instruct",
        ANSWER,
        "Hello.<|im_end|>",
        (None, "Hello.", []),
    ),
]

# Formats whose vLLM 0.33.0 parser runs here: gpt-oss's harmony parser needs the o200k_harmony
# encoding (a download), Nemotron Nano v2's <TOOLCALL> and MiniMax-M1's <tool_calls> have no
# parser in vLLM 0.33.0, LFM2.5 has no vLLM reasoning parser (its think block stays in content
# there) and Zamba2 writes no tool calls; those are covered by the hand-written cases only.
NO_VLLM_ORACLE = {"gpt_oss", "lfm2", "minimax_m1", "nemotron_nano_v2", "zamba2"}
_KIND = {id(CALL): "call", id(TWO_CALLS): "two-calls", id(ANSWER): "answer"}
HAND_IDS = [f"{n}-{v}-{_KIND[id(m)]}" for n, v, m, _, _ in HAND_WRITTEN]


def _hand_prompt(name: str, variant: str):
    return family(name, variant).render(
        [{"role": "user", "content": "Weather?"}], HAND_TOOLS, variant=variant, now=FIXED_NOW
    )


@pytest.mark.parametrize(("name", "variant", "message", "text", "read"), HAND_WRITTEN, ids=HAND_IDS)
def test_format_output_writes_the_turn_as_the_model_writes_it(name, variant, message, text, read):
    out = format_output(family(name, variant), _hand_prompt(name, variant), message, variant=variant)
    assert out.text == text


@pytest.mark.parametrize(("name", "variant", "message", "text", "read"), HAND_WRITTEN, ids=HAND_IDS)
def test_parse_output_reads_hand_written_model_output_as_a_client_receives_it(
    name, variant, message, text, read
):
    parsed = parse_output(
        family(name, variant), text, _hand_prompt(name, variant), tools=HAND_TOOLS, variant=variant
    )
    assert parsed.status is OutputStatus.COMPLETE, parsed.problem
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]
    assert ((parsed.reasoning or "").strip() or None, (parsed.content or "").strip() or None, calls) == read


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("name", "variant", "message", "text", "read"),
    [c for c in HAND_WRITTEN if c[0] not in NO_VLLM_ORACLE],
    ids=[i for i, c in zip(HAND_IDS, HAND_WRITTEN, strict=True) if c[0] not in NO_VLLM_ORACLE],
)
def test_parse_output_reads_hand_written_model_output_byte_for_byte_as_vllm(
    name, variant, message, text, read
):
    from tests.outputs.oracle import vllm_read

    fam = family(name, variant)
    prompt = _hand_prompt(name, variant)
    parsed = parse_output(fam, text, prompt, tools=HAND_TOOLS, variant=variant)
    theirs = vllm_read(
        name,
        variant,
        text.removesuffix(parsed.stop_token or ""),  # vLLM's parsers never see the stop token
        tools=HAND_TOOLS,
        messages=[{"role": "user", "content": "Weather?"}],
        prompt_ids=prompt.token_ids,
    )
    assert (parsed.reasoning, parsed.content) == (theirs.reasoning, theirs.content)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == [
        (n, json.loads(a)) for n, a in theirs.calls
    ]


def _turns():
    for name, variant in shipped_variants():
        for case in fixture_cases():
            for i, m in enumerate(case["messages"]):
                if m["role"] == "assistant":
                    yield pytest.param(name, variant, case, i, id=f"{name}-{variant}-{case['name']}-{i}")


def _normal(message: dict, *, reasoning: bool) -> dict:
    """The message's words and calls. The engine's parsers decide where reasoning ends and
    content starts and keep the framing whitespace (a Qwen3 answer written without a think
    block is reasoning; a family served without a reasoning parser keeps its think block in
    content), so the text compared is reasoning and content together, tags and spacing aside."""
    parts = [message.get("reasoning_content") if reasoning else None, message.get("content")]
    words = " ".join(p.replace("<think>", " ").replace("</think>", " ") for p in parts if p).split()
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or ()
    ]
    return {"text": " ".join(words), "calls": calls}


@pytest.mark.vllm
@pytest.mark.parametrize(("name", "variant", "case", "index"), list(_turns()))
def test_vllms_parser_reads_a_formatted_turn_back_as_the_message_it_was_written_from(
    name, variant, case, index
):
    """format_output over every fixture turn, read by vLLM's own parser (not boundary's): the
    words and calls of the message it was written from come back. Formats without a vLLM
    parser that runs here are checked by the hand-written cases above."""
    fam = family(name, variant)
    messages, tools = case["messages"], case.get("tools")
    prompt = fam.render(messages[:index], tools=tools, variant=variant, now=FIXED_NOW)
    message = messages[index]
    fmt = output_format(fam, variant)
    if message.get("tool_calls") and fmt.syntax is None and not fmt.harmony:
        with pytest.raises(RequestError, match=r"message\.tool_calls"):
            format_output(fam, prompt, message, variant=variant)
        return
    if fmt.harmony and len(message.get("tool_calls") or ()) > 1:
        with pytest.raises(RequestError, match="one call per generated turn"):
            format_output(fam, prompt, message, variant=variant)
        return
    out = format_output(fam, prompt, message, variant=variant)
    assert out.text.endswith(out.stop_token)
    assert out.token_ids[-1] == fam.tokenizer.token_to_id(out.stop_token)
    assert fam.tokenizer.decode(out.token_ids) == out.text
    if name in NO_VLLM_ORACLE:
        return
    from tests.outputs.oracle import vllm_read

    theirs = vllm_read(
        name, variant, out.body, tools=tools, messages=messages[:index], prompt_ids=prompt.token_ids
    )
    if name == "deepseek_v3" and variant == "v3" and "</think>" not in out.text + generation_suffix(prompt):
        # served with deepseek_r1, a turn that never closes <think> is all reasoning
        assert (theirs.reasoning, theirs.content, theirs.calls) == (out.body, None, ())
        return
    read = {
        "reasoning_content": theirs.reasoning,
        "content": theirs.content,
        "tool_calls": [
            {"function": {"name": n.split("[CALL_ID]")[0], "arguments": a}} for n, a in theirs.calls
        ],  # the stand-in's [CALL_ID] is no special token: vLLM's mistral parser keeps it in the name
    }
    writes_reasoning = fmt.harmony or (
        fmt.think is not None
        and not out.text.startswith(fmt.think.close_tag)
        and "</think>" not in prompt.text[prompt.input_end.char :]
    )
    assert _normal(read, reasoning=True) == _normal(message, reasoning=writes_reasoning)


def test_qwen3_5_writes_reasoning_after_the_prefilled_think_and_closes_it_as_its_template_does():
    fam = family("qwen3_5")
    prompt = fam.render([{"role": "user", "content": "Is 221 prime?"}])
    assert prompt.text.endswith("<|im_start|>assistant\n<think>\n")
    out = format_output(fam, prompt, {"role": "assistant", "reasoning_content": "13*17.", "content": "No."})
    assert out.text == "13*17.\n</think>\n\nNo.<|im_end|>"
    parsed = parse_output(fam, out.text, prompt)
    # the engine's strings: the text between the tags, and after the closer, as written
    assert parsed.message == {"role": "assistant", "content": "\n\nNo.", "reasoning_content": "13*17.\n"}
    assert parsed.prefill == "<think>\n"
    assert [r.kind for r in parsed.regions] == [RegionKind.REASONING, RegionKind.CONTENT, RegionKind.STOP]


def test_with_thinking_off_the_prefilled_empty_block_leaves_only_the_answer():
    fam = family("qwen3_5")
    prompt = fam.render([{"role": "user", "content": "Hi"}], enable_thinking=False)
    out = format_output(
        fam, prompt, {"role": "assistant", "reasoning_content": "unused", "content": "Hello."}
    )
    assert out.text == "Hello.<|im_end|>"
    assert parse_output(fam, out.token_ids, prompt).message == {"role": "assistant", "content": "Hello."}


def test_qwen3_opens_its_own_think_block_when_the_prompt_does_not():
    fam = family("qwen3")
    prompt = fam.render([{"role": "user", "content": "Hi"}])
    out = format_output(fam, prompt, {"role": "assistant", "reasoning_content": "greet", "content": "Hello."})
    assert out.text == "<think>\ngreet\n</think>\n\nHello.<|im_end|>"


def test_tool_call_arguments_are_written_exactly_as_given():
    fam = family("qwen3")
    prompt = fam.render([{"role": "user", "content": "Weather?"}])
    args = '{"city":"Oslo",  "days":[1,2]}'
    out = format_output(
        fam,
        prompt,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": args}}
            ],
        },
    )
    assert out.text == f'<tool_call>\n{{"name": "get_weather", "arguments": {args}}}\n</tool_call><|im_end|>'
    parsed = parse_output(fam, out.text, prompt)
    # vLLM's hermes parser re-serializes them: the same JSON value, kept as the model wrote it
    assert parsed.tool_calls[0]["function"]["arguments"] == args
    arguments = next(r for r in parsed.regions if r.kind is RegionKind.ARGUMENTS)
    assert parsed.text[arguments.start : arguments.end] == args


def test_xml_parameters_are_typed_by_the_tool_schema_and_left_as_strings_without_one():
    fam = family("qwen3_5")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "n": {"type": "integer"},
                        "ok": {"type": "boolean"},
                        "tags": {"type": "array"},
                        "s": {"type": "string"},
                    },
                },
            },
        }
    ]
    prompt = fam.render([{"role": "user", "content": "go"}], tools=tools)
    text = (
        "\n</think>\n\n<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=ok>\ntrue\n"
        "</parameter>\n<parameter=tags>\n[1,2]\n</parameter>\n<parameter=s>\n007\n</parameter>\n</function>\n"
        "</tool_call><|im_end|>"
    )
    typed = parse_output(fam, text, prompt, tools=tools)
    assert json.loads(typed.tool_calls[0]["function"]["arguments"]) == {
        "n": 3,
        "ok": True,
        "tags": [1, 2],
        "s": "007",
    }
    untyped = parse_output(fam, text, prompt)
    assert json.loads(untyped.tool_calls[0]["function"]["arguments"]) == {
        "n": "3",
        "ok": "true",
        "tags": "[1,2]",
        "s": "007",
    }


def test_an_output_cut_off_inside_a_tool_call_is_truncated_not_an_exception():
    fam = family("qwen3")
    prompt = fam.render([{"role": "user", "content": "Weather?"}])
    parsed = parse_output(fam, '<tool_call>\n{"name": "get_weather", "argum', prompt)
    assert parsed.status is OutputStatus.TRUNCATED
    assert "cut off" in parsed.problem and "never closed" in parsed.problem


def test_bad_tool_call_json_before_the_stop_token_is_malformed_with_its_reason():
    fam = family("qwen3")
    prompt = fam.render([{"role": "user", "content": "Weather?"}])
    parsed = parse_output(
        fam, '<tool_call>\n{"name": "get_weather", "arguments": {city}}\n</tool_call><|im_end|>', prompt
    )
    assert parsed.status is OutputStatus.MALFORMED
    assert parsed.problem.startswith("tool call 0: not a JSON object")
    assert parsed.tool_calls == []


def test_reasoning_that_never_closes_before_the_stop_is_malformed():
    fam = family("qwen3_5")
    prompt = fam.render([{"role": "user", "content": "Hi"}])
    parsed = parse_output(fam, "thinking forever<|im_end|>", prompt)
    assert parsed.status is OutputStatus.MALFORMED
    assert parsed.reasoning == "thinking forever"
    assert "never closed" in parsed.problem


def test_gpt_oss_writes_analysis_then_a_commentary_call_ending_in_call():
    fam = family("gpt_oss")
    prompt = fam.render([{"role": "user", "content": "Weather?"}], now=FIXED_NOW)
    out = format_output(
        fam,
        prompt,
        {
            "role": "assistant",
            "reasoning_content": "Need weather.",
            "tool_calls": [
                {
                    "id": "x",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
    )
    assert out.text == (
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}<|call|>'
    )
    parsed = parse_output(fam, out.token_ids, prompt)
    assert parsed.ok and parsed.reasoning == "Need weather."
    assert parsed.tool_calls[0]["function"] == {"name": "get_weather", "arguments": '{"city":"Oslo"}'}


def test_gpt_oss_reads_the_header_order_its_template_writes():
    fam = family("gpt_oss")
    prompt = fam.render([{"role": "user", "content": "Weather?"}], now=FIXED_NOW)
    parsed = parse_output(fam, ' to=functions.f<|channel|>commentary json<|message|>{"a": 1}<|call|>', prompt)
    assert parsed.ok and parsed.tool_calls[0]["function"]["name"] == "f"


def test_kimi_numbers_tool_call_ids_across_the_conversation():
    fam = family("kimi_linear")
    history = [
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "functions.f:0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "functions.f:0", "content": "ok"},
    ]
    prompt = fam.render(history)
    out = format_output(
        fam,
        prompt,
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ],
        },
    )
    assert "<|tool_call_begin|>functions.g:1<|tool_call_argument_begin|>{}" in out.text
    assert parse_output(fam, out.text, prompt).tool_calls[0]["id"] == "functions.g:1"


def test_a_message_that_is_not_an_assistant_turn_is_a_request_error():
    fam = family("qwen3")
    prompt = fam.render([{"role": "user", "content": "a"}])
    with pytest.raises(RequestError, match=r"message\.role"):
        format_output(fam, prompt, {"role": "user", "content": "b"})
    with pytest.raises(RequestError, match=r"message.tool_calls\[0\].function.arguments"):
        format_output(
            fam,
            prompt,
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
                ],
            },
        )


def test_generated_ids_end_in_the_stop_token_as_one_id():
    fam = boundary.load_family("qwen3_5")
    prompt = fam.render([{"role": "user", "content": "a"}], enable_thinking=False)
    out = format_output(fam, prompt, {"role": "assistant", "content": "b"})
    assert out.token_ids == [*fam.tokenizer.encode_ids("b"), fam.tokenizer.token_to_id("<|im_end|>")]
    assert out.body == "b"
