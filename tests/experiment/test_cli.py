"""``boundary experiment`` end to end."""

from __future__ import annotations

import json
import re

import pytest

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
    lines = report.splitlines()
    for n in range(1, 14):  # no question is left without an answer line (an empty Q3 says why)
        at = next(i for i, line in enumerate(lines) if line.startswith(f"**{n}."))
        assert lines[at + 1].startswith("- "), (n, lines[at : at + 2])
    assert "of the unit-1 oracle" in report and "U_end and P_end on one state in" in report
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


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--unit", "0"], "--unit: must be positive, got 0"),
        (["--capacity-gib", "-1"], "--capacity-gib: must be positive, got -1"),
        (["--concurrency", "0"], "--concurrency: must be positive, got 0"),
        (["--load-concurrency", "0", "--load-capacity-gib", "8"], "--load-concurrency: must be positive"),
        (["--load-concurrency", "16"], "--load-concurrency and --load-capacity-gib go together"),
        (["--checkpoint-budget-gib", "40"], "--checkpoint-budget-gib: 40 must be below --capacity-gib 32"),
        (
            ["--policies", "main_sparse,lru_only"],
            "--policies: unknown policy 'lru_only' (valid: main_sparse, input_end, decode_end, both, "
            "chat_aware, horizon, chain_fallback, oracle)",
        ),
        (["--budget", "equal_cost"], "--budget: unknown budget mode 'equal_cost'"),
        (["--system-prompt", "head_rewrite"], "--system-prompt head_rewrite: the synthetic workload"),
    ],
)
def test_options_are_validated_before_any_work_with_exit_2(options, message, capsys, monkeypatch):
    from boundary.experiment import workloads

    def no_work(*args, **kwargs):
        raise AssertionError("the stream was built before the options were checked")

    monkeypatch.setattr(workloads, "build_stream", no_work)
    assert main(["experiment", "--workload", "synthetic", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("boundary experiment: error: ") and message in err


def test_a_small_chat_trace_with_message_outputs_runs_at_every_unit_and_writes_null_ratios(tmp_path, capsys):
    lines = [
        {
            "session": "only",
            "messages": [{"role": "user", "content": "What is 2 + 2?"}],
            "output": {"message": {"role": "assistant", "content": "4."}},
        }
    ]
    trace = tmp_path / "one.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    out = tmp_path / "out"
    rc = main(
        [
            "experiment",
            "--workload",
            str(trace),
            "--no-reasoning",
            "--unit",
            "1",
            "--unit",
            "16",
            "--unit",
            "1056",
            "--capacity-gib",
            "2",
            "--json",
            str(out / "r.json"),
            "--report",
            str(out / "r.md"),
            "--no-cache",
        ]
    )
    assert rc == 0
    data = json.loads((out / "r.json").read_text())
    run = data["units"][0]["runs"][0]
    assert run["first_continuation"]["requests"] == 0
    assert run["first_continuation"]["reused_over_oracle"] is None  # one request: nothing to reuse
    assert run["hit_rate"]["reused_over_oracle"] is None
    report = (out / "r.md").read_text()
    assert "| – |" in report and not re.search(r"\bnan\b", report.lower())  # "Nano" is a model name
    assert (out / "r-policies.png").stat().st_size > 0 and (out / "r-units.png").stat().st_size > 0
