"""Shipped conversations load, and tool schemas inferred from recorded calls fit the calls."""

from __future__ import annotations

import json

from boundary.shipped.datasets import (
    default_conversation,
    inferred_tool_schemas,
    tau_bench_airline,
    tau_bench_airline_tools,
)


def test_tau_bench_has_200_trajectories_in_openai_format() -> None:
    trajectories = tau_bench_airline()
    assert len(trajectories) == 200
    assert sum(m["role"] == "assistant" for t in trajectories for m in t) == 2454


def test_the_default_conversation_ends_on_a_user_turn() -> None:
    conversation = default_conversation()
    assert conversation[0]["role"] == "system" and conversation[-1]["role"] == "user"


def test_inferred_schemas_cover_every_recorded_call() -> None:
    tools = {t["function"]["name"]: t["function"] for t in tau_bench_airline_tools()}
    assert len(tools) == 14
    for conversation in tau_bench_airline():
        for message in conversation:
            for call in message.get("tool_calls") or ():
                schema = tools[call["function"]["name"]]["parameters"]
                args = json.loads(call["function"]["arguments"])
                assert set(schema["required"]) <= set(args) <= set(schema["properties"])
    assert all("inferred" in t["description"] for t in tools.values())


def test_types_are_inferred_from_values_and_widened_when_they_disagree() -> None:
    conversation = [
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1, "b": "x"}'}}]},
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1.5, "c": [1]}'}}],
        },
    ]
    (tool,) = inferred_tool_schemas([conversation])
    params = tool["function"]["parameters"]
    assert params["properties"] == {"a": {"type": "number"}, "b": {"type": "string"}, "c": {"type": "array"}}
    assert params["required"] == ["a"]
