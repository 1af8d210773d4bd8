"""The Phase 2 / 3 targets: each policy against the ones it is meant to beat, met or missed by
how much, and the cause of a miss read from the runs.

Where it sits: in the report, beside ``questions``: ``boundary.experiment.report`` and
``questions`` call it; it reads an ``ExperimentResult`` and recomputes nothing.

Targets, under the equal checkpoint-byte budget (every policy admits the same state bytes):
``chat_aware`` reuses at least max(``main_sparse``, ``input_end``, ``decode_end``) and
``horizon`` at least ``both``, in prompt tokens reused over the oracle's at the same unit. Met
means at least the best rival, with no tolerance; a miss is stated in percentage points of the
oracle's reusable tokens, with the causes ``miss_causes`` finds in the two runs' counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from boundary.experiment.harness import UnitResult
from boundary.experiment.report.fmt import EQUAL_BUDGET, get

TARGETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("chat_aware", ("main_sparse", "input_end", "decode_end")),
    ("horizon", ("both",)),
)


@dataclass(frozen=True, slots=True)
class TargetCheck:
    """``policy`` against its best ``rival`` (reused / oracle of each); ``margin`` = mine -
    best (negative: missed); ``causes``: empty when met."""

    policy: str
    reused: float
    rivals: tuple[tuple[str, float], ...]
    rival: str
    margin: float
    causes: tuple[str, ...]

    @property
    def met(self) -> bool:
        return self.margin >= -1e-12


def _reused(run: dict[str, Any]) -> float:
    return float(run["hit_rate"]["reused_over_oracle"])


def _comparable(run: dict[str, Any]) -> bool:
    """Has a ratio (None: the oracle had nothing to reuse)."""
    return run["hit_rate"]["reused_over_oracle"] is not None


def _served(run: dict[str, Any], kind: str) -> int:
    return int(run["selected_checkpoint"].get(kind, 0))


def _tokens(run: dict[str, Any], kind: str) -> float:
    """Prompt tokens the requests served by ``kind`` reused (their joint hits)."""
    mean = run.get("materialized_boundary", {}).get("mean_joint_by_kind", {}).get(kind)
    return 0.0 if mean is None else float(mean) * _served(run, kind)


def _older(run: dict[str, Any]) -> int:
    """Requests served by a U_end or P_end state two or more requests old."""
    by_kind = run.get("producer_age_by_kind", {})
    ages = [by_kind.get(kind, {}) for kind in ("input_end", "prompt_end")]
    return sum(int(a.get("two_back", 0)) + int(a.get("older", 0)) for a in ages)


def _refused(run: dict[str, Any]) -> int:
    return sum(int(v) for v in run.get("checkpoint_budget", {}).get("refusals", {}).values())


# state kinds grouped as a one-state policy trades them, and what a rival's extra reuse from each
# group means when the one-state policy reused less from it
GROUPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "U_end / P_end",
        ("input_end", "prompt_end"),
        "prompt-side states the one state per request gave up (for D_end, or U_end for a P_end "
        "past it at a unit boundary inside the assistant header, which the next request keeps "
        "and the horizon stops short of)",
    ),
    (
        "D_end",
        ("decode_end",),
        "outputs the next request kept where the round-trip verdict and the stability horizon "
        "predicted no reuse, or where a prompt-side state was kept instead",
    ),
    (
        "block twin",
        ("prompt_end_block",),
        "block twins (every policy keeps them) that survived longer beside fewer states "
        "competing for the budget",
    ),
    ("junction", ("reactive",), "shared-prefix junctions"),
)


def miss_causes(mine: dict[str, Any], rival: dict[str, Any]) -> tuple[str, ...]:
    """Why ``mine`` reused less than ``rival``, from their counters: the fallback after a tool
    loop (prompt-side states two or more requests old), the tokens reused per group of kinds
    (rival minus mine; the groups sum to the gap) with what each group the rival led means,
    then states the budget refused. Never empty."""
    m, r = mine["policy"], rival["policy"]
    out = []
    old_m, old_r = _older(mine), _older(rival)
    if old_r > old_m:
        out.append(
            f"`{r}` served {old_r} requests from a U_end or P_end two or more requests old (`{m}` "
            f"{old_m}): the fallback after a tool loop, which one state per request gives up where "
            "it keeps the loop's own P_end or D_end instead"
        )
    deltas = [
        (sum(_tokens(rival, k) - _tokens(mine, k) for k in kinds), name, meaning)
        for name, kinds, meaning in GROUPS
    ]
    led = sorted((d for d in deltas if d[0] >= 0.5), reverse=True)
    if led:
        by_group = ", ".join(f"{name} {d:+,.0f}" for d, name, _ in deltas if abs(d) >= 0.5)
        meanings = "; ".join(f"{name}: {meaning}" for _, name, meaning in led)
        out.append(f"tokens reused by kind, `{r}` minus `{m}`: {by_group} ({meanings})")
    if (refused := _refused(mine)) > _refused(rival):
        out.append(f"the budget refused {refused} of `{m}`'s states ({_refused(rival)} of `{r}`'s)")
    return tuple(out) or (
        f"no state kind accounts for it: `{m}` and `{r}` served from the same kinds, and the "
        "budget's evictions kept different states",
    )


def checks(unit: UnitResult) -> list[TargetCheck]:
    """Every target whose policy and at least one rival ran under the equal budget with a
    ratio to compare."""
    out = []
    for policy, rivals in TARGETS:
        mine = get(unit, policy, EQUAL_BUDGET)
        found = [get(unit, name, EQUAL_BUDGET) for name in rivals]
        present = [run for run in found if run is not None and _comparable(run)]
        if mine is None or not _comparable(mine) or not present:
            continue
        best = max(present, key=_reused)
        margin = _reused(mine) - _reused(best)
        out.append(
            TargetCheck(
                policy,
                _reused(mine),
                tuple((run["policy"], _reused(run)) for run in present),
                best["policy"],
                margin,
                () if margin >= -1e-12 else miss_causes(mine, best),
            )
        )
    return out


def points(x: float) -> str:
    return f"{100 * x:.2f}"


def line(c: TargetCheck) -> str:
    rivals = ", ".join(f"`{name}` {points(v)}%" for name, v in c.rivals)
    head = f"`{c.policy}` {points(c.reused)}% ≥ {rivals}"
    if c.met:
        return f"{head}: met (+{points(c.margin)} points over `{c.rival}`)"
    by = points(-c.margin) if -c.margin >= 0.00005 else "<0.01"
    return f"{head}: **missed by {by} points** (best rival `{c.rival}`). Cause: " + "; ".join(c.causes)


def lines(unit: UnitResult) -> list[str]:
    found = checks(unit)
    if not found:
        return ["- not run (needs the equal checkpoint-byte budget and the policies compared)"]
    return [f"- {line(c)}" for c in found]


def section(units: Sequence[UnitResult]) -> list[str]:
    """Every unit's targets, one block per unit (reused / oracle at the same unit)."""
    out = [
        "Equal checkpoint-byte budget; met: at least the best rival's prompt tokens reused over the "
        "same unit's oracle, no tolerance; a miss in percentage points, with its cause from the "
        "runs' counters (which state kinds served the requests).",
        "",
    ]
    for u in units:
        out += [f"Unit {u.unit}:", *lines(u), ""]
    return out
