"""The corpus a template is checked over: named conversations with their tools, built from the
shipped data (tau-bench, MT-bench, BFCL) and a few edge cases.

Where it sits: input data for ``audit.template_check``, before any render: message lists only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest
from typing import Any

from boundary.shipped.datasets import (
    mt_bench_questions,
    mt_bench_reference_answers,
    tau_bench_airline,
    tau_bench_airline_tools,
)

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class CorpusEntry:
    """One conversation of a corpus: its ``name`` (unique in a named corpus; "" for a plain
    message list), messages and tools."""

    name: str
    messages: Messages
    tools: list[dict[str, Any]] | None = None


_TAU_TRAJECTORIES = 4
_TAU_USER_TURNS = 3
_BFCL_ENTRIES = 4
_BFCL_USER_TURNS = 2

_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}


def _call(call_id: str, city: str) -> dict[str, Any]:
    arguments = f'{{"city": "{city}", "unit": "c"}}'
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


EDGE_CASES: tuple[CorpusEntry, ...] = (
    CorpusEntry("edge-single-user", [{"role": "user", "content": "hi"}]),
    CorpusEntry(
        "edge-reasoning-in-history",
        [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is 17 * 3?"},
            {"role": "assistant", "reasoning_content": "17 * 3 = 51.", "content": "51"},
            {"role": "user", "content": "And 51 + 9?"},
        ],
    ),
    CorpusEntry(
        "edge-parallel-tool-calls",
        [
            {"role": "user", "content": "Weather in Oslo and Lima?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("c1", "Oslo"), _call("c2", "Lima")]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"temp": -3}'},
            {"role": "tool", "tool_call_id": "c2", "content": '{"temp": 19}'},
            {"role": "assistant", "content": "Oslo is at -3 C, Lima at 19 C."},
            {"role": "user", "content": "Thanks. And Quito?"},
        ],
        [_WEATHER_TOOL],
    ),
    CorpusEntry(
        "edge-awkward-text",
        [
            {"role": "user", "content": "Keep this verbatim: {{ not_a_variable }} {% raw %}\n\n  \t"},
            {"role": "assistant", "content": "Done: {{ not_a_variable }}\n"},
            {"role": "user", "content": "Now in Ελληνικά, 日本語 and emoji 🙂?"},
        ],
    ),
    CorpusEntry(
        "edge-empty-answer",
        [
            {"role": "user", "content": "Say nothing."},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "Now say something."},
        ],
    ),
)
"""Short conversations at the edges templates trip on: a single message, reasoning in history,
parallel tool calls with their results, text that looks like template syntax or needs several
bytes a character, an empty answer."""


def _cut_at_user_turn(messages: Sequence[Mapping[str, Any]], turn: int) -> Messages:
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return [dict(m) for m in messages[: users[min(turn, len(users)) - 1] + 1]]


def _tau() -> list[CorpusEntry]:
    tools = tau_bench_airline_tools()
    return [
        CorpusEntry(f"tau-bench-{i}", _cut_at_user_turn(t, _TAU_USER_TURNS), tools)
        for i, t in enumerate(tau_bench_airline()[:_TAU_TRAJECTORIES])
    ]


def _mt_bench() -> list[CorpusEntry]:
    answers = mt_bench_reference_answers()
    return [
        CorpusEntry(
            f"mt-bench-{q['question_id']}",
            [
                {"role": "user", "content": q["turns"][0]},
                {"role": "assistant", "content": answers[q["question_id"]][0]},
                {"role": "user", "content": q["turns"][1]},
            ],
        )
        for q in mt_bench_questions()
        if q["question_id"] in answers
    ]


def _bfcl() -> list[CorpusEntry]:
    from boundary.experiment.workloads import bfcl  # the BFCL agent script lives with the workloads

    return [
        CorpusEntry(f"bfcl-{s.name}", _cut_at_user_turn(s.messages, _BFCL_USER_TURNS), s.tools)
        for s in bfcl.scripts(("base",))[:_BFCL_ENTRIES]
    ]


def builtin_corpus() -> list[CorpusEntry]:
    """The shipped corpus: tau-bench airline trajectories (system policy, tool calls and
    results, their inferred tool schemas) cut at their third user turn, alternating with
    MT-bench two-turn chats that ship a reference answer (cut before the second answer); then
    BFCL multi-turn agent conversations with their tools, cut at the second user turn; then
    ``EDGE_CASES``. Fresh lists: callers may change them."""
    mixed = [e for e in chain.from_iterable(zip_longest(_tau(), _mt_bench())) if e is not None]
    edges = [CorpusEntry(e.name, [dict(m) for m in e.messages], e.tools) for e in EDGE_CASES]
    return mixed + _bfcl() + edges
