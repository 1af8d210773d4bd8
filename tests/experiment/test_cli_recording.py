"""``boundary experiment`` on a recording: at the geometry its header gives (block, unit, page
layout, pool) by default, ``--block`` for a trace without one, and a report header that says the
records were replayed as recorded, nothing rendered."""

from __future__ import annotations

import io
import json

import pytest

from boundary.cli.main import main
from boundary.experiment.harness import GIB
from boundary.trace.header import RecordedGeometry, RecordingHeader
from boundary.trace.records import production_record
from boundary.trace.writer import TraceWriter

GEOMETRY = RecordedGeometry(
    block_size=256,
    prefix_match_unit=16,
    page_bytes=1 << 20,
    group_size=1,
    attention_groups=1,
    recurrent_groups=3,
    state_bytes=900_000,
    num_pages=65,
)
HEADER = RecordingHeader(engine="vllm==0.34.0", policy="both", sessions="boundary_session", geometry=GEOMETRY)
FAST = ["--policies", "main_sparse,both", "--budget", "equal_capacity", "--no-cache"]


def write(path, header: RecordingHeader | None) -> None:
    """Two sessions of three turns, each prompt extending the last one's history and output."""
    with TraceWriter(path, header=header) as writer:
        for s in range(2):
            prompt = [1000 + s, *range(2, 600)]
            for turn in range(3):
                output = [5000 + 10 * turn + k for k in range(40)]
                writer.write(production_record(f"s{s}", prompt, output, u_end=len(prompt) - 3))
                prompt = [*prompt, *output, *range(7000 + turn * 100, 7000 + turn * 100 + 150)]


def run(args: list[str], capsys) -> tuple[int, str]:
    rc = main(["experiment", *args])
    return rc, capsys.readouterr().err


def test_a_recording_replays_at_its_engines_geometry_by_default(tmp_path, capsys):
    path, out, report = tmp_path / "rec.jsonl", tmp_path / "r.json", tmp_path / "r.md"
    write(path, HEADER)
    rc, err = run(["--workload", str(path), *FAST, "--json", str(out), "--report", str(report)], capsys)
    assert rc == 0, err
    result = json.loads(out.read_text())
    (unit,) = result["units"]
    assert (unit["block_size"], unit["unit"]) == (256, 16)
    assert unit["state_bytes"] == 3 * (1 << 20)  # one page per recurrent group
    assert result["config"]["capacity_gib"] == 64 * (1 << 20) / GIB  # the pool, its null page left out
    assert result["geometry"]["source"] == "the recording's header (vllm==0.34.0)"
    text = report.read_text()
    assert "production records replayed as recorded" in text and "nothing rendered" in text
    assert "outputs from boundary.outputs.format_output" not in text
    assert "cache layout from the recording's header (vllm==0.34.0): block 256, unit 16" in text


def test_a_recording_on_stdin_replays_at_its_headers_geometry_and_to_the_same_hits(
    tmp_path, capsys, monkeypatch
):
    path, from_file, from_stdin = tmp_path / "rec.jsonl", tmp_path / "f.json", tmp_path / "s.json"
    write(path, HEADER)
    rc, err = run(["--workload", str(path), *FAST, "--json", str(from_file)], capsys)
    assert rc == 0, err
    with path.open("rb") as file:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(file))
        rc, err = run(["--workload", "-", *FAST, "--json", str(from_stdin)], capsys)
    assert rc == 0, err
    file_run, stdin_run = json.loads(from_file.read_text()), json.loads(from_stdin.read_text())
    assert stdin_run["geometry"]["source"] == "the recording's header (vllm==0.34.0)"
    assert (stdin_run["units"][0]["block_size"], stdin_run["units"][0]["unit"]) == (256, 16)
    assert stdin_run["config"]["capacity_gib"] == file_run["config"]["capacity_gib"]
    timeless = [
        [{k: v for k, v in r.items() if k != "replay_wall_seconds"} for r in result["units"][0]["runs"]]
        for result in (file_run, stdin_run)
    ]
    assert timeless[0] == timeless[1]


def test_unit_and_capacity_still_override_a_header(tmp_path, capsys):
    path, out = tmp_path / "rec.jsonl", tmp_path / "r.json"
    write(path, HEADER)
    args = ["--workload", str(path), *FAST, "--unit", "64", "--capacity-gib", "1", "--json", str(out)]
    rc, err = run(args, capsys)
    assert rc == 0, err
    result = json.loads(out.read_text())
    assert (result["units"][0]["block_size"], result["units"][0]["unit"]) == (256, 64)
    assert result["config"]["capacity_gib"] == 1


def test_block_gives_the_geometry_of_a_trace_without_a_header(tmp_path, capsys):
    path, out = tmp_path / "rec.jsonl", tmp_path / "r.json"
    write(path, None)
    rc, err = run(
        ["--workload", str(path), *FAST, "--block", "2112", "--unit", "16", "--json", str(out)], capsys
    )
    assert rc == 0, err
    result = json.loads(out.read_text())
    assert (result["units"][0]["block_size"], result["units"][0]["unit"]) == (2112, 16)
    assert result["geometry"]["source"] == "--block 2112 with Qwen3.5-35B-A3B's page bytes"
    assert result["config"]["capacity_gib"] == 32


@pytest.mark.parametrize(
    ("header", "options", "message"),
    [
        (
            None,
            ["--block", "256"],
            "--block: block size 256 is below Qwen3.5-35B-A3B's align-mode minimum 1056 (give --model",
        ),
        (None, ["--block", "2112", "--unit", "100"], "--unit: 100 does not divide --block 2112"),
        (HEADER, ["--block", "512"], "--block: the recording's header gives its engine's block, 256"),
    ],
)
def test_a_block_that_cannot_be_the_geometry_is_a_one_line_error(tmp_path, capsys, header, options, message):
    path = tmp_path / "rec.jsonl"
    write(path, header)
    rc, err = run(["--workload", str(path), *FAST, *options], capsys)
    assert rc == 2 and err.startswith("boundary experiment: error: ") and message in err
