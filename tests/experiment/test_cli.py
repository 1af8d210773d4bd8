"""``boundary experiment`` end to end."""

from __future__ import annotations

import json

from boundary.cli.main import main
from boundary.experiment.harness import ExperimentResult


def test_the_command_writes_json_a_report_answering_thirteen_questions_and_plots(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "experiment",
            "--workload",
            "synthetic",
            "--synthetic-sessions",
            "10",
            "--unit",
            "16",
            "--unit",
            "1056",
            "--capacity-gib",
            "4",
            "--json",
            str(out / "r.json"),
            "--report",
            str(out / "r.md"),
            "--no-cache",
        ]
    )
    assert rc == 0
    result = ExperimentResult.model_validate_json((out / "r.json").read_text())
    assert [u.unit for u in result.units] == [16, 1056]
    assert {r["policy"] for r in result.units[0].runs} == {
        "main_sparse",
        "input_end",
        "decode_end",
        "both",
        "chat_aware",
        "horizon",
    }
    report = (out / "r.md").read_text()
    assert "boundary experiment --workload synthetic --family qwen3_5" in report
    assert all(f"**{n}." in report for n in range(1, 14))
    assert "### Unit sweep" in report
    assert (out / "r-policies.png").stat().st_size > 0 and (out / "r-units.png").stat().st_size > 0


def test_json_to_stdout_with_one_budget_and_chosen_policies(capsys):
    rc = main(
        [
            "experiment",
            "--workload",
            "synthetic",
            "--synthetic-sessions",
            "4",
            "--budget",
            "equal_capacity",
            "--policies",
            "main_sparse,input_end",
            "--json",
            "-",
            "--no-cache",
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["policy"], r["budget"]) for r in data["units"][0]["runs"]] == [
        ("main_sparse", "equal_capacity"),
        ("input_end", "equal_capacity"),
    ]


def test_an_unknown_workload_or_policy_is_a_one_line_error(capsys, tmp_path):
    assert main(["experiment", "--workload", str(tmp_path / "missing.jsonl")]) == 2
    assert "neither a shipped workload" in capsys.readouterr().err
    assert (
        main(
            [
                "experiment",
                "--workload",
                "synthetic",
                "--synthetic-sessions",
                "2",
                "--policies",
                "lru_only",
                "--no-cache",
            ]
        )
        == 2
    )
    assert "unknown policy 'lru_only'" in capsys.readouterr().err
