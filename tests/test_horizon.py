"""Stability horizon: predicted from the family's known history rewrites, checked against the
later requests of each fixture conversation.

Families without an offline vocabulary (Nemotron, Granite, MiniMax, gpt-oss, Mistral) use
their labelled stand-in tokenizer (``fam.tokenizer.stand_in``).
"""

from __future__ import annotations

import pytest

from boundary.errors import RequestError, TemplateRenderError
from boundary.outputs import format_output, parse_output
from boundary.prefixes import common_prefix_length as common_prefix
from boundary.verify.horizon import generated_char_ends, stability_horizon
from boundary.verify.roundtrip import ClientHabits
from tests.support import (
    FIXED_NOW,
    family,
    fixed_strftime,
    fixture_cases,
    reference_request,
    reference_tokenizer,
)

CASES = {c["name"]: c for c in fixture_cases()}
TURNS = sum(m["role"] == "assistant" for c in CASES.values() for m in c["messages"])


def _horizon(name, case, index, *, habits=None, variant=None, **kwargs):
    fam = family(name, variant)
    c = CASES[case]
    messages, tools = c["messages"][:index], c.get("tools")
    prompt = fam.render(messages, tools, variant=variant, now=FIXED_NOW, **kwargs)
    out = format_output(fam, prompt, c["messages"][index], variant=variant)
    parsed = parse_output(fam, out.token_ids, prompt, tools=tools, variant=variant)
    prepared, _ = fam.prepare(messages, tools)
    h = stability_horizon(
        fam,
        prompt,
        out.token_ids,
        parsed,
        prepared,
        habits=habits or ClientHabits(),
        variant=variant,
        template_kwargs=kwargs,
    )
    return fam, prompt, out, h


def test_qwen3_5_horizon_is_the_end_of_the_user_turn_that_started_the_tool_loop():
    """Issue example: Qwen3.5 drops the think blocks of the turns after the last user query
    once a new user message arrives, so the horizon is where the first of them starts."""
    _, prompt, _, h = _horizon("qwen3_5", "tool_loop_two_steps", 4)
    first_tool_turn = prompt.message_starts[2]
    assert prompt.text[:first_tool_turn].endswith(
        "Find me a flight from Oslo to Rome on 2024-05-20 and tell me the weather there.<|im_end|>\n"
    )
    assert h.position == prompt.boundary_at(first_tool_turn).token
    assert h.limit.rewrite == "empty_think_block"


def test_keeping_reasoning_in_history_moves_the_horizon_to_the_end_of_the_turn():
    _, prompt, out, h = _horizon("qwen3_6", "reasoning_tool_loop", 1, preserve_thinking=True)
    assert h.limit is None
    assert h.position == len(prompt.token_ids) + len(out.token_ids)
    _, prompt, _, default = _horizon("qwen3_6", "reasoning_tool_loop", 1)
    assert default.position == prompt.u_end
    assert default.limit.rewrite == "drop_reasoning_before_last_user"


def test_tool_call_arguments_written_compactly_limit_the_horizon_unless_sent_back_as_written():
    _, prompt, out, h = _horizon("qwen3", "tool_loop", 2)
    assert h.limit.rewrite == "reserialize_tool_arguments"
    assert len(prompt.token_ids) < h.position < len(prompt.token_ids) + len(out.token_ids)
    _, _, _, as_written = _horizon("qwen3", "tool_loop", 2, habits=ClientHabits(arguments="string"))
    assert as_written.limit is None


def test_a_client_that_drops_reasoning_limits_the_horizon_at_the_turns_reasoning():
    _, prompt, _, h = _horizon(
        "qwen3_6", "reasoning_tool_loop", 1, preserve_thinking=True, habits=ClientHabits(echo_reasoning=False)
    )
    assert h.limit.rewrite == "client_drops_reasoning"
    assert h.position < len(prompt.token_ids)


def test_a_newline_pre_filled_and_written_again_is_a_bpe_merge_at_the_prompt_end():
    _, prompt, _, h = _horizon("qwen3_6", "tool_loop", 2, preserve_thinking=True)
    assert h.limit.rewrite == "bpe_merge"
    assert h.position == len(prompt.token_ids) - 1


def test_date_and_tool_dependent_system_prompts_are_conditions_not_positions():
    assert _horizon("gpt_oss", "multi_turn", 2)[3].holds_while == ("the date stays the same",)
    assert _horizon("granite_4_h", "multi_turn", 2)[3].holds_while == ("the tools stay the same",)


HOLDING = [
    ("qwen3", {}),
    ("qwen3", {"enable_thinking": False}),
    ("qwen3_next", {}),
    ("qwen3_5", {}),
    ("qwen3_5", {"enable_thinking": False}),
    ("qwen3_6", {}),
    ("qwen3_6", {"preserve_thinking": True}),
    ("nemotron_3", {}),
    ("nemotron_3", {"enable_thinking": False}),
    ("nemotron_3", {"truncate_history_thinking": False}),
    ("granite_4_h", {}),
    ("minimax_m2", {}),
    ("gpt_oss", {}),
    ("mistral", {}),
    ("nemotron_nano_v2", {}),
    ("minimax_m1", {}),
    ("lfm2", {}),
    ("lfm2", {"preserve_thinking": True}),
]


