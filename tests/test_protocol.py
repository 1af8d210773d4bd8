"""Bad requests get a typed error that names the message index and field."""

from __future__ import annotations

import pytest

import boundary
from boundary.protocol import parse_messages, parse_tools, to_template_messages

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}


@pytest.mark.parametrize(
    ("messages", "location", "text"),
    [
        ([{"role": "robot", "content": "x"}], "messages[0].role", "unknown role 'robot'"),
        ([{"content": "x"}], "messages[0].role", "missing"),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": 3}],
            "messages[1].content",
            "got int",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "content": "r"},
            ],
            "messages[2].tool_call_id",
            "Field required",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "content": "r", "tool_call_id": ""},
            ],
            "messages[2].tool_call_id",
            "at least 1",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "tool", "content": "r", "tool_call_id": "call_9"}],
            "messages[1].tool_call_id",
            "does not answer any earlier tool call",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{a: 1"}}],
                },
            ],
            "messages[1].tool_calls[0].function.arguments",
            "not valid JSON",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[1, 2]"}}],
                },
            ],
            "messages[1].tool_calls[0].function.arguments",
            "expected a JSON object, got list",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "messages[0].content",
            "",
        ),
        ([{"role": "user", "content": "a", "colour": "red"}], "messages[0].colour", "unexpected field"),
        (["hello"], "messages[0]", "expected an object, got str"),
        ([], "messages", "empty conversation"),
    ],
)
def test_bad_messages_name_the_index_and_field(messages, location: str, text: str) -> None:
    with pytest.raises(boundary.RequestError) as info:
        parse_messages(messages)
    assert info.value.location.startswith(location), info.value
    assert text in str(info.value)
    assert str(info.value).startswith(info.value.location + ": ")


def test_a_string_is_not_a_conversation() -> None:
    with pytest.raises(boundary.RequestError, match="messages: expected a list"):
        parse_messages("hello")  # type: ignore[arg-type]


def test_bad_tools_name_the_index_and_field() -> None:
    with pytest.raises(boundary.RequestError) as info:
        parse_tools([{"type": "function", "function": {"name": "ok"}}, {"type": "function", "function": {}}])
    assert info.value.location == "tools[1].function.name"


def test_render_rejects_bad_input_before_rendering() -> None:
    fam = boundary.load_family("qwen3_5")
    with pytest.raises(boundary.RequestError, match=r"messages\[1\]\.role"):
        fam.render([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}])


def test_template_kwargs_the_template_never_reads_are_rejected() -> None:
    fam = boundary.load_family("qwen3_5")
    with pytest.raises(boundary.RequestError, match=r"template_kwargs\.enable_thinkng"):
        fam.render([{"role": "user", "content": "a"}], enable_thinkng=False)
    with pytest.raises(
        boundary.RequestError, match=r"template_kwargs\.enable_thinking: expected bool, got str"
    ):
        fam.render([{"role": "user", "content": "a"}], enable_thinking="no")


def test_normalized_messages_keep_what_the_caller_set() -> None:
    msgs = parse_messages(
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": None, "reasoning": "think", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "r"},
        ]
    )
    out = to_template_messages(msgs, reasoning_field="thinking")
    assert out[0] == {"role": "user", "content": "a"}
    assert out[1]["content"] == ""
    assert out[1]["thinking"] == "think" and "reasoning_content" not in out[1]
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    as_text = to_template_messages(msgs, arguments="string")
    assert as_text[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
