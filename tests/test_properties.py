"""Property tests over generated conversations: on every generated request the renderer
matches transformers, U_end is the token length of the history rendered without the
generation prompt (oracle, tests only), and U_end <= P_end."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import boundary
from tests.support import FIXED_NOW, family, fixed_strftime, reference_request, reference_tokenizer

CONTROL = [
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "\n",
    "<|start|>",
    "<|end|>",
    "<｜Assistant｜>",
    "<|start_of_role|>",
]
TEXT = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
        st.sampled_from(CONTROL),
        st.sampled_from(["Hello", " world", "é", "😀", "  ", "\n\n", "日本", '{"a": 1}']),
    ),
    max_size=6,
).map("".join)


@st.composite
def conversations(draw) -> list[dict]:
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXT)})
    n_calls = 0
    for _ in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": draw(TEXT) or "hi"})
        if draw(st.booleans()):
            reply: dict = {"role": "assistant", "content": draw(TEXT)}
            if draw(st.booleans()):
                reply["reasoning_content"] = draw(TEXT)
            calls = []
            for _ in range(draw(st.integers(0, 2))):
                n_calls += 1
                args = {"q": draw(TEXT), "n": draw(st.integers(-5, 5))}
                calls.append(
                    {
                        "id": f"call{n_calls:05d}",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps(args)},
                    }
                )
            if calls:
                reply["tool_calls"] = calls
            messages.append(reply)
            for call in calls:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": draw(TEXT)})
            if not calls and draw(st.booleans()):
                continue
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": draw(TEXT) or "ok"})
    return messages


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up.",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
            },
        },
    }
]


@pytest.mark.parametrize(
    "name",
    [
        "qwen3",
        "qwen3_5",
        "qwen3_6",
        "nemotron_3",
        "granite_4_h",
        "gpt_oss",
        "deepseek_v3",
        "kimi_linear",
        "minimax_m2",
        "minimax_m1",
        "lfm2",
    ],
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=conversations(), with_tools=st.booleans())
def test_generated_conversations_render_like_transformers_with_u_end_at_the_history_end(
    name: str, messages: list[dict], with_tools: bool
) -> None:
    fam = family(name)
    tools = TOOLS if with_tools else None
    hf = reference_tokenizer(name, fam.default_variant)
    msgs, template_tools = reference_request(fam, messages, tools)

    def reference(agp: bool, tokenize: bool):
        return hf.apply_chat_template(
            msgs,
            tools=template_tools,
            add_generation_prompt=agp,
            tokenize=tokenize,
            return_dict=False,
            strftime_now=fixed_strftime,
        )

    try:
        expected_text = reference(True, False)
    except Exception:  # the template refuses this conversation; so must we
        with pytest.raises(boundary.TemplateRenderError):
            fam.render(messages, tools, now=FIXED_NOW)
        return
    r = fam.render(messages, tools, now=FIXED_NOW)
    assert r.text == expected_text
    assert r.token_ids == reference(True, True)
    history_ids = reference(False, True)
    assert r.token_ids[: len(history_ids)] == history_ids
    assert r.u_end == len(history_ids)
    assert r.u_end <= r.p_end
