"""Number formats and table helpers for the report: an undefined value prints as "–".

Where it sits: at the bottom of the report, last in the flow: every report section formats
through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from boundary.experiment.harness import GIB, UnitResult

EQUAL_CAPACITY = "equal_capacity"
EQUAL_BUDGET = "equal_checkpoint_budget"
DASH = "–"


def pct(x: float | None, digits: int = 1) -> str:
    return DASH if x is None else f"{100 * x:.{digits}f}%"


def tokens(x: float | None) -> str:
    return DASH if x is None else f"{x:,.0f}"


def signed(x: float | None) -> str:
    return DASH if x is None else f"{x:+,.0f}"


def gib(x: float | None) -> str:
    return DASH if x is None else f"{x / GIB:.2f} GiB"


def pflops(x: float | None, sign: bool = False) -> str:
    """PFLOP, or TFLOP below 0.1 PFLOP so small differences keep their digits."""
    if x is None:
        return DASH
    value, unit = (x / 1e15, "PFLOP") if abs(x) >= 1e14 or x == 0 else (x / 1e12, "TFLOP")
    return f"{value:+,.2f} {unit}" if sign else f"{value:,.2f} {unit}"


def seconds(x: float | None) -> str:
    return DASH if x is None else f"{x * 1000:,.1f} ms"


def rate(x: float | None, unit: str = "") -> str:
    return DASH if x is None else f"{x:,.1f} {unit}".rstrip()


def share(n: int, d: int) -> str:
    return f"{n:,} of {d:,} ({pct(n / d if d else None)})"


def runs_under(unit: UnitResult, budget: str) -> list[dict[str, Any]]:
    return [r for r in unit.runs if r["budget"] == budget]


def get(unit: UnitResult, policy: str, budget: str) -> dict[str, Any] | None:
    return next((r for r in unit.runs if r["policy"] == policy and r["budget"] == budget), None)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out
