"""Every input the CLIs refuse is named by file:line (and field), the same way by ``boundary
audit`` and ``boundary experiment``, with exit code 2 and one line on stderr, never a traceback.

The trace's bad request is on line 3 after two good ones, so the line number is checked too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from boundary.cli.main import main

GOOD = [
    json.dumps({"session": "s0", "messages": [{"role": "user", "content": "hi"}]}),
    json.dumps({"session": "s0", "prompt_token_ids": [1, 2, 3], "output": {"token_ids": [4]}}),
]
RECORD = {"session": "p1", "prompt_token_ids": [1, 2, 3], "output": {"token_ids": [4, 5]}}
BAD_LINES: dict[str, tuple[bytes, str]] = {
    "negative_token_id": (
        json.dumps({**RECORD, "prompt_token_ids": [1, -2, 3]}).encode(),
        "(session 'p1'): prompt_token_ids.1: Input should be greater than or equal to 0",
    ),
    "token_id_past_2_32": (
        json.dumps({**RECORD, "output": {"token_ids": [4, 2**32]}}).encode(),
        "(session 'p1'): output.token_ids.1: Input should be less than 4294967296",
    ),
    "float_token_id": (
        json.dumps({**RECORD, "prompt_token_ids": [1, 2.0]}).encode(),
        "(session 'p1'): prompt_token_ids.1: Input should be a valid integer",
    ),
    "not_utf8": (
        b'{"session": "s1", "messages": [{"role": "user", "content": "caf\xe9"}]}',
        ": not UTF-8 (byte 0xe9 at byte 64)",
    ),
    "lone_surrogate": (
        b'{"session": "s1", "messages": [{"role": "user", "content": "a\\ud800"}]}',
        "(session 's1'): messages[0].content: contains a lone surrogate (U+D800 at char 1)",
    ),
    "deep_nesting": (
        b'{"session": "s1", "messages": [{"role": "user", "content": "x", "deep": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}]}",
        ": not readable: JSON nested too deeply",
    ),
    "nested_past_the_limit": (
        json.dumps({"session": "s1", "messages": [{"role": "user", "content": "x", "k": [[[[0]]]] * 1}]})
        .replace("[[[[0]]]]", "[" * 70 + "0" + "]" * 70)
        .encode(),
        "(session 's1'): messages[0].k: nested deeper than 64 levels",
    ),
    "bad_json": (b'{"session": "s1", "messages": [}', ": not JSON (Expecting value at column 32)"),
    "bad_message": (
        json.dumps({"session": "s1", "messages": [{"role": "user", "content": 3}]}).encode(),
        "(session 's1'): messages[0].content: expected a string or a list of content parts, got int",
    ),
    "bad_output_message": (
        json.dumps(
            {
                "session": "s1",
                "messages": [{"role": "user", "content": "x"}],
                "output": {"message": {"content": "\ud800"}},
            }
        ).encode(),
        "(session 's1'): output.message.content: contains a lone surrogate",
    ),
}


def _trace(tmp_path: Path, bad: bytes) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"\n".join([*(g.encode() for g in GOOD), bad]) + b"\n")
    return path


def _command(command: str, trace: Path) -> list[str]:
    if command == "audit":
        return ["audit", str(trace), "--family", "qwen3_5", "--no-what-if"]
    return ["experiment", "--workload", str(trace), "--family", "qwen3_5", "--no-cache"]


def _one_line(err: str, command: str, location: str, expected: str) -> None:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"boundary {command}: error: {location}"), lines[0]
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize("command", ["audit", "experiment"])
@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_audit_and_experiment_refuse_a_bad_trace_line_naming_file_and_line(
    capsys, tmp_path, monkeypatch, command: str, case: str
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    bad, expected = BAD_LINES[case]
    trace = _trace(tmp_path, bad)
    assert main(_command(command, trace)) == 2
    _one_line(capsys.readouterr().err, command, f"{trace}:3", expected)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "BOUNDARY_CACHE_DIR": str(cwd / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "boundary", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


@pytest.mark.parametrize("command", ["audit", "experiment"])
@pytest.mark.parametrize("case", ["negative_token_id", "token_id_past_2_32"])
def test_python_dash_m_boundary_refuses_a_production_record_out_of_range(
    tmp_path, command: str, case: str
) -> None:
    """The issue's case: ``experiment`` died with a traceback, ``audit`` accepted the line."""
    bad, expected = BAD_LINES[case]
    _trace(tmp_path, bad)
    done = _run(_command(command, Path("trace.jsonl")), tmp_path)
    assert done.returncode == 2, done.stderr
    _one_line(done.stderr, command, "trace.jsonl:3", expected)


