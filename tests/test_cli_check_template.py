"""``boundary check-template``: a real template boundary does not ship (TRL's Qwen2.5 template,
``fixtures/held_out_templates``) held to the built-in corpus with a shipped vocabulary: its U_end
status, append-only history and round-trip causes are reported; an edited copy is flagged
against the original (``--previous``) and against a stored check (``--golden``), exit 1; bad
input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import boundary
from boundary.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT = ROOT / "fixtures" / "held_out_templates" / "trl_qwen2_5.jinja"
# Qwen2.5 writes its tool calls as Qwen3 does (JSON inside <tool_call>): --like qwen3 reads them back
LIKE = ["--like", "qwen3"]
# the flag kept in a namespace and the generation prompt printed from it after the loop
FLAG_READ_LATER = (
    "{% set ns = namespace(agp=false) %}{% if add_generation_prompt %}{% set ns.agp = true %}{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</>{% endfor %}"
    "{% if ns.agp %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped Qwen3 vocabulary as a ``tokenizer.json`` (the held-out template's own
    vocabulary is Qwen2.5's, whose chat tokens Qwen3 keeps)."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(boundary.load_family("qwen3").tokenizer.backend.to_str(), encoding="utf-8")
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["check-template", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def records(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_a_held_out_template_is_checked_over_the_builtin_corpus(
    tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "check.json"
    code, report, err = run(
        [str(HELD_OUT), "--tokenizer", str(tokenizer), *LIKE, "--json", str(out_json)], capsys
    )
    assert code == 0, err
    data = records(out_json)
    rows = data["records"]
    assert data["template"] == "trl_qwen2_5.jinja" and data["changes"] == {}
    assert {r["kind"] for r in rows} == {"after user", "after tool"}
    assert all(r["u_end"] is not None and r["reason"] is None for r in rows)
    assert all(r["target_equal"] is True for r in rows)
    follow_ups = [r for r in rows if r["previous"] is not None]
    assert follow_ups and all(r["extends"] for r in follow_ups)
    answers = [r["answer"] for r in rows if r["answer"]]
    causes = {a["cause"] for a in answers if not a["round_trips"]}
    # the template re-serializes tool-call arguments and drops reasoning from history
    assert {"tool_call_reserialized", "hidden_reasoning_dropped"} <= causes
    assert sum(a["round_trips"] for a in answers) > len(answers) // 2
    for section in (
        "## U_end",
        "## History append-only",
        "## Answers (D_end)",
        "## Agreement with transformers",
    ):
        assert section in report
    assert "| after tool |" in report and f"{len(rows)} of {len(rows)} requests: text and ids equal" in report
    assert err.startswith(f"boundary check-template: {len(rows)} requests in ")


def test_an_edited_copy_is_a_regression_against_the_original(
    tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edited = tmp_path / "edited.jinja"
    original = HELD_OUT.read_text(encoding="utf-8")
    # the edit moves the tool-call block's opening newline: every tool-call turn renders differently
    changed = original.replace("<tool_call>\\n", "<tool_call>")
    assert changed != original
    edited.write_text(changed, encoding="utf-8")
    out_json = tmp_path / "diff.json"
    argv = [
        str(edited),
        "--tokenizer",
        str(tokenizer),
        *LIKE,
        "--previous",
        str(HELD_OUT),
        "--json",
        str(out_json),
    ]
    code, report, _ = run(argv, capsys)
    assert code == 1
    found = records(out_json)["changes"]["previous template"]
    assert found and all(c["where"].split(",")[0] for c in found)
    assert any("text_sha256" in c["fields"] for c in found)
    assert "## Changes against the previous template" in report
    # the same template as its own previous version: nothing changed
    same = [str(HELD_OUT), "--tokenizer", str(tokenizer), *LIKE, "--previous", str(HELD_OUT)]
    code, report, _ = run(same, capsys)
    assert code == 0 and "## Changes against the previous template\n\nNone." in report


def test_a_golden_check_is_stored_then_holds_then_catches_an_edit(
    tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "chat_template.jinja"
    template.write_text(HELD_OUT.read_text(encoding="utf-8"), encoding="utf-8")
    golden = tmp_path / "golden"
    argv = [str(template), "--tokenizer", str(tokenizer), "--golden", str(golden)]
    code, _, err = run(argv, capsys)
    assert code == 2 and "no stored check" in err and "--update" in err
    assert run([*argv, "--update"], capsys)[0] == 0
    assert (golden / "chat_template.jinja.json").is_file()
    assert run(argv, capsys)[0] == 0
    template.write_text(
        HELD_OUT.read_text(encoding="utf-8").replace("<|im_start|>system\\n", "<|im_start|>system\\n\\n")
    )
    code, report, _ = run(argv, capsys)
    assert code == 1 and "## Changes against the golden check" in report and "text changed" in report


def test_a_template_without_u_end_is_reported_with_the_reason_and_your_conversations(
    tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "later.jinja"
    template.write_text(FLAG_READ_LATER, encoding="utf-8")
    mine = tmp_path / "mine.jsonl"
    chats = [
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
            {"role": "user", "content": "x"},
        ],
        {"name": "solo", "messages": [{"role": "user", "content": "alone"}]},
    ]
    mine.write_text("\n".join(json.dumps(c) for c in chats) + "\n", encoding="utf-8")
    out_json = tmp_path / "out.json"
    argv = [str(template), "--tokenizer", str(tokenizer), "--conversations", str(mine), "--no-builtin"]
    code, report, _ = run([*argv, "--json", str(out_json)], capsys)
    assert code == 0  # nothing to compare with: a finding, not a change
    rows = records(out_json)["records"]
    assert [(r["name"], r["messages"]) for r in rows] == [("mine-1", 1), ("mine-1", 3), ("solo", 1)]
    assert all(r["u_end"] is None and "add_generation_prompt" in r["reason"] for r in rows)
    assert "| after user | 3 | 0 | 3 | 0 |" in report and "UNAVAILABLE ×" in report


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--update"], "--update goes with --golden DIR"),
        (["--no-builtin"], "--no-builtin leaves nothing to check"),
        (["--previous", "missing.jinja"], "--previous missing.jinja: no such file"),
        (["--family", "qwen3_5", "--like", "qwen3"], "--like goes with --model DIR or --template FILE"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    argv: list[str], message: str, tokenizer: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [] if "--family" in argv else [str(HELD_OUT), "--tokenizer", str(tokenizer)]
    code, out, err = run([*base, *argv], capsys)
    assert code == 2 and out == ""
    assert err.startswith("boundary check-template: error: ") and message in err
    assert err.count("\n") == 1


def test_a_bad_conversations_file_names_the_line(
    tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine.jsonl"
    mine.write_text('[{"role": "user", "content": "ok"}]\n{"messages": "not a list"}\n', encoding="utf-8")
    code, _, err = run([str(HELD_OUT), "--tokenizer", str(tokenizer), "--conversations", str(mine)], capsys)
    assert code == 2 and f"{mine}: line 2: expected a message list or an object with 'messages'" in err


def test_a_model_directory_is_checked_with_a_shipped_familys_conventions(
    tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "My-Qwen2.5-FT"
    model.mkdir()
    (model / "chat_template.jinja").write_bytes(HELD_OUT.read_bytes())
    (model / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>"}
    (model / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    out_json = tmp_path / "out.json"
    code, report, _ = run(["--model", str(model), *LIKE, "--json", str(out_json)], capsys)
    assert code == 0
    assert f"--model {model} --like qwen3;" in report
    answers = [r["answer"] for r in records(out_json)["records"] if r["answer"]]
    calls_read_back = [a for a in answers if a["cause"] == "tool_call_reserialized"]
    assert calls_read_back and not any(a["skipped"] for a in answers)
    # without --like the model has no tool-call format: its tool-calling answers are skipped, by name
    code, report, _ = run(["--model", str(model)], capsys)
    assert code == 0 and "has no tool-call format" in report
