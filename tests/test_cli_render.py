"""``boundary render``: the main job on the embedded default, and clean errors."""

from __future__ import annotations

import json

from boundary.cli.main import main


def test_render_shows_the_default_conversation_with_both_boundaries(capsys, tmp_path) -> None:
    out = tmp_path / "r.json"
    assert main(["render", "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert "⟦U_end token" in err and "⟦P_end token" in err
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


def test_bad_input_exits_nonzero_with_a_one_line_message(capsys, tmp_path) -> None:
    conv = tmp_path / "c.json"
    conv.write_text(json.dumps([{"role": "user", "content": 3}]))
    assert main(["render", "--conversation", str(conv)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "boundary render: error: messages[0].content: expected a string or a list of text parts, got int"
    )
    assert main(["render", "--family", "nope"]) == 2
    assert "unknown family 'nope'" in capsys.readouterr().err
