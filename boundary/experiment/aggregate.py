"""The two aggregates every experiment metric is built from: a ratio that is undefined over
nothing, and a linearly interpolated percentile.

Where it sits: under ``plan``, ``metrics`` and ``load``; imports nothing of the experiment.
"""

from __future__ import annotations

from collections.abc import Sequence


def ratio(a: float, b: float) -> float | None:
    """``a / b``; None when ``b`` is 0 (a report prints it as "–")."""
    return a / b if b else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0 ≤ q ≤ 1) of ``values``, interpolated between the two nearest
    ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
