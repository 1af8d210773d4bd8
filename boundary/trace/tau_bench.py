"""The shipped tau-bench airline trajectories as a trace, with optional seeded synthetic reasoning.

Where it sits: a sample trace for the report end: ``boundary.cli.audit`` audits it when no trace
is given (``--write-trace`` saves it), ``benchmarks/audit.py`` and the tests replay it; it imports
``boundary.trace.records`` (the lines) and ``boundary.shipped.datasets`` (the trajectories).

One request per assistant turn (the conversation before it), its output the assistant message
that follows. The data carries no model reasoning; ``seeded_reasoning`` writes a few
policy-style sentences per turn, deterministic for a seed (not model text).
"""

from __future__ import annotations

import random
from typing import Any, Literal

from boundary.trace.records import MessageOutput, TraceRequest

Reasoning = Literal["none", "seeded"]

_OPENERS = (
    "The user {want}.",
    "Let me look at what the user {want}.",
    "The customer {want}.",
    "So the user {want}.",
)
_WANTS = (
    "wants help with a reservation",
    "is asking about a flight",
    "needs a change to a booking",
    "wants to know the options",
    "has given me new details",
)
_STEPS = (
    "I should check the policy before acting.",
    "I need the user's details first.",
    "The policy says I must confirm before any update.",
    "I should not make up information.",
    "Let me verify the reservation and the payment methods.",
    "Only one tool call at a time.",
    "I need to list the details and get an explicit yes.",
    "Compare the fare and the cabin class.",
)


def seeded_reasoning(rng: random.Random, message: dict[str, Any]) -> str:
    """Synthetic reasoning for one assistant turn (not model text): a few policy-style
    sentences, then what the turn does next. Deterministic for a seeded ``rng``."""
    sentences = [rng.choice(_OPENERS).format(want=rng.choice(_WANTS))]
    sentences += rng.sample(_STEPS, k=rng.randint(1, 4))
    calls = message.get("tool_calls") or []
    if calls:
        sentences.append(f"I will call {calls[0]['function']['name']} now.")
    else:
        sentences.append("I will answer the user directly.")
    return " ".join(sentences)


def tau_bench_trace(
    *,
    reasoning: Reasoning = "none",
    echo_reasoning: bool = False,
    seed: int = 0,
    trajectories: int | None = None,
) -> list[TraceRequest]:
    """The tau-bench airline trajectories as a trace: one request per assistant turn (the
    conversation before it), its output the assistant message that follows.

    ``reasoning="seeded"`` gives every assistant turn synthetic reasoning (``seeded_reasoning``);
    ``echo_reasoning`` makes later requests send it back as ``reasoning_content`` (by default
    they do not, as OpenAI-style clients do not).
    """
    from boundary.shipped.datasets import _tau_bench_airline

    out: list[TraceRequest] = []
    for record in _tau_bench_airline()[:trajectories]:
        session = f"tau-airline-{record['task_id']}-{record['trial']}"
        rng = random.Random(f"{seed}:{session}")
        history: list[dict[str, Any]] = []
        for message in record["traj"]:
            if message["role"] == "assistant":
                produced = dict(message)
                if reasoning == "seeded":
                    produced["reasoning_content"] = seeded_reasoning(rng, message)
                out.append(
                    TraceRequest(
                        session=session, messages=list(history), output=MessageOutput(message=produced)
                    )
                )
                history.append(produced if echo_reasoning else message)
            else:
                history.append(message)
    return out
