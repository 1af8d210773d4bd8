"""tau-bench airline: 200 real GPT-4o agent trajectories (50 tasks x 4 trials).

Tool loops under one ~6 KB airline policy shared by every session (a natural shared-prefix
junction), with the 14 airline tool schemas the agent was given. Real user turns, assistant
turns, tool calls and tool results; no reasoning text (a workload adds seeded reasoning).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from boundary.datasets import tau_bench_airline
from boundary.experiment.workloads.script import SessionScript


@cache
def airline_tools() -> tuple[dict[str, Any], ...]:
    text = (
        resources.files("boundary.experiment")
        .joinpath("data", "tau_bench_airline_tools.json")
        .read_text("utf-8")
    )
    return tuple(json.loads(text))


def scripts() -> list[SessionScript]:
    tools = [dict(t) for t in airline_tools()]
    return [
        SessionScript(f"tau_airline_{i:03d}", messages, tools)
        for i, messages in enumerate(tau_bench_airline())
    ]
