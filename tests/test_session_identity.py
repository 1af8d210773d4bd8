"""A session counts a message or a tool list as seen only when its exact content is: the same
keys in the same order and values of the same types (``1``, ``1.0`` and ``True`` are equal to
Python and print differently in templates), read when it is rendered, so in-place edits of
earlier message objects are seen. Every generated edit is checked against a cold render on
real shipped families. A session revalidates when ``strict_request`` changes, and its cost
per turn stays bounded with a tokenizer whose added tokens strip whitespace."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

import boundary
from boundary.errors import BoundaryError
from boundary.session.session import MIN_KEYED_MESSAGES
from tests.support import family, keyed_session

FAMILIES = [("qwen3_5", "think"), ("qwen3", "current"), ("gpt_oss", "harmony"), ("nemotron_3", "nano")]
_SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# values Python holds equal to each other, which templates print differently
_EQUAL_FORMS: dict[Any, list[Any]] = {0: [0, 0.0, False], 1: [1, 1.0, True], 2: [2, 2.0], "x": ["x"]}


def _call(arguments: Any) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": "book", "arguments": arguments}}


def _conversation(arguments: Any) -> list[dict[str, Any]]:
    """A tool loop that ends on the tool result: the call is in the turn every template prints."""
    return [
        {"role": "user", "content": "book it"},
        {"role": "assistant", "content": "", "tool_calls": [_call(arguments)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]


def _tools(properties: dict[str, Any]) -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": properties}
    return [{"type": "function", "function": {"name": "book", "description": "Book.", "parameters": schema}}]


@st.composite
def equal_but_not_identical(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two dicts Python holds equal: the same keys in another order, each value in another of
    its equal forms (``1`` / ``1.0`` / ``True``), a nested dict reordered too."""
    names = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True))
    values = {n: draw(st.sampled_from(list(_EQUAL_FORMS))) for n in names}

    def one_form(order: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {n: draw(st.sampled_from(_EQUAL_FORMS[values[n]])) for n in order}
        if "nested" in names_with_nested:
            inner = [("p", 1), ("q", "y")]
            out["nested"] = dict(draw(st.permutations(inner)))
        return out

    names_with_nested = draw(st.sampled_from([(), ("nested",)]))
    before = one_form(names)
    after = one_form(list(draw(st.permutations(names))))
    assert before == after
    return before, after


def _check_turns(name: str, variant: str, requests: list[tuple[list[Any], Any]]) -> None:
    """Every request rendered in one session equals its cold render."""
    fam = family(name)
    session = keyed_session(fam)
    for messages, tools in requests:
        cold = fam.render(copy.deepcopy(messages), copy.deepcopy(tools), variant=variant)
        warm = session.render(messages, tools, variant=variant)
        assert warm.text == cold.text
        assert warm.token_ids == cold.token_ids
        assert warm.input_end == cold.input_end


@pytest.mark.parametrize(("name", "variant"), FAMILIES)
@_SETTINGS
@given(edit=equal_but_not_identical())
def test_reordered_or_retyped_tool_call_arguments_are_rendered_anew(
    name: str, variant: str, edit: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    before, after = edit
    _check_turns(name, variant, [(_conversation(before), None), (_conversation(after), None)])


@pytest.mark.parametrize(("name", "variant"), FAMILIES)
@_SETTINGS
@given(edit=equal_but_not_identical(), retype_default=st.booleans())
def test_reordered_tool_properties_or_a_retyped_default_give_a_new_tools_block(
    name: str, variant: str, edit: tuple[dict[str, Any], dict[str, Any]], retype_default: bool
) -> None:
    before, after = ({n: {"type": "integer", "default": v} for n, v in d.items()} for d in edit)
    first = _tools({"when": {"type": "string", "default": 1}, **before})
    second = _tools({"when": {"type": "string", "default": True if retype_default else 1}, **after})
    messages = _conversation({"a": 1})
    _check_turns(name, variant, [(messages, first), (messages, second)])


@pytest.mark.parametrize(("name", "variant"), FAMILIES)
def test_arguments_reordered_and_one_made_a_float_are_not_the_old_text(name: str, variant: str) -> None:
    """The issue's own example, spelled out: ``{"b": "x", "a": 1}`` after ``{"a": 1, "b": "x"}``,
    then ``1.0`` after ``1``."""
    requests = [({"a": 1, "b": "x"}), ({"b": "x", "a": 1}), ({"b": "x", "a": 1.0}), ({"b": "x", "a": True})]
    _check_turns(name, variant, [(_conversation(a), None) for a in requests])


@pytest.mark.parametrize(("name", "variant"), FAMILIES)
@_SETTINGS
@given(edit=equal_but_not_identical(), content=st.sampled_from(["", "checking", "booked"]))
def test_dict_messages_edited_in_place_and_resent_are_seen(
    name: str, variant: str, edit: tuple[dict[str, Any], dict[str, Any]], content: str
) -> None:
    before, after = edit
    fam = family(name)
    session = keyed_session(fam)
    messages = _conversation(dict(before))
    session.render(messages, variant=variant)
    arguments = messages[1]["tool_calls"][0]["function"]["arguments"]
    arguments.clear()
    arguments.update(after)  # the same dict object, now in another order / with other types
    messages[1]["content"] = content
    warm = session.render(messages, variant=variant)
    assert warm.token_ids == fam.render(copy.deepcopy(messages), variant=variant).token_ids


class ClientMessage(BaseModel):
    """A client's own pydantic message class, as SDKs build them (extra fields allowed)."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


@pytest.mark.parametrize(("name", "variant"), FAMILIES)
@_SETTINGS
@given(edit=equal_but_not_identical(), content=st.sampled_from(["", "checking", "booked"]))
def test_pydantic_messages_edited_in_place_and_resent_are_seen(
    name: str, variant: str, edit: tuple[dict[str, Any], dict[str, Any]], content: str
) -> None:
    before, after = edit
    fam = family(name)
    session = keyed_session(fam)
    messages = [ClientMessage(**m) for m in _conversation(dict(before))]
    session.render(messages, variant=variant)
    assert messages[1].tool_calls is not None
    arguments = messages[1].tool_calls[0]["function"]["arguments"]
    arguments.clear()
    arguments.update(after)  # a dict inside the model, edited in place
    messages[1].content = content  # a field of the model, set in place
    cold = fam.render([m.model_dump(exclude_unset=True) for m in messages], variant=variant)
    assert session.render(messages, variant=variant).token_ids == cold.token_ids


@pytest.mark.parametrize(("name", "variant"), FAMILIES)
def test_openai_sdk_message_objects_edited_in_place_and_resent_are_seen(name: str, variant: str) -> None:
    chat = pytest.importorskip("openai.types.chat")
    call = chat.ChatCompletionMessageToolCall(
        id="call_1", type="function", function={"name": "book", "arguments": '{"a": 1, "b": "x"}'}
    )
    reply = chat.ChatCompletionMessage(role="assistant", content="checking", tool_calls=[call])
    messages: list[Any] = [
        {"role": "user", "content": "book it"},
        reply,
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    fam = family(name)
    session = keyed_session(fam)
    session.render(messages, variant=variant)
    reply.content = "booked"
    call.function.arguments = '{"b": "x", "a": 1.0}'
    cold = [m if isinstance(m, dict) else m.model_dump(exclude_unset=True) for m in messages]
    assert session.render(messages, variant=variant).token_ids == fam.render(cold, variant=variant).token_ids


def test_unchanged_messages_are_not_revalidated_and_changed_ones_are() -> None:
    """Keys cost no reuse: resending equal content (fresh objects) revalidates nothing new."""
    session = keyed_session(family("qwen3_5"))
    session.render(_conversation({"a": 1, "b": "x"}))
    session.render(_conversation({"a": 1, "b": "x"}))
    assert session.stats.revalidated_messages == 3
    session.render(_conversation({"b": "x", "a": 1}))
    assert session.stats.revalidated_messages == 3 + 2  # from the assistant message on


def test_a_short_request_is_validated_in_full_and_keeps_no_keys() -> None:
    """By default a request of fewer than ``MIN_KEYED_MESSAGES`` keeps no keys (keying costs
    what validating again does); the first longer one keys all its messages, the next reuses
    them, and a short request after that starts over. Every result equals the cold render."""
    fam = family("qwen3_5")
    session = fam.session()
    short = _conversation({"a": 1, "b": "x"})
    longer = [*short, {"role": "assistant", "content": "booked"}, {"role": "user", "content": "thanks"}]
    assert len(short) < MIN_KEYED_MESSAGES <= len(longer)
    counts = []
    for request in (short, short, longer, longer, short, longer):
        assert session.render(request).token_ids == fam.render(request).token_ids
        counts.append(session.stats.revalidated_messages)
    assert counts == [3, 6, 11, 11, 14, 19]


def test_a_short_first_request_keeps_no_ids_and_the_next_encodes_in_full() -> None:
    """A session's first request, when short, costs what a cold render does: its ids are not
    kept, so the next request reuses none and encodes in full; from then on ids are kept,
    short requests included. Every result equals the cold render."""
    fam = family("qwen3_5")
    session = fam.session()
    short = _conversation({"a": 1, "b": "x"})
    longer = [*short, {"role": "assistant", "content": "booked"}, {"role": "user", "content": "thanks"}]
    reused = []
    for request in (short, short, short, longer):
        rendered = session.render(request)
        assert rendered.token_ids == fam.render(request).token_ids
        reused.append(session.stats.reused_tokens)
        assert session._kept.ids == (rendered.token_ids if len(reused) > 1 else [])
    assert reused[0] == reused[1] == 0 < reused[2] < reused[3]


def test_a_request_that_fails_validation_leaves_the_session_as_it_was() -> None:
    """What a session keeps moves on only with a request that validated: resending the failed
    request fails again, and the next good one renders as a cold render does."""
    fam = family("qwen3_5")
    session = keyed_session(fam)
    head = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}]
    bad = [*head, {"role": "tool", "tool_call_id": "nope", "content": "r"}]
    good = [*head, {"role": "user", "content": "next"}]
    session.render(head[:1])
    for request in (bad, bad, good, bad, good):
        try:
            cold: Any = fam.render(request)
            cold = (cold.text, cold.token_ids, cold.u_end)
        except BoundaryError as exc:
            cold = (type(exc), str(exc))
        try:
            warm: Any = session.render(request)
            warm = (warm.text, warm.token_ids, warm.u_end)
        except BoundaryError as exc:
            warm = (type(exc), str(exc))
        assert warm == cold


_EXTRA_FIELD = [{"role": "user", "content": "hi", "metadata": {"trace": 1}}]
_EXTRA_TOOL = [{"type": "function", "function": {"name": "f", "parameters": {}}, "cache_control": {}}]


@pytest.mark.parametrize(
    ("messages", "tools", "field"),
    [
        (_EXTRA_FIELD, None, r"messages\[0\]\.metadata"),
        ([{"role": "user", "content": "hi"}], _EXTRA_TOOL, "tools"),
    ],
    ids=["a-message-field", "a-tool-field"],
)
def test_a_session_revalidates_when_strict_request_is_turned_on(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, field: str
) -> None:
    fam = family("qwen3_5")
    session = keyed_session(fam)
    lenient = session.render(messages, tools)
    with pytest.raises(boundary.RequestError, match=field):
        fam.render(messages, tools, strict_request=True)
    with pytest.raises(boundary.RequestError, match=field):
        session.render(messages, tools, strict_request=True)
    assert session.render(messages, tools).token_ids == lenient.token_ids  # and back again


def _counting(fam: boundary.Family) -> list[int]:
    """Characters the family's tokenizer encodes, one entry per call (patched on the instance)."""
    tok = fam.tokenizer
    calls: list[int] = []
    encode, segment_map = tok.encode, tok.segment_map

    def counted_encode(text: str, **options: Any) -> Any:
        calls.append(len(text))
        return encode(text, **options)

    def counted_segment_map(segment: str) -> Any:
        calls.append(len(segment))
        return segment_map(segment)

    tok.encode = counted_encode  # type: ignore[method-assign]
    tok.segment_map = counted_segment_map  # type: ignore[method-assign]
    return calls


def _lstrip_families() -> list[Any]:
    """A tokenizer built from components whose end-of-turn token strips the whitespace before
    it, and the Qwen3.5 vocabulary with ``<|im_end|>`` made ``lstrip`` (no fast path then)."""
    import tokenizers

    from tests.test_encoding import family as built

    qwen = family("qwen3_5")
    backend = tokenizers.Tokenizer.from_str(qwen.tokenizer.backend.to_str())
    backend.add_special_tokens(
        [tokenizers.AddedToken("<|im_end|>", lstrip=True, normalized=False, special=True)]
    )
    stripped = boundary.Family.from_template(
        qwen.template(), backend, special_tokens=dict(qwen.tokenizer.special_tokens_map)
    )
    return [
        pytest.param(lambda: built("lstrip_rstrip"), id="phi-like"),
        pytest.param(lambda: stripped, id="qwen3_5"),
    ]


@pytest.mark.parametrize("make", _lstrip_families())
def test_thirty_turns_with_an_lstrip_token_encode_only_what_each_turn_changed(make: Any) -> None:
    """Per turn: one encode, of the text after the shared prefix, back to the last safe cut
    before it (at most one message and a few lookaheads back: the start of an lstrip token is
    no cut); never the whole conversation again. The wall-clock bound only catches a hang
    (the issue saw a turn not finish in 30 s)."""
    import time

    from boundary.prefixes import common_prefix_length

    fam = make()
    assert not fam.tokenizer.cut_rule.starts >= fam.tokenizer.cut_rule.ends  # an lstrip token: no start cut
    calls = _counting(fam)
    session = keyed_session(fam)
    lookahead = fam.tokenizer.cut_rule.lookahead
    messages: list[dict[str, Any]] = []
    previous = ""
    started = time.monotonic()
    for turn in range(30):
        role = "user" if turn % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"turn {turn}: change my flight please   \n" * 5})
        del calls[:]
        r = session.render(messages)
        changed = len(r.text) - common_prefix_length(previous, r.text)
        longest = max(len(m["content"]) for m in messages)
        assert len(calls) <= 2 and sum(calls) <= changed + longest + 4 * lookahead + 64, (turn, calls)
        previous = r.text
        if turn % 10 == 9:
            assert r.token_ids == fam.render(messages).token_ids
    assert time.monotonic() - started < 60
    assert session.stats.encoded_tokens < 3 * len(r.token_ids)  # linear overall, not quadratic


