"""Reader rules taken from vLLM 0.33.0's parsers, pinned without importing vLLM (the
differential corpus in test_vllm_differential.py checks them against vLLM itself)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from boundary.outputs import OutputStatus, RegionKind, parse_output
from boundary.outputs.arguments import convert_parameter, typed_arguments
from tests.support import family


@pytest.mark.parametrize(
    ("text", "schema", "expected"),
    [
        ("5", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, 5),  # Optional[int]: no top-level type
        ("null", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, None),
        ("1", {"enum": ["1", "2"]}, "1"),  # an enum of strings keeps the text
        ("2", {"enum": [1, 2]}, 2),
        ("3.0", {"type": "number"}, 3),
        ("3.0", {"type": "integer"}, 3.0),  # not an int: read as JSON
        ("1", {"type": "boolean"}, True),
        ("0", {"type": "boolean"}, False),
        ("7", {"type": ["string", "integer"]}, 7),  # integer is tried before string
        ("nan", {"type": "number"}, "nan"),  # never NaN / Infinity in JSON
        ("inf", {"type": "number"}, "inf"),
        ("12345678901234567890", {"type": "number"}, 12345678901234567890),  # exact
        ("[1, 2]", {"type": "mystery"}, [1, 2]),  # an unknown type falls back to JSON
        ("x", {"description": "no type"}, "x"),
    ],
)
def test_xml_values_are_typed_by_vllms_rules(text, schema, expected):
    got = convert_parameter(text, schema)
    assert type(got) is type(expected) and got == expected
    json.dumps(got, allow_nan=False)


def test_json_arguments_are_typed_only_where_a_value_changes():
    props = {"n": {"type": "integer"}, "who": {"type": "string"}}
    assert typed_arguments('{"n": "2", "who": "x"}', props) == '{"n": 2, "who": "x"}'
    assert typed_arguments('{"n":2,"who":"x"}', props) == '{"n":2,"who":"x"}'  # as written
    assert typed_arguments('{"n": "2"}', None) == '{"n": "2"}'


def test_nemotron_nano_v2_reads_a_bare_call_and_string_encoded_arguments():
    fam = family("nemotron_nano_v2")
    prompt = fam.render([{"role": "user", "content": "Go."}])
    for body in (
        '<TOOLCALL>{"name": "f", "arguments": {"a": 1}}</TOOLCALL>',
        '<TOOLCALL>[{"name": "f", "arguments": "{\\"a\\": 1}"}]</TOOLCALL>',
    ):
        parsed = parse_output(fam, "Ok.\n</think>\n\n" + body + "\n<SPECIAL_12>", prompt)  # think pre-filled
        assert parsed.ok, parsed.problem
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]
        assert calls == [("f", {"a": 1})]


def test_a_malformed_nemotron_or_hermes_block_is_returned_as_text():
    for name, lead, body, stop in (
        ("nemotron_nano_v2", "Ok.\n</think>\n\n", "<TOOLCALL>[{oops}]</TOOLCALL>", "<SPECIAL_12>"),
        ("granite_4_h", "", '<tool_call>\n{"name": "f", "arguments": {a}}\n</tool_call>', "<|end_of_text|>"),
    ):
        fam = family(name)
        parsed = parse_output(fam, lead + body + stop, fam.render([{"role": "user", "content": "Go."}]))
        assert parsed.status is OutputStatus.MALFORMED and parsed.content == body and not parsed.tool_calls


def test_a_cut_off_mistral_call_is_truncated_not_malformed():
    fam = family("mistral")
    prompt = fam.render([{"role": "user", "content": "Go."}])
    parsed = parse_output(fam, '[TOOL_CALLS]f[ARGS]{"a": [1, ', prompt)
    assert parsed.status is OutputStatus.TRUNCATED


TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": {"properties": {"n": {"type": "integer"}}}}}
]


def _read(name: str, text: str, tools: list | None = TOOLS, **render: object) -> tuple:
    fam = family(name)
    parsed = parse_output(fam, text, fam.render([{"role": "user", "content": "Go."}], **render), tools=tools)
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls]
    return parsed.status, parsed.reasoning, parsed.content, calls


def test_reasoning_and_content_are_the_engines_raw_strings():
    assert _read("qwen3_5", "13*17.\n</think>\n\nNo.<|im_end|>")[1:3] == ("13*17.\n", "\n\nNo.")
    # Nemotron 3's reasoning parser drops the reasoning's trailing whitespace
    assert _read("nemotron_3", "x\n</think>\nNo.<|im_end|>")[1:3] == ("x", "\nNo.")
    # Qwen3 served with the qwen3 reasoning parser: a turn without </think> is all reasoning
    assert _read("qwen3", "Hello.<|im_end|>")[1:3] == ("Hello.", None)


def test_reasoning_whose_opening_think_the_model_left_out_is_read_as_reasoning():
    """Qwen3's prompt opens no think block; a model that starts its turn with the reasoning
    and ``</think>`` (no ``<think>``) gets the reasoning back as reasoning, and boundary's own
    regions agree: the reasoning region runs through the closer, the content is the answer
    only (the regions are what a divergence and the horizon read)."""
    fam = family("qwen3")
    prompt = fam.render([{"role": "user", "content": "Hi"}])
    assert prompt.text.endswith("<|im_start|>assistant\n")
    text = "greet\n</think>\n\nHello.<|im_end|>"
    parsed = parse_output(fam, text, prompt)
    assert parsed.status is OutputStatus.COMPLETE
    assert parsed.message == {"role": "assistant", "content": "\n\nHello.", "reasoning_content": "greet\n"}
    closed = len("greet\n</think>\n\n")
    assert [(r.kind, text[r.start : r.end]) for r in parsed.regions] == [
        (RegionKind.REASONING, text[:closed]),
        (RegionKind.CONTENT, "Hello."),
        (RegionKind.STOP, "<|im_end|>"),
    ]


def test_every_call_is_kept_and_the_text_between_and_after_them_is_dropped():
    call = "<tool_call>\n<function=f>\n<parameter=n>\n{}\n</parameter>\n</function>\n</tool_call>"
    text = "</think>\n\nSure.\n" + call.format(1) + "\nand then\n" + call.format(2) + " ok<|im_end|>"
    status, _, content, calls = _read("qwen3_5", text)
    assert status is OutputStatus.MALFORMED  # boundary's reading: text after the first call
    assert content == "Sure." and calls == [("f", '{"n": 1}'), ("f", '{"n": 2}')]


def test_a_start_tag_in_prose_cuts_the_content_where_the_engine_cuts_it():
    assert _read("qwen3_5", "</think>\n\nUse <tool_call> to call.<|im_end|>")[2] == "\n\nUse "
    # hermes is no engine parser: the whole text stays content
    assert _read("granite_4_h", "Use <tool_call> to call.<|end_of_text|>")[2] == "Use <tool_call> to call."


def test_a_call_missing_its_closer_and_a_bare_function_are_calls():
    fn = "<function=f>\n<parameter=n>\n3\n</parameter>\n</function>"
    assert _read("qwen3_5", "</think>\n\n<tool_call>\n" + fn + "<|im_end|>")[3] == [("f", '{"n": 3}')]
    assert _read("qwen3_5", "</think>\n\n" + fn + "<|im_end|>")[3] == [("f", '{"n": 3}')]


def test_minimax_drops_calls_to_undeclared_tools_and_keeps_values_verbatim():
    def call(name: str, value: str) -> str:
        invoke = f'<invoke name="{name}">\n<parameter name="q">{value}</parameter>\n</invoke>\n'
        return f"<minimax:tool_call>\n{invoke}</minimax:tool_call>[e~["

    declared = [{"type": "function", "function": {"name": "s", "parameters": {"properties": {}}}}]
    assert _read("minimax_m2", call("s", " a b "), declared)[3] == [("s", '{"q": " a b "}')]
    assert _read("minimax_m2", call("cancel", "x"), declared)[3] == []


def test_kimi_and_deepseek_v3_1_pass_arguments_that_are_not_json_through():
    kimi = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{oops"
        "<|tool_call_end|><|tool_calls_section_end|>[EOS]"
    )
    assert _read("kimi_linear", kimi)[3] == [("f", "{oops")]
    fam = family("deepseek_v3", "v3_1")
    prompt = fam.render([{"role": "user", "content": "Go."}], variant="v3_1")
    text = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{oops<｜tool▁call▁end｜>"
    text += "<｜tool▁calls▁end｜>"
    parsed = parse_output(fam, text, prompt, tools=TOOLS, variant="v3_1")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls] == [
        ("f", "{oops")
    ]


def test_a_request_without_tools_gets_no_calls_back():
    call = '[TOOL_CALLS]f[ARGS]{"n": 1}</s>'
    assert _read("mistral", call)[3] == [("f", '{"n": 1}')]
    assert _read("mistral", call, tools=[])[2:] == (None, [])


def test_a_cut_off_turn_is_the_engines_message_with_boundarys_status():
    status, _, content, calls = _read(
        "qwen3_5", "</think>\n\nOk.\n<tool_call>\n<function=f>\n<parameter=n>\n4"
    )
    assert status is OutputStatus.TRUNCATED  # the field says it was cut off; the message is vLLM's
    assert (content, calls) == ("Ok.", [("f", "{}")])  # an unclosed parameter is not read


def test_importing_boundary_never_imports_vllm():
    code = (
        "import sys, boundary, boundary.outputs, boundary.verify.roundtrip; assert 'vllm' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
