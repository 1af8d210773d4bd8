"""tau-bench airline: 200 real GPT-4o agent trajectories (50 tasks x 4 trials).

Where it sits: the experiment's request stage: a shipped conversation source;
``workloads.build_stream`` calls it.

Tool loops under one ~6 KB airline policy shared by every session (a natural shared-prefix
junction), with tool schemas inferred from the trajectories' own calls (the dataset does not
ship the schemas the agent was given). Real user turns, assistant turns, tool calls and tool
results; no reasoning text (a workload adds seeded reasoning).
"""

from __future__ import annotations

from boundary.experiment.workloads.script import SessionScript
from boundary.shipped.datasets import tau_bench_airline, tau_bench_airline_tools


def scripts() -> list[SessionScript]:
    tools = tau_bench_airline_tools()
    return [
        SessionScript(f"tau_airline_{i:03d}", messages, tools)
        for i, messages in enumerate(tau_bench_airline())
    ]
