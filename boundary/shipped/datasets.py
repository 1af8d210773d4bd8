"""Real conversations shipped with boundary (see ``fixtures/datasets/README.md``).

Where it sits: input data, before the request stage: conversations the CLI, the audit and the
tests feed in.

Loaders return plain OpenAI-format message lists; nothing here renders or tokenizes.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from boundary.shipped.resources import data_dir

Conversation = list[dict[str, Any]]


@cache
def _tau_bench_airline() -> tuple[dict[str, Any], ...]:
    """The shipped trajectories, read once (about 6 MiB held)."""
    with (data_dir("datasets") / "tau_bench" / "gpt-4o-airline.json").open(encoding="utf-8") as f:
        return tuple(json.load(f))


def tau_bench_airline() -> list[Conversation]:
    """200 GPT-4o airline-agent trajectories (50 tasks x 4 trials), tool calls included."""
    return [[dict(m) for m in t["traj"]] for t in _tau_bench_airline()]


_JSON_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "string")


def inferred_tool_schemas(conversations: list[Conversation]) -> list[dict[str, Any]]:
    """Function-tool schemas inferred from the tool calls the conversations make: one tool per
    function name, one parameter per argument name seen, its JSON type from the values seen
    (``number`` when both integers and floats occur), required when every call passes it.

    The tau-bench trajectories do not ship the schemas their agent was given; these stand in
    for them and are labelled as inferred in their descriptions.
    """
    seen: dict[str, list[dict[str, Any]]] = {}
    for conversation in conversations:
        for message in conversation:
            for call in message.get("tool_calls") or ():
                seen.setdefault(call["function"]["name"], []).append(
                    json.loads(call["function"]["arguments"])
                )
    tools = []
    for name in sorted(seen):
        calls = seen[name]
        properties: dict[str, dict[str, str]] = {}
        for args in calls:
            for key, value in args.items():
                kind = _json_type(value)
                known = properties.setdefault(key, {"type": kind})["type"]
                if known != kind:
                    properties[key]["type"] = "number" if {known, kind} <= {"integer", "number"} else "string"
        required = sorted(k for k in properties if all(k in args for args in calls))
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": f"{name.replace('_', ' ')} (inferred from {len(calls)} recorded calls)",
                    "parameters": {"type": "object", "properties": properties, "required": required},
                },
            }
        )
    return tools


def tau_bench_airline_tools() -> list[dict[str, Any]]:
    """Tool schemas for the tau-bench airline trajectories, inferred from their calls."""
    return inferred_tool_schemas(tau_bench_airline())


def default_conversation() -> Conversation:
    """The conversation ``boundary render`` shows by default: the first tau-bench airline
    trajectory up to its 6th user turn (system policy, user turns, tool calls and results)."""
    traj = tau_bench_airline()[0]
    users = [i for i, m in enumerate(traj) if m["role"] == "user"]
    return traj[: users[5] + 1]


@cache
def _jsonl(*parts: str) -> tuple[dict[str, Any], ...]:
    """A shipped JSON-lines data set, read once: one per shipped file."""
    path = data_dir("datasets").joinpath(*parts)
    with path.open(encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def mt_bench_questions() -> list[dict[str, Any]]:
    """80 MT-bench questions: ``question_id``, ``category``, ``turns`` (two user messages)."""
    return [dict(q) for q in _jsonl("mt_bench", "question.jsonl")]


def mt_bench_reference_answers() -> dict[int, list[str]]:
    """GPT-4's two-turn answers where MT-bench ships one (30 questions), by ``question_id``."""
    answers = _jsonl("mt_bench", "reference_answer_gpt-4.jsonl")
    return {a["question_id"]: list(a["choices"][0]["turns"]) for a in answers}


BFCL_MULTI_TURN = ("base", "long_context", "miss_func", "miss_param")


def bfcl_multi_turn(category: str = "base") -> list[dict[str, Any]]:
    """BFCL v4 multi-turn entries (``id``, ``question``: a list of turns, each a list of user
    messages, ``involved_classes``...), each with its ``ground_truth`` call strings per turn."""
    if category not in BFCL_MULTI_TURN:
        known = ", ".join(BFCL_MULTI_TURN)
        raise ValueError(f"unknown BFCL multi-turn category {category!r} (known: {known})")
    name = f"BFCL_v4_multi_turn_{category}.json"
    truth = {a["id"]: a["ground_truth"] for a in _jsonl("bfcl", "possible_answer", name)}
    return [{**dict(e), "ground_truth": truth.get(e["id"])} for e in _jsonl("bfcl", name)]


def bfcl_function_docs() -> dict[str, list[dict[str, Any]]]:
    """BFCL tool schemas (BFCL's own format, ``parameters.type == "dict"``) by doc file stem."""
    folder = data_dir("datasets") / "bfcl" / "multi_turn_func_doc"
    return {
        p.stem: [dict(d) for d in _jsonl("bfcl", "multi_turn_func_doc", p.name)]
        for p in sorted(folder.glob("*.json"))
    }