def _weather_tools(description: str) -> list[dict[str, Any]]:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    function = {"name": "get_weather", "description": description, "parameters": parameters}
    return [{"type": "function", "function": function}]


@pytest.mark.parametrize("target", ["vllm-0.33", "transformers"])
@pytest.mark.parametrize(("name", "variant"), FAMILIES)
def test_kept_tools_json_is_replayed_and_dropped_when_a_tool_is_edited_in_place(
    name: str, variant: str, target: str
) -> None:
    """A session's tools' ``tojson`` texts are kept with the tool list and replayed while the
    tools are exactly the same; a tool edited in place (the same dict objects) is serialized
    again: every turn equals cold."""
    fam = family(name)
    session = keyed_session(fam)
    tools = _weather_tools(f"Current weather ({name}, {target}).")  # a list no other test sends
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo?"}]
    replays = []
    for turn, edited in enumerate([False, False, True, True]):
        if edited:
            tools[0]["function"]["description"] = f"Weather, edited in place ({name}, {target})."
        messages = [
            *messages,
            {"role": "assistant", "content": f"answer {turn}"},
            {"role": "user", "content": "?"},
        ]
        kept_before = session._tools_json
        before = kept_before.hits if kept_before is not None else 0
        warm = session.render(messages, tools, variant=variant, target=target)
        cold = fam.render(copy.deepcopy(messages), copy.deepcopy(tools), variant=variant, target=target)
        assert (warm.text, warm.token_ids, warm.u_end) == (cold.text, cold.token_ids, cold.u_end)
        assert tools[0]["function"]["description"] in warm.text
        kept = session._tools_json
        assert kept is not None
        replays.append(kept.hits - (before if kept is kept_before else 0))
    if name in ("qwen3_5", "qwen3"):  # templates that write each tool with ``tojson``
        # turn 0 fills the list's memo, turn 1 replays it; the edit is a new list (turn 2 fills
        # its memo), turn 3 replays that
        assert replays[0] == 0 < replays[1] and replays[2] == 0 < replays[3]
