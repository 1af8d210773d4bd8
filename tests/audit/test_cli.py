"""``boundary audit`` end to end: outputs (JSON, Markdown, PNG), tau-bench conversion, golden
regression, and one-line errors with a non-zero exit on bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from boundary.cli.main import main
from boundary.trace.tau_bench import tau_bench_trace
from boundary.trace.writer import write_trace

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.jsonl"
    write_trace(path, tau_bench_trace(reasoning="seeded", trajectories=2))
    return path


def test_audit_writes_json_markdown_and_a_png(trace, tmp_path, capsys):
    out_json, out_png = tmp_path / "a.json", tmp_path / "a.png"
    rc = main(
        [
            "audit",
            str(trace),
            "--family",
            "qwen3_6",
            "--unit",
            "16",
            "--json",
            str(out_json),
            "--plot",
            str(out_png),
        ]
    )
    assert rc == 0
    captured = capsys.readouterr()
    assert "| P_end (`prompt_end`) |" in captured.out and "| what if |" in captured.out
    report = json.loads(out_json.read_text())
    assert set(report["summary"]["kinds"]) == {"prompt_end", "input_end", "decode_end"}
    assert report["unit"] == 16
    turn = report["turns"][0]
    assert set(turn["checkpoints"]) == {"prompt_end", "input_end", "decode_end"}
    assert all(c["position"] % 16 == 0 for c in turn["checkpoints"].values())
    assert {w["name"] for w in report["what_if"]} >= {"preserve_thinking=True", "echo reasoning_content"}
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_audit_runs_on_the_shipped_tau_bench_trajectories(tmp_path, capsys):
    written = tmp_path / "tau.jsonl"
    rc = main(
        [
            "audit",
            "--tau-bench",
            "--trajectories",
            "2",
            "--family",
            "granite_4_h",
            "--no-what-if",
            "--json",
            "-",
            "--write-trace",
            str(written),
        ]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stand_in_tokenizer"] is True
    assert report["trace"] == "tau-bench airline (no reasoning)"
    assert report["what_if"] == []
    assert len(written.read_text().splitlines()) == report["summary"]["turns"]


def test_template_kwargs_reach_the_template(trace, capsys):
    assert (
        main(
            [
                "audit",
                str(trace),
                "--family",
                "qwen3_5",
                "--template-kwargs",
                '{"enable_thinking": false}',
                "--no-what-if",
                "--json",
                "-",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["template_kwargs"] == {"enable_thinking": False}
    assert (
        report["summary"]["causes"].get("hidden_reasoning_dropped", 0) == 0
    )  # thinking off: no reasoning written


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["audit", "missing.jsonl", "--family", "qwen3"], "missing.jsonl: cannot read the trace"),
        (["audit", "{trace}", "--family", "nope"], "unknown family 'nope'"),
        (
            ["audit", "{trace}", "--family", "qwen3", "--template-kwargs", "{bad"],
            "--template-kwargs: not JSON",
        ),
        (
            ["audit", "{trace}", "--family", "qwen3", "--template-kwargs", "[1]"],
            "expected a JSON object, got list",
        ),
        (
            ["audit", "{trace}", "--family", "qwen3", "--template-kwargs", '{"enable_thinking": "yes"}'],
            "template_kwargs.enable_thinking: expected bool, got str",
        ),
        (["audit", "{trace}", "--family", "qwen3", "--unit", "0"], "--unit must be at least 1"),
        (["audit", "{trace}"], "--family is required"),
        (["audit", "--family", "qwen3"], "give a TRACE file or --tau-bench"),
        (["audit", "{bad}", "--family", "qwen3"], "bad.jsonl:2: not JSON"),
        (["audit", "{trace}", "--family", "qwen3", "--now", "yesterday"], "--now: not an ISO date"),
        (["audit", "--regress", "{tmp}"], "no <family>-<case>/case.json folders"),
    ],
)
def test_bad_input_ends_with_one_line_and_exit_2(trace, tmp_path, capsys, argv, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(trace.read_text().splitlines()[0] + "\n{oops\n")
    places = {"{trace}": str(trace), "{bad}": str(bad), "{tmp}": str(tmp_path)}
    argv = [places.get(a, a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("boundary audit: error:")
    assert message in err[0]
    assert "Traceback" not in err[0]


def test_regress_reports_drift_with_exit_1_and_a_clean_corpus_with_exit_0(tmp_path, capsys):
    shutil.copytree(GOLDEN / "qwen3_5-tool_loop", tmp_path / "qwen3_5-tool_loop")
    assert main(["audit", "--regress", str(tmp_path)]) == 0
    assert "no drift in 1 cases" in capsys.readouterr().err
    expected = tmp_path / "qwen3_5-tool_loop" / "expected.json"
    data = json.loads(expected.read_text())
    data["turns"][0]["prompt"]["u_end"] -= 1
    expected.write_text(json.dumps(data))
    assert main(["audit", "--regress", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "drift: qwen3_5-tool_loop turn 0: prompt.u_end" in captured.out
    assert main(["audit", "--regress", str(tmp_path), "--update"]) == 0
    assert main(["audit", "--regress", str(tmp_path)]) == 0
