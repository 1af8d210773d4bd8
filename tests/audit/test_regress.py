"""Template regression over the golden corpus in tests/golden (every shipped family x the
fixture conversations). Families without an offline vocabulary run on their labelled stand-in
tokenizer (``fam.tokenizer.stand_in``), as recorded in each expected file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import boundary
from boundary.audit.regress import add_cases, case_folders, check_corpus, write_expected
from boundary.errors import RequestError
from tests.support import family

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("name", sorted({p.name.rsplit("-", 1)[0] for p in case_folders(GOLDEN)}))
def test_the_golden_corpus_has_no_template_drift(name):
    checked, drifts = check_corpus(GOLDEN, loader=lambda n, v: family(n, v), families=[name])
    assert checked >= 10
    assert drifts == [], "\n".join(map(str, drifts))


def test_a_changed_template_is_reported_with_where_its_text_changed(tmp_path):
    shutil.copytree(GOLDEN / "qwen3-multi_turn", tmp_path / "qwen3-multi_turn")
    fam = family("qwen3")
    changed = boundary.Family(
        fam.spec,
        {
            "current": fam.template().replace(
                "'<|im_start|>' + message.role + '\\n' + content + '<|im_end|>'",
                "'<|im_start|>' + message.role + '\\n' + content.strip() + '<|im_end|>'",
            )
        },
        fam.tokenizer,
    )
    assert changed.template() != fam.template()
    checked, drifts = check_corpus(tmp_path, loader=lambda n, v: changed)
    assert checked == 1 and drifts == []  # the fixture's user turns carry no outer whitespace
    edited = boundary.Family(
        fam.spec,
        {"current": fam.template().replace("'<|im_start|>assistant\\n'", "'<|im_start|>assistant \\n'")},
        fam.tokenizer,
    )
    _, drifts = check_corpus(tmp_path, loader=lambda n, v: edited)
    fields = {d.field for d in drifts}
    assert {"prompt.sha256", "prompt.suffix"} <= fields
    text = next(d for d in drifts if d.field == "prompt.sha256")
    assert "text first differs at char" in str(text) and "assistant \\n' now" in str(text)


def test_new_cases_are_written_from_a_folder_of_conversations(tmp_path):
    conversations = tmp_path / "conversations"
    conversations.mkdir()
    (conversations / "hello.json").write_text(
        json.dumps({"name": "hello", "messages": [{"role": "user", "content": "Hello?"}]})
    )
    golden = tmp_path / "golden"
    assert add_cases(golden, conversations, ["qwen3_5", "falcon_h1"]) == 1  # falcon_h1 ships no template
    assert add_cases(golden, conversations, ["qwen3_5"]) == 0  # existing cases are kept
    assert write_expected(golden, loader=lambda n, v: family(n, v)) == 1
    expected = json.loads((golden / "qwen3_5-hello" / "expected.json").read_text())
    assert expected["turns"][0]["prompt"]["suffix"] == "<|im_start|>assistant\n<think>\n"
    assert check_corpus(golden, loader=lambda n, v: family(n, v)) == (1, [])
    (golden / "qwen3_5-hello" / "expected.json").unlink()
    _, drifts = check_corpus(golden, loader=lambda n, v: family(n, v))
    assert [d.field for d in drifts] == ["expected.json"]


def test_a_folder_without_cases_is_a_request_error(tmp_path):
    with pytest.raises(RequestError, match=r"no <family>-<case>/case\.json folders"):
        case_folders(tmp_path)
    (tmp_path / "x-y").mkdir()
    (tmp_path / "x-y" / "case.json").write_text("{}")
    with pytest.raises(RequestError, match=r"case\.json: family: Field required"):
        check_corpus(tmp_path)
