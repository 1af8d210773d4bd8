"""Plots: reuse and state memory per policy; tokens reused against the unit; reuse and TTFT
against load. Undefined values (a slice with no requests) are left out, never plotted as 0.

Where it sits: in the report, last in the flow: ``boundary.experiment.report`` calls it for the
figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from boundary.experiment.harness import GIB, ExperimentResult
from boundary.experiment.report.fmt import EQUAL_CAPACITY, get


def _nan(x: float | None) -> float:
    return float("nan") if x is None else x


def plot(result: ExperimentResult, folder: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    folder.mkdir(parents=True, exist_ok=True)
    out = [_policies(result, folder / f"{stem}-policies.png")]
    if len(result.units) > 1:
        out.append(_units(result, folder / f"{stem}-units.png"))
    if result.units[0].load_sweep:
        out.append(_load(result, folder / f"{stem}-load.png"))
    return out


def _title(result: ExperimentResult) -> str:
    s = result.stream
    return f"{s['workload']} × {s.get('family')} ({result.model['name']})"


def _policies(result: ExperimentResult, path: Path) -> Path:
    import matplotlib.pyplot as plt

    unit = result.units[0]
    budgets = sorted({r["budget"] for r in unit.runs})
    policies = list(dict.fromkeys(r["policy"] for r in unit.runs))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    width = 0.8 / max(len(budgets), 1)
    values: tuple[Callable[[dict[str, Any]], float | None], ...] = (
        lambda r: r["hit_rate"]["reused_over_oracle"],
        lambda r: r["first_continuation"]["reused_over_oracle"],
        lambda r: r["retained_state_bytes"]["mean"] / GIB,
    )
    for b, budget in enumerate(budgets):
        xs = [i + b * width for i in range(len(policies))]
        runs = [get(unit, p, budget) for p in policies]
        for ax, value in zip(axes, values, strict=True):
            ys = [_nan(value(r)) if r else math.nan for r in runs]
            ax.bar(xs, ys, width, label=budget)
    names = ("reused / oracle", "first continuation: reused / oracle", "mean state GiB")
    for ax, name in zip(axes, names, strict=True):
        ax.set_xticks(
            [i + width * (len(budgets) - 1) / 2 for i in range(len(policies))], policies, rotation=20
        )
        ax.set_title(name)
    for ax in axes[:2]:  # ratios: start the axis near the lowest bar so differences show
        heights = [h for bar in ax.patches if not math.isnan(h := bar.get_height())]
        ax.set_ylim(max(0.0, min(heights, default=0.0) - 0.05), 1.0)
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"{_title(result)} — unit {unit.unit}")
    return _save(fig, path, dpi=110)


def _units(result: ExperimentResult, path: Path) -> Path:
    """Tokens reused as a share of the finest unit's oracle (what coarse units cost), beside the
    same-unit ratio (how close each policy gets at that unit)."""
    import matplotlib.pyplot as plt

    ordered = sorted(result.units, key=lambda u: u.unit)
    finest = ordered[0].oracle["joint_matched_tokens"] or None
    policies = list(dict.fromkeys(r["policy"] for r in ordered[0].runs))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    xs = [u.unit for u in ordered]
    oracle = [u.oracle["joint_matched_tokens"] / finest if finest else math.nan for u in ordered]
    axes[0].plot(xs, oracle, "k--", label="oracle")
    for p in policies:
        runs = [get(u, p, EQUAL_CAPACITY) for u in ordered]
        absolute = [r["joint_matched_tokens"] / finest if r and finest else math.nan for r in runs]
        same = [_nan(r["hit_rate"]["reused_over_oracle"]) if r else math.nan for r in runs]
        axes[0].plot(xs, absolute, marker="o", label=p)
        axes[1].plot(xs, same, marker="o", label=p)
    for ax, name in zip(
        axes,
        (f"tokens reused / oracle at unit {ordered[0].unit}", "reused / oracle at the same unit"),
        strict=True,
    ):
        ax.set_xscale("log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.minorticks_off()
        ax.set_xlabel("prefix_match_unit (tokens)")
        ax.set_title(name)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{_title(result)} — unit sweep ({EQUAL_CAPACITY})")
    return _save(fig, path, dpi=110)


def _load(result: ExperimentResult, path: Path) -> Path:
    """Reuse and mean TTFT against concurrency, one line per policy, one column per capacity."""
    import matplotlib.pyplot as plt

    points = result.units[0].load_sweep
    capacities = sorted({p["capacity_gib"] for p in points})
    policies = list(dict.fromkeys(p["policy"] for p in points))
    fig, axes = plt.subplots(2, len(capacities), figsize=(4.5 * len(capacities), 7), squeeze=False)
    for col, cap in enumerate(capacities):
        for policy in policies:
            mine = sorted(
                (p for p in points if p["policy"] == policy and p["capacity_gib"] == cap), key=_conc
            )
            xs = [p["concurrency"] for p in mine]
            axes[0][col].plot(xs, [_nan(p["reused_over_oracle"]) for p in mine], marker="o", label=policy)
            ttft = [_nan(p["load"]["ttft_mean_seconds"]) * 1000 for p in mine]
            axes[1][col].plot(xs, ttft, marker="o", label=policy)
        axes[0][col].set_title(f"{cap:g} GiB: reused / oracle")
        axes[1][col].set_title(f"{cap:g} GiB: mean TTFT (ms, queued)")
        axes[1][col].set_yscale("log")
        ticks = sorted({p["concurrency"] for p in points})
        for row in (0, 1):
            axes[row][col].set_xscale("log")
            axes[row][col].set_xticks(ticks, [f"{t:g}" for t in ticks])
            axes[row][col].minorticks_off()
            axes[row][col].set_xlabel("concurrent sessions")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{_title(result)} — load (unit {result.units[0].unit}, {EQUAL_CAPACITY})")
    return _save(fig, path, dpi=100)


def _conc(p: dict[str, Any]) -> float:
    concurrency: float = p["concurrency"]
    return concurrency


def _save(fig: Any, path: Path, *, dpi: int) -> Path:
    """Lay out, write and close ``fig``; its path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
