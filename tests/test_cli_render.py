"""``boundary render``: the main job on the embedded default, and clean errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from boundary.cli.main import main


def test_render_shows_the_default_conversation_with_both_boundaries(capsys, tmp_path) -> None:
    out = tmp_path / "r.json"
    assert main(["render", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert "⟦U_end token" in captured.out and "⟦P_end token" in captured.out  # the result: stdout
    assert captured.err == ""
    result = json.loads(out.read_text())
    assert result["family"] == "qwen3_5"
    assert 0 < result["u_end"] < result["p_end"] == len(result["token_ids"])
    assert result["checkpoints"]["64"]["input_end"] == result["u_end"] // 64 * 64


def test_render_reads_a_conversation_file_and_template_kwargs(capsys, tmp_path) -> None:
    conv = tmp_path / "c.json"
    conv.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    assert (
        main(
            [
                "render",
                "--conversation",
                str(conv),
                "--family",
                "nemotron_3",
                "--template-kwargs",
                '{"enable_thinking": false}',
                "--json",
                "-",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["family"] == "nemotron_3"


def test_render_keeps_stdout_for_the_json_record_when_it_goes_there(capsys) -> None:
    assert main(["render", "--json", "-"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["family"] == "qwen3_5"  # stdout is the JSON record alone
    assert "⟦U_end token" in captured.err


def test_python_dash_m_boundary_renders_the_prompt_to_stdout(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "boundary", "render", "--context", "40"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("tokens '<|im_start|>assistant\\n<think>\\n'")
    assert "⟦P_end token 4117⟧" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (["--unit", "0"], "--unit must be at least 1, got 0"),
        (["--context", "-1"], "--context must be at least 0, got -1"),
        (["--template-kwargs", "[1]"], "--template-kwargs: expected a JSON object, got list"),
    ],
)
def test_render_checks_its_options_before_loading_anything(capsys, option, expected) -> None:
    assert main(["render", "--family", "nope", *option]) == 2  # the option, not the family, is named
    assert capsys.readouterr().err.strip() == f"boundary render: error: {expected}"


def test_bad_input_exits_nonzero_with_a_one_line_message(capsys, tmp_path) -> None:
    conv = tmp_path / "c.json"
    conv.write_text(json.dumps([{"role": "user", "content": 3}]))
    assert main(["render", "--conversation", str(conv)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"boundary render: error: {conv}: messages[0].content: expected a string or a list of content "
        "parts, got int"
    )
    assert main(["render", "--family", "nope"]) == 2
    assert "unknown family 'nope'" in capsys.readouterr().err


# -- request limits: every command exits 2 with one line, never a traceback ----------------------
DEEP_ARGUMENTS = '{"a": ' * 100 + "1" + "}" * 100
TOOL_TURN = [
    {"role": "user", "content": "What is the weather in Rome?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1ab2c", "type": "function", "function": {"name": "f", "arguments": DEEP_ARGUMENTS}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1ab2c", "content": "ok"},
]
SURROGATE = [{"role": "user", "content": "\ud800"}]
BAD_INPUT = {
    "deep_arguments": (
        TOOL_TURN,
        "messages[1].tool_calls[0].function.arguments: nested deeper than 64 levels",
    ),
    "lone_surrogate": (SURROGATE, "messages[0].content: contains a lone surrogate (U+D800 at char 0)"),
}


def _one_line(err: str, command: str, expected: str) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"boundary {command}: error: ") and expected in lines[0], lines[0]


def _trace(tmp_path, messages: list[dict]) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps({"session": "s1", "messages": messages}) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_render_refuses_input_past_the_request_limits(capsys, tmp_path, case: str) -> None:
    messages, expected = BAD_INPUT[case]
    conv = tmp_path / "c.json"
    conv.write_text(json.dumps({"messages": messages}), encoding="utf-8")
    assert main(["render", "--conversation", str(conv)]) == 2
    _one_line(capsys.readouterr().err, "render", expected)


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_audit_refuses_input_past_the_request_limits(capsys, tmp_path, case: str) -> None:
    messages, expected = BAD_INPUT[case]
    assert main(["audit", _trace(tmp_path, messages), "--family", "qwen3_5", "--no-what-if"]) == 2
    _one_line(capsys.readouterr().err, "audit", expected)


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_experiment_refuses_input_past_the_request_limits(capsys, tmp_path, monkeypatch, case: str) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    messages, expected = BAD_INPUT[case]
    args = ["experiment", "--workload", _trace(tmp_path, messages), "--family", "qwen3_5", "--no-cache"]
    assert main(args) == 2
    _one_line(capsys.readouterr().err, "experiment", expected)


def test_input_files_nested_past_pythons_recursion_limit_are_a_one_line_error(
    capsys, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    deep = "[" * 100_000 + "]" * 100_000
    conv = tmp_path / "c.json"
    conv.write_text(deep, encoding="utf-8")
    assert main(["render", "--conversation", str(conv)]) == 2
    _one_line(capsys.readouterr().err, "render", "nested too deeply")
    line = '{"session": "s1", "messages": [{"role": "user", "content": "x", "deep": ' + deep + "}]}\n"
    trace = tmp_path / "deep.jsonl"
    trace.write_text(line, encoding="utf-8")
    assert main(["audit", str(trace), "--family", "qwen3_5", "--no-what-if"]) == 2
    _one_line(capsys.readouterr().err, "audit", "nested too deeply")
    assert main(["experiment", "--workload", str(trace), "--family", "qwen3_5", "--no-cache"]) == 2
    _one_line(capsys.readouterr().err, "experiment", "nested too deeply")
