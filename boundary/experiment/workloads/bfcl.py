"""BFCL v4 multi-turn: real user turns and tool schemas, synthesised assistant turns.

Where it sits: the experiment's request stage: a shipped conversation source;
``workloads.build_stream`` calls it.

Each entry's turns are real user messages; its ground truth is the calls a correct agent
makes per turn. The script plays that agent: one assistant message per ground-truth call
(arguments parsed from the Python call text), a synthesised tool result after each, and a
synthesised closing answer per turn (seeded). Tool schemas are BFCL's, converted to the
OpenAI function format (``dict`` -> ``object``, ``float`` -> ``number``, ``tuple`` ->
``array``), for the classes the entry involves minus its excluded functions.
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Sequence
from typing import Any

from boundary.experiment.workloads.script import SessionScript, session_rng, synthetic_reasoning
from boundary.shipped.datasets import BFCL_MULTI_TURN, bfcl_function_docs, bfcl_multi_turn

CLASS_DOCS = {
    "GorillaFileSystem": "gorilla_file_system",
    "TwitterAPI": "posting_api",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def openai_schema(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: (_TYPES.get(v, v) if k == "type" and isinstance(v, str) else openai_schema(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [openai_schema(v) for v in schema]
    return schema


def openai_tool(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc["description"],
            "parameters": openai_schema(doc["parameters"]),
        },
    }


def parse_call(text: str, docs: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """``"mv(source='a', destination='b')"`` -> ``("mv", {"source": "a", "destination": "b"})``;
    positional arguments take the schema's parameter names in order."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call):
        raise ValueError(f"not a call: {text!r}")
    name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func).split(".")[-1]
    params = list(docs.get(name, {}).get("parameters", {}).get("properties", {}))
    args: dict[str, Any] = {}
    for i, arg in enumerate(node.args):
        args[params[i] if i < len(params) else f"arg{i}"] = ast.literal_eval(arg)
    for kw in node.keywords:
        args[str(kw.arg)] = ast.literal_eval(kw.value)
    return name, args


def _tool_result(rng: random.Random, name: str, args: dict[str, Any], vocabulary: Sequence[str]) -> str:
    detail = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(3, 24)))
    return json.dumps({"status": "success", "function": name, "arguments": args, "detail": detail})


def scripts(categories: Sequence[str] = ("base",), seed: int = 0) -> list[SessionScript]:
    docs_by_file = bfcl_function_docs()
    out = []
    for category in categories:
        if category not in BFCL_MULTI_TURN:
            raise ValueError(f"unknown BFCL category {category!r} (known: {', '.join(BFCL_MULTI_TURN)})")
        for entry in bfcl_multi_turn(category):
            excluded = set(entry.get("excluded_function") or ())
            docs = {
                d["name"]: d
                for c in entry["involved_classes"]
                for d in docs_by_file[CLASS_DOCS[c]]
                if d["name"] not in excluded
            }
            tools = [openai_tool(d) for d in docs.values()]
            name = entry["id"]
            rng = session_rng(seed, name, "assistant")
            vocabulary = " ".join(m["content"] for turn in entry["question"] for m in turn).split() or [
                "done"
            ]
            messages: list[dict[str, Any]] = []
            calls_made = 0
            for turn, calls in zip(entry["question"], entry["ground_truth"] or [], strict=False):
                if not turn:
                    continue
                messages.extend({"role": m["role"], "content": m["content"]} for m in turn)
                for call in calls:
                    fn, args = parse_call(call, docs)
                    call_id = f"call_{calls_made}"
                    calls_made += 1
                    messages.append(
                        {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": call_id,
                                    "type": "function",
                                    "function": {
                                        "name": fn,
                                        "arguments": json.dumps(args, ensure_ascii=False),
                                    },
                                }
                            ],
                        }
                    )
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call_id,
                            "name": fn,
                            "content": _tool_result(rng, fn, args, vocabulary),
                        }
                    )
                messages.append(
                    {"role": "assistant", "content": synthetic_reasoning(rng, vocabulary, (12, 60))}
                )
            out.append(SessionScript(name, messages, tools, ("assistant turns", "tool results")))
    return out
