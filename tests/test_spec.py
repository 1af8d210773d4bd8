"""Family rules are data: a history-rewrite row in a spec changes the predicted horizon with no
code of its own, and the shipped rule tables say what each rewrite does."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

import boundary
from boundary.shipped.spec import HistoryRewrite
from tests.support import family

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{% endif %}"
)
MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]
DROP_REASONING = {
    "kind": "drop_all_reasoning",
    "trigger": "next_request",
    "part": "reasoning",
    "doc": "reasoning is not rendered in history",
}


def _horizon(rewrites: list[dict[str, Any]], generated_text: str, **template_kwargs: Any) -> tuple[int, Any]:
    """The horizon of a turn of a hand-made family whose only rule is ``rewrites``, and the
    prompt's length in tokens."""
    tok = family("qwen3").tokenizer
    fam = boundary.Family.from_template(
        TEMPLATE,
        tok,
        reasoning_tags=["<think>", "</think>"],
        stop_tokens=["<|im_end|>"],
        history_rewrites=rewrites,
        template_kwargs={"keep_reasoning": {"type": "bool", "default": False, "doc": "keeps it"}},
    )
    prompt = fam.render(MESSAGES, **template_kwargs)
    generated = [*tok.encode_ids(generated_text), tok.token_to_id("<|im_end|>")]
    parsed = boundary.parse_output(fam, generated, prompt)
    horizon = boundary.stability_horizon(
        fam, prompt, generated, parsed, MESSAGES, template_kwargs=template_kwargs
    )
    return len(prompt.token_ids), horizon


def test_without_a_rule_the_whole_turn_is_kept() -> None:
    p, h = _horizon([], "<think>Add them.</think>4")
    generated = len(family("qwen3").tokenizer.encode_ids("<think>Add them.</think>4")) + 1
    assert (h.position, h.limit) == (p + generated, None)


def test_a_reasoning_row_limits_the_horizon_where_the_think_tag_starts() -> None:
    p, h = _horizon([DROP_REASONING], "<think>Add them.</think>4")
    # "assistant" then the <think> added token: the reasoning starts right at P_end, and no
    # whitespace before it can merge with what the re-render writes there
    assert h.position == p
    assert (h.limit.rewrite, h.limit.detail) == (
        "drop_all_reasoning",
        "this turn: reasoning is not rendered in history",
    )


def test_a_reasoning_row_leaves_a_turn_without_reasoning_alone() -> None:
    p, h = _horizon([DROP_REASONING], "4")
    assert (h.position, h.limit) == (p + 2, None)  # "4" and the stop token


def test_the_turns_column_narrows_the_row_to_tool_call_turns() -> None:
    _, h = _horizon([{**DROP_REASONING, "turns": "tool_calls"}], "<think>Add them.</think>4")
    assert h.limit is None


def test_the_unless_column_switches_the_row_off_by_template_kwarg() -> None:
    row = {**DROP_REASONING, "unless": {"keep_reasoning": True}}
    p, on = _horizon([row], "<think>Add them.</think>4")
    _, off = _horizon([row], "<think>Add them.</think>4", keep_reasoning=True)
    assert on.position == p and off.limit is None


def test_a_row_with_a_turn_start_limit_keeps_only_the_history() -> None:
    row = {**DROP_REASONING, "trigger": "new_user_message", "limit": "turn_start"}
    p, h = _horizon([row], "<think>Add them.</think>4")
    history = "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"  # the text before the turn (U_end)
    assert h.position == len(family("qwen3").tokenizer.encode_ids(history)) < p


def test_a_date_or_tools_trigger_is_a_condition_not_a_limit() -> None:
    row = {"kind": "date_in_system_prompt", "trigger": "new_day", "part": "system_prompt", "doc": "date"}
    p, h = _horizon([row], "4")
    assert (h.position, h.holds_while) == (p + 2, ("the date stays the same",))


def test_a_rule_row_must_name_its_trigger_and_part() -> None:
    with pytest.raises(ValidationError, match="trigger"):
        HistoryRewrite(kind="drop_all_reasoning", part="reasoning", doc="x")
    with pytest.raises(ValidationError, match="part"):
        HistoryRewrite(kind="drop_all_reasoning", trigger="next_request", doc="x")


@pytest.mark.parametrize("name", boundary.family_names())
def test_every_shipped_rule_row_is_complete(name: str) -> None:
    for row in boundary.family_spec(name).history_rewrites:
        assert row.trigger and row.part and row.doc, (name, row.kind)