def _transformers_refuses(name, messages, tools, kwargs) -> bool:
    """Whether transformers' own render of the request raises (the template refuses it)."""
    fam = family(name)
    prepared, prepared_tools = reference_request(fam, messages, tools)
    try:
        reference_tokenizer(name, fam.default_variant).apply_chat_template(
            prepared,
            tools=prepared_tools,
            add_generation_prompt=True,
            tokenize=False,
            strftime_now=fixed_strftime,
            **kwargs,
        )
    except Exception:
        return True
    return False


# Every turn not checked is counted with its reason; these are all the reasons there are.
# gpt-oss ends a turn at its first call (a turn with several calls cannot be generated);
# Mistral's template refuses some role orders (transformers refuses them too).
REFUSALS = {"gpt_oss": {"several calls in one turn"}, "mistral": {"the template refuses the request"}}


@pytest.mark.parametrize(("name", "kwargs"), HOLDING, ids=[f"{n}-{k}" for n, k in HOLDING])
def test_the_horizon_holds_for_every_later_request_of_each_fixture_conversation(name, kwargs):
    """Every (turn, later request) pair of the fixture corpus is either checked against the
    later request's rendering, or counted as not checkable with its reason; a reason outside
    REFUSALS fails the test."""
    fam = family(name)
    checked, turns, refused = 0, 0, {}
    for case in CASES.values():
        messages, tools = case["messages"], case.get("tools")
        later_ends = [j for j in range(1, len(messages) + 1) if messages[j - 1]["role"] != "assistant"]
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            turns += 1
            try:
                _, prompt, out, h = _horizon(name, case["name"], i, **kwargs)
            except RequestError as exc:
                assert name == "gpt_oss" and "one call per generated turn" in str(exc), exc
                refused.setdefault("several calls in one turn", []).append((case["name"], i))
                continue
            except TemplateRenderError:
                assert _transformers_refuses(name, messages[:i], tools, kwargs), (case["name"], i)
                refused.setdefault("the template refuses the request", []).append((case["name"], i))
                continue
            seq = prompt.token_ids + out.token_ids
            assert h.position <= len(seq)
            for j in [e for e in later_ends if e > i] + [None]:
                later = messages[:j] if j else [*messages, {"role": "user", "content": "Thanks."}]
                try:
                    nxt = fam.render(later, tools, now=FIXED_NOW, **kwargs)
                except TemplateRenderError:
                    assert _transformers_refuses(name, later, tools, kwargs), (case["name"], i, j)
                    refused.setdefault("the template refuses the request", []).append((case["name"], i, j))
                    continue
                assert common_prefix(seq, nxt.token_ids) >= h.position, (case["name"], i, j, h.limit)
                checked += 1
    assert set(refused) <= REFUSALS.get(name, set()), refused
    assert turns == TURNS and checked >= turns, (turns, checked, refused)


def test_xml_values_a_typed_client_sends_back_as_json_limit_the_horizon():
    """Qwen3.6 writes a non-string parameter with tojson: a compact list the model wrote comes
    back with ', ' separators once the client has typed it by the tool's schema."""
    fam = family("qwen3_6")
    messages = [{"role": "user", "content": "Book it."}]
    prompt = fam.render(messages, preserve_thinking=True)
    for arguments, limited in (('{"legs":[1,2],"who":"Ann"}', True), ('{"who":"Ann","n":"2"}', False)):
        message = {
            "role": "assistant",
            "reasoning_content": "Book.",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "book", "arguments": arguments}}
            ],
        }
        out = format_output(fam, prompt, message)
        parsed = parse_output(fam, out.token_ids, prompt)
        h = stability_horizon(
            fam, prompt, out.token_ids, parsed, messages, template_kwargs={"preserve_thinking": True}
        )
        assert (h.limit is not None and h.limit.rewrite == "reserialize_tool_arguments") is limited
        nxt = fam.render(
            [*messages, message, {"role": "tool", "tool_call_id": "a", "content": "ok"}],
            preserve_thinking=True,
        )
        assert common_prefix(prompt.token_ids + out.token_ids, nxt.token_ids) >= h.position


@pytest.mark.parametrize(
    "text",
    ["🫠🪿 𓀀𓀁 ꙮ", "plain words, then 日本語 and émoji 🫠 at the end", " leading space\n\n  tabs\t."],
)
def test_generated_char_ends_agree_with_decoding_each_prefix_whole(text):
    # oracle: decoding the whole prefix up to each token; a prefix that ends inside a character
    # (decodes with a trailing U+FFFD) must end after that character, never before it
    fam = family("qwen3_5")
    ids = fam.tokenizer.encode_ids(text)
    ends = generated_char_ends(fam.tokenizer.decode, ids)
    assert ends[-1] == len(text)
    for i, end in enumerate(ends):
        prefix = fam.tokenizer.decode(ids[: i + 1])
        if prefix.endswith("\ufffd"):
            assert end == len(prefix.rstrip("\ufffd")) + 1
        else:
            assert end == len(prefix)
    assert len(ids) > len(text) or text[0] != "🫠"  # the first case really splits characters
