"""Every command renders with the model a user has: a local model directory (``--model DIR``) or
a template file with its tokenizer (``--template FILE --tokenizer PATH``), not only a shipped
``--family``. A directory holding a shipped family's template and vocabulary under another name
renders exactly as that family; wrong or combined choices end in one line and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import boundary
from boundary.cli.main import main
from boundary.experiment import model_config
from boundary.experiment.harness import ExperimentResult
from boundary.family.registry import family_spec
from boundary.shipped.resources import data_dir

SHIPPED = "qwen3_5"
CHATS = [
    {
        "session": "s0",
        "messages": [{"role": "user", "content": "hi"}],
        "output": {"message": {"role": "assistant", "content": "hello"}},
    },
    {
        "session": "s0",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"},
        ],
    },
]


@pytest.fixture(scope="module")
def shipped_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The shipped family's default template file (copied) and its vocabulary as a
    ``tokenizer.json``, under names of their own."""
    root = tmp_path_factory.mktemp("shipped")
    spec = family_spec(SHIPPED)
    variant = next(v for v in spec.variants if v.name == spec.default_variant)
    template = root / "my_template.jinja"
    template.write_bytes((data_dir("templates") / SHIPPED / variant.file).read_bytes())
    tokenizer = root / "tokenizer.json"
    tokenizer.write_text(boundary.load_family(SHIPPED).tokenizer.backend.to_str(), encoding="utf-8")
    return template, tokenizer


def _model_dir(path: Path, template: Path, tokenizer_json: str) -> Path:
    """A model directory's tokenizer files, as a download leaves them: ``chat_template.jinja``,
    ``tokenizer.json`` and ``tokenizer_config.json``."""
    path.mkdir()
    (path / "chat_template.jinja").write_bytes(template.read_bytes())
    (path / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>"}
    (path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, shipped_files: tuple[Path, Path]) -> Path:
    """The shipped family's template and vocabulary as a model directory of another name."""
    template, tokenizer = shipped_files
    return _model_dir(
        tmp_path_factory.mktemp("models") / "MyQwen", template, tokenizer.read_text(encoding="utf-8")
    )


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, shipped_files: tuple[Path, Path]) -> Path:
    """The shipped family's template with a byte-level BPE of a few hundred tokens: it loads in
    milliseconds."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|im_start|>", "<|im_end|>", "<think>", "</think>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(["user assistant hi hello bye"], trainer)
    return _model_dir(tmp_path_factory.mktemp("models") / "tiny", shipped_files[0], bpe.to_str())


@pytest.fixture(scope="module")
def shipped_render(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("render") / "shipped.json"
    assert main(["render", "--family", SHIPPED, "--json", str(out)]) == 0
    return dict(json.loads(out.read_text()))


def _render(capsys: pytest.CaptureFixture[str], *options: str) -> dict[str, object]:
    assert main(["render", *options, "--json", "-"]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert "⟦U_end token" in captured.err
    return dict(json.loads(captured.out))


def _same_rendering(got: dict[str, object], shipped: dict[str, object]) -> None:
    for key in ("token_ids", "u_end", "p_end", "input_end", "checkpoints"):
        assert got[key] == shipped[key], key


def test_render_with_a_model_directory_gives_the_shipped_familys_ids_and_boundaries(
    capsys: pytest.CaptureFixture[str], model_dir: Path, shipped_render: dict[str, object]
) -> None:
    got = _render(capsys, "--model", str(model_dir))
    _same_rendering(got, shipped_render)
    assert got["family"] == "MyQwen" and got["tokenizer"] == str(model_dir)


def test_render_with_a_template_file_and_tokenizer_json_gives_the_same(
    capsys: pytest.CaptureFixture[str],
    shipped_files: tuple[Path, Path],
    shipped_render: dict[str, object],
) -> None:
    template, tokenizer = shipped_files
    got = _render(capsys, "--template", str(template), "--tokenizer", str(tokenizer))
    _same_rendering(got, shipped_render)
    assert got["family"] == "my_template.jinja"


def test_render_names_a_variant_the_model_directory_lacks(
    capsys: pytest.CaptureFixture[str], tiny_model: Path
) -> None:
    assert main(["render", "--model", str(tiny_model), "--variant", "tool_use"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["boundary render: error: tiny: unknown variant 'tool_use' (have: default)"]


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in CHATS), encoding="utf-8")
    return path


def test_audit_runs_a_trace_with_a_model_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_model: Path
) -> None:
    out = tmp_path / "audit.json"
    argv = ["audit", str(_trace(tmp_path)), "--model", str(tiny_model), "--no-what-if", "--json", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["family"] == "tiny" and report["tokenizer"] == str(tiny_model)
    assert report["summary"]["turns"] == 2
    assert "tiny" in capsys.readouterr().out  # the Markdown report's header


def test_experiment_takes_templates_tokenizer_and_geometry_from_a_model_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_model: Path
) -> None:
    """A made-up hybrid ``config.json`` (a small Qwen3-Next: 4 layers, one of them attention)
    beside the tokenizer files: the experiment renders with the directory's template and
    tokenizer and replays with ``describe_model``'s geometry for it, the header naming it."""
    from transformers import Qwen3NextConfig

    model = tmp_path / "tiny-next"
    shutil.copytree(tiny_model, model)
    Qwen3NextConfig(
        num_hidden_layers=4,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        vocab_size=300,
        dtype="bfloat16",
    ).save_pretrained(model)
    out = tmp_path / "experiment.json"
    argv = [
        "experiment",
        "--workload",
        str(_trace(tmp_path)),
        "--model",
        str(model),
        "--policies",
        "main_sparse",
        "--budget",
        "equal_capacity",
        "--no-cache",
        "--json",
        str(out),
    ]
    assert main(argv) == 0, capsys.readouterr().err
    result = ExperimentResult.model_validate_json(out.read_text())
    expected = model_config.describe_model(model)
    assert (expected.attention_layers, expected.recurrent_layers) == (1, 3)
    assert result.model["name"] == "tiny-next" and result.model["source"] == expected.source
    assert result.model["recurrent_state_bytes"] == expected.recurrent_state_bytes
    assert result.stream["family"] == "tiny-next"
    assert "(trace.jsonl, tiny-next)" in capsys.readouterr().err


