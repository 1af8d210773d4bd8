"""Our readers return, for turns written by ``format_output``, the message vLLM 0.33.0's
composed parser returns: reasoning and content byte for byte (the framing newline before a
tool call stays in ``content``), arguments as the same JSON value kept as the model wrote
them (vLLM's hermes parser re-dumps them with ``json.dumps``).

vLLM's parsers run on the CPU-importable vLLM wheel; every format vLLM has a parser for is
also covered by the seeded differential corpus (test_vllm_differential.py). Granite 4.0-H
runs on its labelled stand-in tokenizer (``fam.tokenizer.stand_in``).
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
    ("name", "variant"),
    [("qwen3", None), ("granite_4_h", None), ("deepseek_v3", "v3"), ("deepseek_v3", "v3_1")],
)
@pytest.mark.parametrize("message", MESSAGES, ids=["content-and-call", "two-calls"])
def test_tool_calls_read_back_as_vllm_reads_them(name, variant, message):
    from tests.outputs.oracle import vllm_read

    fam = family(name, variant)
    user = [{"role": "user", "content": "Book it."}]
    prompt = fam.render(user, TOOLS, variant=variant)
    out = format_output(fam, prompt, message, variant=variant)
    theirs = vllm_read(name, variant, out.body, tools=TOOLS, messages=user, prompt_ids=prompt.token_ids)
    ours = parse_output(fam, out.token_ids, prompt, tools=TOOLS, variant=variant)
    assert ours.ok and theirs.calls
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in ours.tool_calls] == [
        (n, json.loads(a)) for n, a in theirs.calls
    ]
    assert [c["function"]["arguments"] for c in ours.tool_calls] == [
        c["function"]["arguments"] for c in message["tool_calls"]
    ]  # as written
    assert (ours.content, ours.reasoning) == (theirs.content, theirs.reasoning)