CONVERSATIONS: dict[str, tuple[bytes, str, str]] = {
    "bad_json": (
        b'{"messages": [\n  {"role": "user", "content": "x"},\n]}\n',
        ":3:1",
        ": not JSON (Expecting value)",
    ),
    "not_utf8": (b'[\n{"role": "user", "content": "caf\xe9"}]', ":2", ": not UTF-8 (byte 0xe9)"),
    "lone_surrogate": (
        b'[{"role": "user", "content": "a\\ud800"}]',
        "",
        ": messages[0].content: contains a lone",
    ),
    "deep_nesting": (b"[" * 100_000 + b"]" * 100_000, "", ": not readable: JSON nested too deeply"),
    "bad_tool": (
        b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]}',
        "",
        ": tools[0].function.name: Field required",
    ),
}


@pytest.mark.parametrize("case", sorted(CONVERSATIONS))
def test_render_refuses_a_bad_conversation_file_naming_it(tmp_path, case: str) -> None:
    content, line, expected = CONVERSATIONS[case]
    (tmp_path / "c.json").write_bytes(content)
    done = _run(["render", "--conversation", "c.json"], tmp_path)
    assert done.returncode == 2, done.stderr
    _one_line(done.stderr, "render", f"c.json{line}", expected)


def test_audit_regress_names_a_bad_golden_or_conversation_file(capsys, tmp_path) -> None:
    golden = tmp_path / "golden" / "qwen3_5-x"
    golden.mkdir(parents=True)
    (golden / "case.json").write_text('{"family": "qwen3_5",\n "variant": }', encoding="utf-8")
    assert main(["audit", "--regress", str(tmp_path / "golden")]) == 2
    _one_line(capsys.readouterr().err, "audit", f"{golden / 'case.json'}:2:13", "not JSON (Expecting value)")
    conversations = tmp_path / "conversations"
    conversations.mkdir()
    (conversations / "c.json").write_text('{"name": "c", "tools": []}', encoding="utf-8")
    args = [
        "audit",
        "--regress",
        str(tmp_path / "new"),
        "--add-cases",
        str(conversations),
        "--family",
        "qwen3_5",
    ]
    assert main(args) == 2
    _one_line(capsys.readouterr().err, "audit", f"{conversations / 'c.json'}: messages", "expected an object")


def test_an_unexpected_failure_is_one_line_not_a_traceback(capsys, monkeypatch) -> None:
    import boundary.cli.render as command

    def broken(args: object) -> int:
        raise KeyError("boom")

    monkeypatch.setattr(command, "run", broken)
    monkeypatch.delenv("BOUNDARY_DEBUG", raising=False)
    assert main(["render"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("boundary render: internal error: KeyError: 'boom'") and "BOUNDARY_DEBUG=1" in err


@pytest.mark.parametrize("command", ["audit", "experiment"])
def test_a_request_the_template_refuses_is_named_by_its_trace_line(
    capsys, tmp_path, monkeypatch, command: str
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    lines = [
        {"session": "s0", "messages": [{"role": "user", "content": "hi"}]},
        {
            "session": "s1",
            "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}],
        },
    ]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert main(_command(command, trace)) == 2
    _one_line(
        capsys.readouterr().err, command, f"{trace}:2 (session 's1'): template:", "System message must be"
    )
