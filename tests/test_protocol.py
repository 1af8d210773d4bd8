"""Bad requests get a typed error that names the message index and field."""

from __future__ import annotations

import pytest

import boundary
from boundary.request.validation import parse_messages, parse_tools, to_template_messages

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
        (["hello"], "messages[0]", "expected an object, got str"),
        ([{"role": "user", "content": ["hello"]}], "messages[0].content[0]", "expected an object, got str"),
        (
            [{"role": "user", "content": [{"type": "text", "text": 3}]}],
            "messages[0].content[0].text",
            "got int",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "refusal": 3}],
            "messages[1].refusal",
            "got int",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "thinking": ["x"]}],
            "messages[1].thinking",
            "got list",
        ),
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


def test_template_kwargs_the_template_never_reads_are_rejected_when_strict() -> None:
    fam = boundary.load_family("qwen3_5")
    with pytest.raises(boundary.RequestError, match=r"template_kwargs\.enable_thinkng"):
        fam.render([{"role": "user", "content": "a"}], enable_thinkng=False, strict_template_kwargs=True)
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
    # under the name sent, under both names vLLM gives it, and under the family's field
    assert out[1]["thinking"] == out[1]["reasoning"] == out[1]["reasoning_content"] == "think"
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    as_text = to_template_messages(msgs, arguments="string")
    assert as_text[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert "thinking" not in as_text[1]


def test_reasoning_wins_over_reasoning_content_and_the_family_field_set_by_the_caller_is_kept() -> None:
    msgs = parse_messages(
        [
            {"role": "user", "content": "a"},
            {
                "role": "assistant",
                "content": "b",
                "reasoning": "r",
                "reasoning_content": "rc",
                "thinking": "t",
            },
        ]
    )
    out = to_template_messages(msgs, reasoning_field="thinking")[1]
    assert (out["reasoning"], out["reasoning_content"], out["thinking"]) == ("r", "r", "t")


def test_fields_outside_the_schema_pass_through_with_their_values_none_included() -> None:
    raw = [
        {"role": "user", "content": "a", "colour": "red", "meta": {"k": [1, None]}},
        {
            "role": "assistant",
            "content": "b",
            "refusal": None,
            "annotations": [],
            "audio": None,
            "function_call": None,
            "thinking": None,
            "tool_calls": None,
        },
    ]
    out = to_template_messages(parse_messages(raw))
    assert out[0] == raw[0]
    assert out[1] == {k: v for k, v in raw[1].items() if k != "tool_calls"}  # None / [] tool_calls: left out


def test_content_parts_of_any_type_pass_through() -> None:
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1"}},
        {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}},
    ]
    out = to_template_messages(parse_messages([{"role": "user", "content": parts}]))
    assert out[0]["content"] == parts


def test_empty_arguments_mean_no_arguments() -> None:
    call = {**CALL, "function": {"name": "f", "arguments": ""}}
    msgs = parse_messages([{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [call]}])
    assert to_template_messages(msgs)[1]["tool_calls"][0]["function"]["arguments"] == {}
    assert to_template_messages(msgs, arguments="string")[1]["tool_calls"][0]["function"]["arguments"] == ""


@pytest.mark.parametrize(
    ("messages", "location", "text"),
    [
        ([{"role": "user", "content": "a", "colour": "red"}], "messages[0].colour", "unexpected field"),
        (
            [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}],
            "messages[0].content[0].type",
            "unknown content part type 'video_url'",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]}],
            "messages[0].content[0].cache_control",
            "unexpected field",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [{**CALL, "index": 0}]}],
            "messages[1].tool_calls[0].index",
            "unexpected field",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "tool_calls": [{**CALL, "function": {**CALL["function"], "x": 1}}]},
            ],
            "messages[1].tool_calls[0].function.x",
            "unexpected field",
        ),
    ],
)
def test_strict_refuses_what_is_outside_the_openai_schema(messages, location: str, text: str) -> None:
    parse_messages(messages)  # lenient by default
    with pytest.raises(boundary.RequestError) as info:
        parse_messages(messages, strict=True)
    assert info.value.location == location
    assert text in info.value.detail


def test_strict_accepts_the_openai_schema_and_what_the_sdk_echoes() -> None:
    parse_messages(
        [
            {"role": "developer", "content": "d", "name": "ops"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                    {"type": "file", "file": {"file_id": "file-1"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "annotations": [],
                "audio": None,
                "function_call": None,
                "reasoning_content": "r",
                "tool_calls": [CALL],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "r"},
        ],
        strict=True,
    )


def test_strict_tools() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {}, "title": "F"}}
    assert parse_tools([tool]) is not None
    with pytest.raises(boundary.RequestError) as info:
        parse_tools([tool], strict=True)
    assert info.value.location == "tools[0].function.title"


_PLAIN_CASES = [
    {"role": "user", "content": "hi"},
    {"content": "", "role": "assistant"},
    {"role": "system", "content": "caf\u00e9 \U0001f600"},
    {"role": "developer", "content": "x"},  # vLLM adds ``tools``: not plain
    {"role": "user", "content": "x", "name": "n"},
    {"role": "assistant", "content": None},
    {"role": "tool", "content": "x"},
    {"role": "user", "content": [{"type": "text", "text": "x"}]},
]


@pytest.mark.parametrize("family_name", ["qwen3_5", "gpt_oss"])
def test_plain_messages_normalize_as_their_models_do(family_name: str) -> None:
    """A plain message skips the models; its dict is exactly what ``normalize`` makes of its
    model, for every role, in a conversation mixing plain and other messages."""
    from boundary.render.target import VLLM_0_33
    from boundary.request.validation import parse_messages_or_plain, plain_message

    fam = boundary.load_family(family_name).renderer
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "tool_calls": [CALL]},
        {"role": "tool", "content": "r", "tool_call_id": "call_1"},
        *(m for m in _PLAIN_CASES if m["role"] != "tool"),
    ]
    assert [plain_message(m) is not None for m in _PLAIN_CASES] == [True] * 3 + [False] * 5
    parsed = parse_messages_or_plain(messages)
    assert sum(isinstance(p, tuple) for p in parsed) == 4
    ours = fam.normalize_parsed(parsed, variant=None, target=VLLM_0_33)
    theirs = fam.normalize(parse_messages(messages), target=VLLM_0_33)
    assert ours == theirs
    assert [list(m) for m in ours] == [list(m) for m in theirs]  # key order too


@pytest.mark.parametrize(
    ("messages", "location", "text"),
    [
        ([{"role": "user", "content": "a\ud800"}], "messages[0].content", "lone surrogate"),
        (
            [{"role": "user", "content": "a"}, {"role": "tool", "content": "r", "tool_call_id": "c9"}],
            "messages[1].tool_call_id",
            "does not answer",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": 3}],
            "messages[1].content",
            "got int",
        ),
    ],
)
def test_plain_messages_fail_as_parse_messages_fails(messages, location: str, text: str) -> None:
    from boundary.request.validation import parse_messages_or_plain

    errors = []
    for parse in (parse_messages, parse_messages_or_plain):
        with pytest.raises(boundary.RequestError) as exc:
            parse(messages)
        errors.append((exc.value.location, str(exc.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] == location and text in errors[0][1]
