"""The bounds and growth ratios ``benchmarks/sessions.py`` reports, worked by hand.

Oracle: hand arithmetic on rows of made-up seconds (paths in ``PATHS`` order: transformers,
cold, session full, session incremental, new text alone, template alone, template
unsandboxed)."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sessions_benchmark", ROOT / "benchmarks" / "sessions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_columns_are_where_the_bounds_read_them(bench: ModuleType) -> None:
    assert bench.PATHS[0] == "transformers"
    assert bench.PATHS[bench.NEW_TEXT] == "new text alone"
    assert bench.PATHS[bench.SANDBOXED] == "template alone"
    assert bench.PATHS[bench.UNSANDBOXED] == "template unsandboxed"


def test_the_one_run_bound_runs_the_template_on_first_requests_only(bench: ModuleType) -> None:
    rows = [
        # a two-turn conversation: its first request, then its second
        (1, True, [0.6, 0.0, 0.0, 0.0, 0.1, 9.0, 0.2]),
        (3, False, [1.0, 0.0, 0.0, 0.0, 0.3, 9.0, 0.5]),
        # a second conversation, one request
        (2, True, [0.4, 0.0, 0.0, 0.0, 0.05, 9.0, 0.15]),
    ]
    # transformers 0.6 + 1.0 + 0.4 = 2.0; the unsandboxed template on first requests
    # 0.2 + 0.15 = 0.35 (the sandboxed one, 9.0, is not the floor);
    # the new text on every request 0.1 + 0.3 + 0.05 = 0.45
    assert bench.one_run_bound(rows) == pytest.approx(2.0 / 0.8)
    # with the sandboxed run: 9.0 + 9.0 on the two first requests
    assert bench.one_run_bound(rows, bench.SANDBOXED) == pytest.approx(2.0 / 18.45)


def test_growth_compares_30_to_40_messages_with_5_to_9(bench: ModuleType) -> None:
    rows = [
        (4, True, [9.0, 0, 0, 9.0, 9.0, 0, 0]),  # outside both buckets
        (5, False, [1.0, 0, 0, 0.2, 0.05, 0, 0]),
        (9, False, [1.0, 0, 0, 0.4, 0.15, 0, 0]),
        (30, False, [3.0, 0, 0, 0.45, 0.1, 0, 0]),
        (40, False, [5.0, 0, 0, 0.45, 0.2, 0, 0]),
        (41, False, [9.0, 0, 0, 9.0, 9.0, 0, 0]),  # outside both buckets
    ]
    incremental = bench.PATHS.index("session incremental")
    assert bench.growth(rows, 0) == pytest.approx(4.0 / 1.0)
    assert bench.growth(rows, incremental) == pytest.approx(0.45 / 0.3)
    # beyond the new text: (0.35 + 0.25) / 2 against (0.15 + 0.25) / 2
    assert bench.growth(rows, incremental, bench.NEW_TEXT) == pytest.approx(0.30 / 0.20)
    assert bench.growth(rows[:3], 0) is None


def test_the_first_request_cost_compares_opening_requests_with_cold_renders(bench: ModuleType) -> None:
    rows = [
        (1, True, [9.0, 0.2, 0, 0.25, 0, 0, 0]),
        (3, False, [9.0, 0.5, 0, 0.1, 0, 0, 0]),  # a continuation: not counted
        (2, True, [9.0, 0.3, 0, 0.3, 0, 0, 0]),
    ]
    incremental = bench.PATHS.index("session incremental")
    # (0.25 + 0.3) over (0.2 + 0.3)
    assert bench.first_request_cost(rows, incremental) == pytest.approx(0.55 / 0.5)


def test_each_path_follows_each_other_path_about_equally_often(bench: ModuleType) -> None:
    """Not a cyclic rotation, under which path 2 would follow path 1 six times in seven."""
    n, offsets = len(bench.PATHS), 4200
    follows = {(a, b): 0 for a in range(n) for b in range(n) if a != b}
    for offset in range(offsets):
        order = bench.rotated(n, offset)
        assert sorted(order) == list(range(n))
        for a, b in itertools.pairwise(order):
            follows[(a, b)] += 1
    mean = offsets * (n - 1) / len(follows)  # 100 for each ordered pair
    assert all(0.75 * mean < count < 1.25 * mean for count in follows.values()), follows
