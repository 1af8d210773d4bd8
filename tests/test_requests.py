"""Requests as the ecosystem sends them: template kwargs a template never reads are dropped as
vLLM drops them, messages reach templates as transformers passes them, a prefilled final
message is continued as transformers continues it, and the request limits (nesting depth,
lone surrogates) give typed errors instead of crashes."""

from __future__ import annotations

import json
from functools import cache
from types import SimpleNamespace
from typing import Any

import pytest

import boundary
from boundary.request.limits import MAX_NESTING, json_text_nesting
from tests.support import (
    FIXED_NOW,
    family,
    fixed_strftime,
    fixture_cases,
    keyed_session,
    reference_request,
    reference_tokenizer,
)

USER = {"role": "user", "content": "What is the weather in Rome?"}
CALL = {"id": "call_1ab2c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _nested_text(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def _nested_object(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def _tool_turn(arguments: Any) -> list[dict[str, Any]]:
    return [
        USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{**CALL, "function": {**CALL["function"], "arguments": arguments}}],
        },
    ]


@cache
def _hf(template: str) -> Any:
    """transformers' fast tokenizer over the Qwen3 vocabulary with ``template``."""
    return family("qwen3").tokenizer.to_transformers(template)


def _custom(template: str) -> boundary.Family:
    return boundary.Family.from_template(template, _hf(template))


# -- request limits -----------------------------------------------------------------------------
def test_json_text_nesting_counts_brackets_outside_strings() -> None:
    assert json_text_nesting("1") == 0
    assert json_text_nesting('{"a": [1, {"b": "[[[{{{"}]}') == 3
    assert json_text_nesting(_nested_text(70)) == 70
    assert json_text_nesting('{"a": "\\"[[["}') == 1


def test_arguments_nested_up_to_the_limit_render() -> None:
    fam = family("qwen3_5")
    assert fam.render(_tool_turn(_nested_text(MAX_NESTING)), add_generation_prompt=False).token_ids
    assert fam.render(_tool_turn(_nested_object(MAX_NESTING)), add_generation_prompt=False).token_ids


@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 5_000, 200_000])
@pytest.mark.parametrize("form", ["text", "object"])
def test_arguments_nested_deeper_than_the_limit_are_a_typed_error(levels: int, form: str) -> None:
    arguments = _nested_text(levels) if form == "text" else _nested_object(levels)
    for render in (family("qwen3_5").render, keyed_session(family("qwen3_5")).render):
        with pytest.raises(boundary.RequestError) as info:
            render(_tool_turn(arguments))
        assert str(info.value) == (
            "messages[1].tool_calls[0].function.arguments: nested deeper than 64 levels"
        )


@pytest.mark.parametrize(
    ("messages", "tools", "location"),
    [
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": _nested_object(80)}]}],
            None,
            "messages[0].content[0]",
        ),
        (
            [{"role": "user", "content": "hi", "metadata": _nested_object(3_000)}],
            None,
            "messages[0].metadata",
        ),
        (
            [USER],
            [{"type": "function", "function": {"name": "f", "parameters": _nested_object(MAX_NESTING + 1)}}],
            "tools[0].function.parameters",
        ),
    ],
)
def test_other_fields_nested_too_deep_are_a_typed_error(messages, tools, location: str) -> None:
    with pytest.raises(boundary.RequestError) as info:
        family("qwen3_5").render(messages, tools)
    assert info.value.location == location
    assert info.value.detail == "nested deeper than 64 levels"


@pytest.mark.parametrize(
    ("messages", "tools", "location"),
    [
        ([{"role": "user", "content": "a\ud800b"}], None, "messages[0].content"),
        (
            [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}],
            None,
            "messages[0].content[0].text",
        ),
        (_tool_turn('{"city": "\\ud800"}'), None, "messages[1].tool_calls[0].function.arguments"),
        (_tool_turn({"city": "\ud800"}), None, "messages[1].tool_calls[0].function.arguments.city"),
        ([{"role": "user", "content": "ok", "note": {"\ud800": 1}}], None, "messages[0].note"),
        ([{"role": "user", "content": "\ud83d\ude00"}], None, "messages[0].content"),  # a pair, unjoined
        (
            [USER],
            [{"type": "function", "function": {"name": "f", "description": "\ud800"}}],
            "tools[0].function.description",
        ),
    ],
)
def test_lone_surrogates_are_a_typed_error(messages, tools, location: str) -> None:
    for render in (family("qwen3_5").render, family("qwen3_5").session().render):
        with pytest.raises(boundary.RequestError) as info:
            render(messages, tools)
        assert info.value.location == location
        assert "lone surrogate" in info.value.detail


