"""Our tool-call readers agree with vLLM 0.33.0's own parsers on what the model wrote.

vLLM's parsers run on the CPU-importable vLLM wheel (the XML, Kimi and MiniMax parsers need
``mistral_common``, which the CPU test environment does not carry; those formats are covered
by the format/parse round trip and the template oracle instead). Known, documented
differences: vLLM re-dumps arguments with ``json.dumps`` (we keep the text the model wrote),
and leaves the template's framing newline before a tool call in ``content`` (we drop it).
Granite 4.0-H runs on its labelled stand-in tokenizer (``fam.tokenizer.stand_in``).
"""

from __future__ import annotations

import json

import pytest

from boundary.outputs import format_output, parse_output
from tests.support import family

pytestmark = pytest.mark.vllm

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "book",
            "description": "Book a flight.",
            "parameters": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer"},
                    "legs": {"type": "array"},
                    "who": {"type": "string"},
                },
            },
        },
    }
]
MESSAGES = [
    {
        "role": "assistant",
        "content": "Booking now.",
        "tool_calls": [
            {
                "id": "a",
                "type": "function",
                "function": {
                    "name": "book",
                    "arguments": '{"n":2,"legs":[{"from":"OSL","to":"FCO"}],"who":"Mia Li"}',
                },
            }
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "book", "arguments": '{"n": 1}'}},
            {
                "id": "b",
                "type": "function",
                "function": {"name": "book", "arguments": '{"who": "Ann \\"A\\" B"}'},
            },
        ],
    },
]


@pytest.mark.parametrize(
    ("name", "variant", "parser"),
    [
        ("qwen3", None, "hermes"),
        ("granite_4_h", None, "hermes"),
        ("deepseek_v3", "v3", "deepseek_v3"),
        ("deepseek_v3", "v3_1", "deepseek_v31"),
    ],
)
@pytest.mark.parametrize("message", MESSAGES, ids=["content-and-call", "two-calls"])
def test_tool_calls_read_back_as_vllm_reads_them(name, variant, parser, message):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    fam = family(name, variant)
    prompt = fam.render([{"role": "user", "content": "Book it."}], TOOLS, variant=variant)
    out = format_output(fam, prompt, message, variant=variant)
    hf = fam.tokenizer.to_transformers(fam.template(variant))
    theirs = ToolParserManager.get_tool_parser(parser)(hf).extract_tool_calls(
        out.body,
        ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Book it."}], tools=TOOLS),
    )
    ours = parse_output(fam, out.token_ids, prompt, tools=TOOLS, variant=variant)
    assert ours.ok and theirs.tools_called
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in ours.tool_calls] == [
        (c.function.name, json.loads(c.function.arguments)) for c in theirs.tool_calls
    ]
    assert [c["function"]["arguments"] for c in ours.tool_calls] == [
        c["function"]["arguments"] for c in message["tool_calls"]
    ]  # as written, not re-dumped
    visible = (theirs.content or "").split("</think>")[-1].strip()
    assert (ours.content or "") == visible