HUB_ID = "Qwen/Qwen3.5-35B-A3B"
OFFLINE = "(boundary runs offline; download the model and pass its directory)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["render", "--model", HUB_ID], f"--model {HUB_ID}: not a local directory {OFFLINE}"),
        (["audit", "{trace}", "--model", HUB_ID], f"--model {HUB_ID}: not a local directory {OFFLINE}"),
        (
            ["experiment", "--workload", "{trace}", "--model", HUB_ID],
            f"--model {HUB_ID}: neither a model preset (",
        ),
        (["render", "--model", "{trace}"], "{trace}: not a directory"),
        (["render", "--family", SHIPPED, "--model", "{model}"], "--family and --model: give one of them"),
        (
            ["audit", "{trace}", "--model", "{model}", "--template", "{template}", "--tokenizer", "{tok}"],
            "--model and --template: give one of them",
        ),
        (
            ["experiment", "--workload", "{trace}", "--family", SHIPPED, "--model", "{model}"],
            "--family and --model: give one of them",
        ),
        (["render", "--template", "{template}"], "--template needs --tokenizer"),
        (["audit", "{trace}", "--tokenizer", "{tok}"], "--tokenizer goes with --template"),
        (["render", "--template", "{tmp}/none.jinja", "--tokenizer", "{tok}"], "none.jinja: no such file"),
        (
            ["render", "--template", "{template}", "--tokenizer", "{tmp}/none"],
            "none: no such file or directory",
        ),
        (["audit", "{trace}"], "--family is required"),
        (
            ["render", "--template", "{template}", "--tokenizer", "{tok}", "--json", "{tok}"],
            "the same file as the --tokenizer",
        ),
        (["audit", "--regress", "{tmp}", "--model", "{model}"], "--regress re-renders golden cases"),
        (
            ["experiment", "--workload", "{trace}", "--template", "{template}", "--tokenizer", "{tok}"],
            "no model preset for family 'my_template.jinja'; pass --model",
        ),
    ],
)
def test_a_wrong_or_doubled_family_choice_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    shipped_files: tuple[Path, Path],
    argv: list[str],
    message: str,
) -> None:
    template, tokenizer = shipped_files
    model = tmp_path / "model"
    model.mkdir()
    places = {
        "{trace}": str(_trace(tmp_path)),
        "{model}": str(model),
        "{template}": str(template),
        "{tok}": str(tokenizer),
        "{tmp}": str(tmp_path),
    }
    for key, value in places.items():
        argv = [a.replace(key, value) for a in argv]
        message = message.replace(key, value)
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"boundary {argv[0]}: error: "), lines[0]
    assert message in lines[0], lines[0]