def test_valid_astral_text_is_accepted() -> None:
    assert family("qwen3_5").render([{"role": "user", "content": "weather \U0001f600"}]).token_ids


def test_documents_and_template_kwargs_are_checked_too() -> None:
    fam = _custom("{{ documents }}{{ extra }}{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(boundary.RequestError, match=r"^documents\[0\]: nested deeper than 64 levels$"):
        fam.render([USER], documents=[_nested_object(100)])
    with pytest.raises(boundary.RequestError, match=r"^template_kwargs\.extra: contains a lone surrogate"):
        fam.render([USER], extra="\ud800")


# -- template kwargs ----------------------------------------------------------------------------
CLIENT_KWARGS = {
    "enable_thinking": False,
    "reasoning_effort": "low",
    "thinking": True,
    "preserve_thinking": True,
    "custom_instructions": "be brief",
    "bos_token": "<s>",
}


def test_kwargs_the_template_does_not_read_are_dropped_and_listed() -> None:
    fam = family("qwen3_5")
    r = fam.render([USER], enable_thinking=False, reasoning_effort="low", colour="red")
    assert r.ignored_template_kwargs == ("reasoning_effort", "colour")
    plain = fam.render([USER], enable_thinking=False)
    assert (r.text, r.token_ids, r.input_end) == (plain.text, plain.token_ids, plain.input_end)
    assert plain.ignored_template_kwargs == ()
    assert r.text.endswith("<think>\n\n</think>\n\n")
    assert fam.session().render([USER], enable_thinking=False, colour="red").ignored_template_kwargs == (
        "colour",
    )
    with pytest.raises(boundary.RequestError, match=r"template_kwargs\.colour"):
        fam.render([USER], colour="red", strict_template_kwargs=True)


def test_kwargs_that_vllm_refuses_or_that_change_tokenization_are_errors() -> None:
    fam = family("qwen3_5")
    with pytest.raises(boundary.RequestError, match=r"template_kwargs\.tokenize"):
        fam.render([USER], tokenize=False)
    with pytest.raises(boundary.RequestError, match=r"template_kwargs\.truncation"):
        fam.render([USER], truncation=True, max_length=3)
    assert fam.render([USER], return_dict=False).ignored_template_kwargs == ("return_dict",)


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("name", "variant"),
    [(n, v.name) for n in boundary.family_names() for v in boundary.family_spec(n).variants],
)
def test_dropped_kwargs_are_the_ones_vllm_drops_and_the_text_is_transformers(name: str, variant: str) -> None:
    from vllm.renderers.hf import resolve_chat_template_kwargs

    fam = family(name)
    hf = reference_tokenizer(name, variant)
    given = dict(CLIENT_KWARGS)
    accepted = resolve_chat_template_kwargs(hf, fam.template(variant), given)
    messages = next(c for c in fixture_cases() if c["name"] == "multi_turn")["messages"]
    r = fam.render(messages, variant=variant, now=FIXED_NOW, **given)
    assert set(r.ignored_template_kwargs) == set(given) - set(accepted)
    prepared, _ = reference_request(fam, messages, None, variant)
    assert r.text == hf.apply_chat_template(
        prepared, add_generation_prompt=True, tokenize=False, strftime_now=fixed_strftime, **accepted
    )


@pytest.mark.vllm
def test_held_out_templates_drop_the_kwargs_vllm_drops() -> None:
    from vllm.renderers.hf import resolve_chat_template_kwargs

    from tests.test_family import HELD_OUT

    for path in sorted(HELD_OUT.glob("*.jinja")):
        template = path.read_text(encoding="utf-8")
        accepted = resolve_chat_template_kwargs(_hf(template), template, CLIENT_KWARGS)
        r = _custom(template).render([USER], now=FIXED_NOW, **CLIENT_KWARGS)
        assert set(r.ignored_template_kwargs) == set(CLIENT_KWARGS) - set(accepted), path.name


