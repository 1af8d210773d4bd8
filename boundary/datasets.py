"""Real conversations shipped with boundary (see ``fixtures/datasets/README.md``).

Loaders return plain OpenAI-format message lists; nothing here renders or tokenizes.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from boundary.resources import data_dir

Conversation = list[dict[str, Any]]


@cache
def _tau_bench_airline() -> tuple[dict[str, Any], ...]:
    with (data_dir("datasets") / "tau_bench" / "gpt-4o-airline.json").open(encoding="utf-8") as f:
        return tuple(json.load(f))


def tau_bench_airline() -> list[Conversation]:
    """200 GPT-4o airline-agent trajectories (50 tasks x 4 trials), tool calls included."""
    return [[dict(m) for m in t["traj"]] for t in _tau_bench_airline()]


def default_conversation() -> Conversation:
    """The conversation ``boundary render`` shows by default: the first tau-bench airline
    trajectory up to its 6th user turn (system policy, user turns, tool calls and results)."""
    traj = tau_bench_airline()[0]
    users = [i for i, m in enumerate(traj) if m["role"] == "user"]
    return traj[: users[5] + 1]
