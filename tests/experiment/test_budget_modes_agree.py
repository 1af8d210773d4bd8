"""One cache executor: with nothing evicted, the page-by-page pool under either budget mode and
the byte-LRU what-if serve every request the same hit."""

from __future__ import annotations

from boundary.experiment.harness import Eviction, ExperimentConfig, run_experiment
from boundary.experiment.policies import POLICIES
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.replay import BudgetMode
from boundary.experiment.report.header import eviction_line
from tests.experiment.conftest import synthetic_stream

NO_EVICTION = ExperimentConfig(
    capacity_gib=1000.0, units=(16,), checkpoint_budget_gib=1000.0, disaggregation=False
)


def test_with_no_eviction_both_budget_modes_and_the_what_if_reuse_the_same_tokens():
    """1,000 GiB and a budget as large: nothing is evicted or refused, so the equal-capacity and
    equal-budget runs (one executor, the page-by-page pool) and the byte-LRU what-if give every
    request of every policy the same joint hit, decode_end's D_end hits included."""
    stream = synthetic_stream(client="kept")
    paged: dict = {}
    run_experiment(stream, QWEN3_5_35B_A3B, NO_EVICTION, keep_runs=paged)
    lru: dict = {}
    what_if = NO_EVICTION.model_copy(
        update={"eviction": Eviction.BYTE_LRU, "budgets": (BudgetMode.EQUAL_CAPACITY,)}
    )
    run_experiment(stream, QWEN3_5_35B_A3B, what_if, keep_runs=lru)
    for policy in POLICIES:
        runs = [
            paged[(16, "equal_capacity", policy)],
            paged[(16, "equal_checkpoint_budget", policy)],
            lru[(16, "equal_capacity", policy)],
        ]
        for run in runs:
            assert not run.stats.evictions and not run.stats.budget_refusals, policy
        joints = [[r.joint for r in run.records] for run in runs]
        assert joints[0] == joints[1] == joints[2], policy
    decode = paged[(16, "equal_capacity", "decode_end")].records
    assert sum(r.served_by == "decode_end" for r in decode) > 0


def test_a_report_says_when_its_executor_is_the_byte_lru_what_if():
    assert "page by page" in eviction_line({"eviction": "engine_steps"})
    assert "WHAT-IF" in eviction_line({"eviction": "byte_lru"})
    assert "WHAT-IF" in eviction_line({"eviction": "engine_steps", "output_at_unit": True})