# -- messages as transformers and vLLM pass them -------------------------------------------------
READS = {
    "thinking": "{% if m.thinking is defined %}[T:{{ m.thinking }}]{% endif %}",
    "reasoning": "{% if m.reasoning is defined %}[R:{{ m.reasoning }}]{% endif %}",
    "reasoning_content": "{% if m.reasoning_content is defined %}[RC:{{ m.reasoning_content }}]{% endif %}",
}


def _reading(field: str) -> str:
    return (
        "{% for m in messages %}<{{ m.role }}>" + READS[field] + "{{ m.content }}"
        "{% if m.refusal is defined %}(refusal={{ m.refusal }}){% endif %}</{{ m.role }}>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )


@pytest.mark.parametrize("field", list(READS))
@pytest.mark.parametrize("value", ["step one, then two", None])
def test_a_template_reading_a_reasoning_field_sees_what_transformers_shows_it(field: str, value: Any) -> None:
    template = _reading(field)
    messages = [
        USER,
        {"role": "assistant", "content": "Sunny.", field: value, "refusal": None, "annotations": []},
        {"role": "user", "content": "And tomorrow?"},
    ]
    r = _custom(template).render(messages, target="transformers")
    assert r.text == _hf(template).apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert r.token_ids == _hf(template).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_a_real_template_reading_thinking_reasoning_and_reasoning_content() -> None:
    from tests.test_family import HELD_OUT

    template = (HELD_OUT / "trl_lfm2_2_5_v2.jinja").read_text(encoding="utf-8")
    for field in READS:
        messages = [
            USER,
            {"role": "assistant", "content": "Sunny.", field: "it is summer", "refusal": None},
            {"role": "user", "content": "And tomorrow?"},
        ]
        r = _custom(template).render(messages, preserve_thinking=True, target="transformers")
        ref = _hf(template).apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, preserve_thinking=True
        )
        assert r.text == ref and "it is summer" in ref, field


def test_content_parts_reach_the_template_as_transformers_passes_them() -> None:
    template = (
        "{% for m in messages %}{% for p in m.content %}[{{ p.type }}:"
        "{% if p.type == 'text' %}{{ p.text }}{% elif p.type == 'image_url' %}{{ p.image_url.url }}"
        "{% else %}{{ p.input_audio.format }}{% endif %}]{% endfor %}{% endfor %}"
    )
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    ]
    messages = [{"role": "user", "content": parts}]
    r = _custom(template).render(messages, target="transformers")
    assert r.text == _hf(template).apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


class _Parser:
    model_config = SimpleNamespace(enable_prompt_embeds=False)

    def mm_placeholder_storage(self) -> dict[str, Any]:
        return {}


class _Tracker:  # text-only requests: vLLM's parser never stores media
    def create_parser(self, mm_processor_kwargs: Any = None) -> _Parser:
        return _Parser()


def _vllm_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages vLLM 0.33.0 hands to apply_chat_template for this chat request."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers.chat_utils.chat_message import _postprocess_messages, parse_chat_message_content

    request = ChatCompletionRequest(model="m", messages=json.loads(json.dumps(messages)))
    conversation: list[dict[str, Any]] = []
    for message in request.messages:
        conversation += parse_chat_message_content(message, _Tracker(), "string", False)
    _postprocess_messages(conversation)
    return conversation


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("field", "sent"), [("reasoning", "reasoning_content"), ("reasoning_content", "reasoning")]
)
def test_reasoning_under_either_name_reaches_the_template_as_vllm_passes_it(field: str, sent: str) -> None:
    template = _reading(field)
    messages = [
        USER,
        {"role": "assistant", "content": "Sunny.", sent: "summer"},
        {"role": "user", "content": "Why?"},
    ]
    r = _custom(template).render(messages)
    ref = _hf(template).apply_chat_template(
        _vllm_conversation(messages), add_generation_prompt=True, tokenize=False
    )
    assert r.text == ref and "summer" in ref


