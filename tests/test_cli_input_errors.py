"""Every input the CLIs refuse is named by file:line (and field), the same way by ``boundary
audit`` and ``boundary experiment``, with exit code 2 and one line on stderr, never a traceback.

The trace's bad request is on line 3 after two good ones, so the line number is checked too."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import boundary.trace.reader
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


CHATS = [
    json.dumps({"session": "s0", "messages": [{"role": "user", "content": "hi"}]}),
    json.dumps(
        {
            "session": "s0",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "bye"},
            ],
        }
    ),
]


def _chat_trace(tmp_path: Path, tail: bytes = b"") -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_bytes("".join(line + "\n" for line in CHATS).encode() + tail)
    return path


def _quick(command: str, trace: Path | str) -> list[str]:
    """``_command`` with the experiment cut to one policy and budget (a fast replay)."""
    quick = ["--policies", "main_sparse", "--budget", "equal_capacity"] if command == "experiment" else []
    return [*_command(command, Path(trace)), *quick]


OUTPUT_FLAGS = [
    ("audit", "--markdown"),
    ("audit", "--json"),
    ("audit", "--plot"),
    ("experiment", "--report"),
    ("experiment", "--json"),
    ("experiment", "--plots"),
]


@pytest.mark.parametrize(("command", "flag"), OUTPUT_FLAGS)
def test_an_output_flag_naming_the_input_trace_is_refused_before_anything_is_written(
    capsys, tmp_path, monkeypatch, command: str, flag: str
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    trace = _chat_trace(tmp_path)
    before = trace.read_bytes()
    assert main([*_quick(command, trace), flag, str(trace)]) == 2
    _one_line(capsys.readouterr().err, command, f"{flag} {trace}", "the same file as the trace")
    assert trace.read_bytes() == before
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("spelling", ["symlink", "relative", "hard_link"])
def test_the_input_under_another_name_is_refused_as_an_output_too(
    capsys, tmp_path, monkeypatch, spelling: str
) -> None:
    trace = _chat_trace(tmp_path)
    before = trace.read_bytes()
    monkeypatch.chdir(tmp_path)
    output = {
        "symlink": tmp_path / "report.md",
        "relative": Path("./trace.jsonl"),
        "hard_link": tmp_path / "h",
    }
    if spelling == "symlink":
        output[spelling].symlink_to(trace)
    elif spelling == "hard_link":
        os.link(trace, output[spelling])
    assert main([*_quick("audit", trace), "--markdown", str(output[spelling])]) == 2
    _one_line(capsys.readouterr().err, "audit", f"--markdown {output[spelling]}", f"trace ({trace})")
    assert trace.read_bytes() == before


def test_an_output_that_is_not_there_yet_is_compared_by_its_path(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*_quick("audit", Path("missing.jsonl")), "--json", str(tmp_path / "missing.jsonl")]) == 2
    _one_line(capsys.readouterr().err, "audit", f"--json {tmp_path / 'missing.jsonl'}", "the same file")
    assert not (tmp_path / "missing.jsonl").exists()


def test_render_refuses_to_write_its_json_over_the_conversation(capsys, tmp_path) -> None:
    conversation = tmp_path / "c.json"
    conversation.write_text('[{"role": "user", "content": "hi"}]', encoding="utf-8")
    assert main(["render", "--conversation", str(conversation), "--json", str(conversation)]) == 2
    _one_line(
        capsys.readouterr().err, "render", f"--json {conversation}", "the same file as the conversation"
    )
    assert conversation.read_text(encoding="utf-8") == '[{"role": "user", "content": "hi"}]'


def _not_regular(kind: str, tmp_path: Path) -> Path:
    if kind == "device":
        return Path("/dev/zero")
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo"
    return tmp_path


@pytest.mark.parametrize("command", ["audit", "experiment"])
@pytest.mark.parametrize(
    ("kind", "what"), [("device", "a character device"), ("directory", "a directory"), ("fifo", "a FIFO")]
)
def test_a_trace_that_is_not_a_regular_file_is_refused_before_it_is_read(
    capsys, tmp_path, monkeypatch, command: str, kind: str, what: str
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    path = _not_regular(kind, tmp_path)
    assert main(_quick(command, path)) == 2
    _one_line(capsys.readouterr().err, command, f"{path}: not a regular file", f"({what})")


@pytest.mark.parametrize("command", ["audit", "experiment"])
def test_a_trace_on_stdin_is_read_and_dev_zero_there_stops_at_the_line_bound(
    capsys, tmp_path, monkeypatch, command: str
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    trace = _chat_trace(tmp_path)
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(trace.read_bytes())))
    assert main([*_quick(command, "-"), "--json", str(tmp_path / "out.json")]) == 0, capsys.readouterr().err
    assert (tmp_path / "out.json").exists()
    capsys.readouterr()
    monkeypatch.setattr(boundary.trace.reader, "MAX_LINE_BYTES", 1 << 20)
    with Path("/dev/zero").open("rb") as zero:
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=zero))
        assert main(_quick(command, "-")) == 2
    _one_line(capsys.readouterr().err, command, "<stdin>:1: ", "longer than 1 MiB")


@pytest.mark.parametrize("command", ["audit", "experiment"])
def test_a_line_or_a_trace_past_its_bound_is_refused_naming_the_line(
    capsys, tmp_path, monkeypatch, command: str
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    trace = _chat_trace(tmp_path, b'{"session": "s1", "messages": []}' + b" " * 200 + b"\n")
    monkeypatch.setattr(boundary.trace.reader, "MAX_LINE_BYTES", 200)
    assert main(_quick(command, trace)) == 2
    _one_line(capsys.readouterr().err, command, f"{trace}:3: ", "longer than 200 bytes")
    monkeypatch.setattr(boundary.trace.reader, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(boundary.trace.reader, "MAX_TRACE_BYTES", len(trace.read_bytes()) - 1)
    assert main(_quick(command, trace)) == 2
    _one_line(capsys.readouterr().err, command, f"{trace}:3: the trace goes on past ", "the bound on a trace")


@pytest.mark.parametrize("command", ["audit", "experiment"])
def test_a_cut_off_last_line_is_skipped_with_a_warning_and_the_rest_is_read(
    capsys, tmp_path, monkeypatch, command: str
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    trace = _chat_trace(tmp_path, b'{"session": "s0", "messages": [{"role": "us')
    out = tmp_path / "out.json"
    assert main([*_quick(command, trace), "--json", str(out)]) == 0
    err = capsys.readouterr().err
    warning = f"boundary {command}: warning: {trace}:3: the last line is cut off"
    assert f"{warning} (a recording still being written?); skipped" in err.splitlines()
    assert "Traceback" not in err and out.exists()


@pytest.mark.parametrize("command", ["audit", "experiment"])
@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b'{"session": "s0", "messages": [{"role": "us\n', id="ends_with_a_newline"),
        pytest.param(b'{"session": "s0", "messages": [{"role": "us\n' + CHATS[0].encode(), id="not_last"),
    ],
)
def test_a_bad_line_that_is_not_a_cut_off_last_line_is_still_an_error(
    capsys, tmp_path, monkeypatch, command: str, content: bytes
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path / "cache"))
    trace = _chat_trace(tmp_path, content)
    assert main(_quick(command, trace)) == 2
    _one_line(capsys.readouterr().err, command, f"{trace}:3: ", "not JSON")