@pytest.mark.vllm
def test_messages_the_openai_sdk_echoes_render_as_vllm_renders_them() -> None:
    from openai.types.chat import ChatCompletionMessage

    echoed = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "tool_calls": [
                {
                    "id": "call_1ab2c",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                }
            ],
        }
    ).model_dump()
    messages = [USER, echoed, {"role": "tool", "tool_call_id": "call_1ab2c", "content": "22 C"}]
    fam = family("qwen3_5")
    r = fam.render(messages, [WEATHER_TOOL])
    hf = reference_tokenizer("qwen3_5", fam.default_variant)
    assert r.text == hf.apply_chat_template(
        _vllm_conversation(messages), tools=[WEATHER_TOOL], add_generation_prompt=True, tokenize=False
    )


@pytest.mark.vllm
def test_deepseek_v3_1_tool_arguments_are_objects_as_vllm_passes_them() -> None:
    fam = family("deepseek_v3")
    case = next(c for c in fixture_cases() if c["name"] == "tool_loop_two_steps")
    hf = reference_tokenizer("deepseek_v3", "v3_1")
    conversation = _vllm_conversation(case["messages"])
    r = fam.render(case["messages"], case.get("tools"), variant="v3_1")
    assert r.text == hf.apply_chat_template(
        conversation, tools=case.get("tools"), add_generation_prompt=True, tokenize=False
    )
    assert r.token_ids == hf.apply_chat_template(
        conversation, tools=case.get("tools"), add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert '<｜tool▁sep｜>{"' in r.text and '<｜tool▁sep｜>"' not in r.text


def test_deepseek_v3_1_takes_objects_and_v3_keeps_the_text() -> None:
    fam = family("deepseek_v3")
    assert fam.tool_arguments("v3_1") == "object"
    assert fam.tool_arguments("v3") == fam.tool_arguments() == "string"
    turn = [*_tool_turn('{"city":"Rome"}'), {"role": "tool", "tool_call_id": CALL["id"], "content": "22 C"}]
    assert '<｜tool▁sep｜>{"city": "Rome"}<｜tool▁call▁end｜>' in fam.render(turn, variant="v3_1").text
    assert '\n```json\n{"city":"Rome"}\n```' in fam.render(turn, variant="v3").text


# -- continue_final_message ---------------------------------------------------------------------
PREFILL = {"role": "assistant", "content": "Sure, the answer is"}


def _continue_matrix() -> list[Any]:
    names = [
        "qwen3_5",
        "qwen3",
        "qwen3_6",
        "nemotron_3",
        "granite_4_h",
        "minimax_m2",
        "deepseek_v3",
        "mistral",
        "zamba2",
        "minimax_m1",
        "lfm2",
    ]
    cases = [
        c
        for c in fixture_cases()
        if c["name"] in ("single_turn", "multi_turn", "tool_loop", "reasoning_in_history")
    ]
    return [
        pytest.param(name, variant.name, case, id=f"{name}-{variant.name}-{case['name']}")
        for name in names
        for variant in boundary.family_spec(name).variants
        for case in cases
    ]


@pytest.mark.parametrize(("name", "variant", "case"), _continue_matrix())
def test_continue_final_message_matches_transformers(name: str, variant: str, case: dict[str, Any]) -> None:
    fam = family(name)
    raw = [*case["messages"], PREFILL]
    messages, tools = reference_request(fam, raw, case.get("tools"), variant)
    hf = reference_tokenizer(name, variant)

    def reference(msgs: list[dict[str, Any]], tokenize: bool, **options: Any) -> Any:
        return hf.apply_chat_template(
            msgs, tools=tools, tokenize=tokenize, return_dict=False, strftime_now=fixed_strftime, **options
        )

    try:
        text = reference(messages, False, continue_final_message=True)
    except Exception as exc:  # the template refuses a final assistant message, or drops its content
        with pytest.raises(boundary.BoundaryError):
            fam.render(raw, case.get("tools"), variant=variant, now=FIXED_NOW, continue_final_message=True)
        assert exc is not None
        return
    r = fam.render(raw, case.get("tools"), variant=variant, now=FIXED_NOW, continue_final_message=True)
    assert r.text == text and r.text.endswith("Sure, the answer is")
    assert r.token_ids == reference(messages, True, continue_final_message=True)
    assert r.p_end == len(r.token_ids)
    # Oracle for U_end: the conversation before the prefilled message, rendered as history.
    history = reference(messages[:-1], False, add_generation_prompt=False)
    # Where the template closes the previous turn inside the next one (DeepSeek-V3 writes
    # "<｜tool▁outputs▁end｜>" as the final message begins), U_end is before that closer.
    assert r.u_end is not None
    if r.text.startswith(history):
        assert r.input_end.char <= len(history), r.input_end
        if name != "deepseek_v3":
            assert r.input_end.char == len(history), r.input_end
            history_ids = reference(messages[:-1], True, add_generation_prompt=False)
            if r.token_ids[: len(history_ids)] == history_ids:
                assert r.u_end == len(history_ids)
    session = fam.session()
    session.render(raw[:-1], case.get("tools"), variant=variant, now=FIXED_NOW)
    assert (
        session.render(raw, case.get("tools"), variant=variant, now=FIXED_NOW, continue_final_message=True)
        == r
    )


def test_continue_final_message_u_end_on_qwen3_5_is_the_start_of_the_prefilled_turn() -> None:
    r = family("qwen3_5").render([USER, PREFILL], continue_final_message=True)
    assert r.text[r.input_end.char :] == "<|im_start|>assistant\n<think>\n\n</think>\n\nSure, the answer is"
    assert r.u_end is not None and r.u_end < r.p_end


def test_continue_a_named_field_and_a_list_of_text_parts_as_transformers_does() -> None:
    fam = family("qwen3_5")
    hf = reference_tokenizer("qwen3_5", fam.default_variant)
    reasoning = [USER, {"role": "assistant", "content": "", "reasoning_content": "Rome is in"}]
    r = fam.render(reasoning, continue_final_message="reasoning_content")
    prepared, _ = reference_request(fam, reasoning)
    assert r.text == hf.apply_chat_template(
        prepared, continue_final_message="reasoning_content", tokenize=False
    )
    assert r.text.endswith("Rome is in")
    parts = [
        USER,
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "It is"}, {"type": "text", "text": "sunny and"}],
        },
    ]
    r = fam.render(parts, continue_final_message=True)
    prepared, _ = reference_request(fam, parts)
    assert r.text == hf.apply_chat_template(prepared, continue_final_message=True, tokenize=False)
    assert r.text.endswith("sunny and")


def test_continue_final_message_refuses_what_transformers_refuses() -> None:
    fam = family("qwen3_5")
    hf = reference_tokenizer("qwen3_5", fam.default_variant)
    prepared, _ = reference_request(fam, [USER, PREFILL])
    with pytest.raises(ValueError, match="not compatible"):
        hf.apply_chat_template(
            prepared, continue_final_message=True, add_generation_prompt=True, tokenize=False
        )
    with pytest.raises(boundary.RequestError, match="not compatible"):
        fam.render([USER, PREFILL], add_generation_prompt=True, continue_final_message=True)
    with pytest.raises(ValueError, match='no "reasoning_content" to continue'):
        hf.apply_chat_template(prepared, continue_final_message="reasoning_content", tokenize=False)
    with pytest.raises(boundary.RequestError) as info:
        fam.render([USER, PREFILL], continue_final_message="reasoning_content")
    assert info.value.location == "messages[1].reasoning_content"


def test_continue_final_message_u_end_is_unavailable_when_the_loop_never_began_the_message() -> None:
    template = "{{ messages[0].content }}|{{ messages[1].content }}{% if add_generation_prompt %}>{% endif %}"
    r = _custom(template).render([USER, PREFILL], continue_final_message=True)
    assert r.text == _hf(template).apply_chat_template(
        [USER, PREFILL], continue_final_message=True, tokenize=False
    )
    assert r.u_end is None and "never began the final message" in r.input_end.reason
