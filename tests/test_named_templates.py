"""``Family.from_pretrained`` chooses among a model directory's named templates exactly as
transformers' ``apply_chat_template`` (``get_chat_template``) and vLLM's
``resolve_chat_template`` choose: ``tool_use`` whenever the request gives tools, ``default``
otherwise (Hermes-2-Pro / Hermes-3 and Command-R ship both).

The oracle is the real library on a directory the test writes: transformers' own
``AutoTokenizer`` reads it and renders the raw request; boundary renders the same request."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer

import boundary

LOOP = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</>{% endfor %}"
GEN = "{% if add_generation_prompt %}<assistant>{% endif %}"
TEMPLATES = {
    "default": "[default]" + LOOP + GEN,
    "tool_use": "[tool_use]{% for t in tools or [] %}({{ t.function.name }}){% endfor %}" + LOOP + GEN,
    "rag": "[rag]" + LOOP + GEN,
}
MESSAGES = [{"role": "user", "content": "What is the weather in Rome?"}]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]


@cache
def _small_tokenizer() -> str:
    """A byte-level BPE tokenizer small enough to load in milliseconds."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|im_end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["What is the weather in Rome? <assistant> [default] [tool_use]"], trainer)
    return tok.to_str()


def _tokenizer_files(path: Path, config: dict[str, Any]) -> Path:
    (path / "tokenizer.json").write_text(_small_tokenizer(), encoding="utf-8")
    base = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>"}
    (path / "tokenizer_config.json").write_text(json.dumps({**base, **config}), encoding="utf-8")
    return path


def _in_config(path: Path, names: list[str]) -> Path:
    """``chat_template`` in tokenizer_config.json as a list of ``{name, template}``."""
    return _tokenizer_files(path, {"chat_template": [{"name": n, "template": TEMPLATES[n]} for n in names]})


def _as_files(path: Path, names: list[str]) -> Path:
    """``chat_template.jinja`` (the default) and ``additional_chat_templates/<name>.jinja``."""
    _tokenizer_files(path, {})
    (path / "additional_chat_templates").mkdir()
    for name in names:
        target = (
            path / "chat_template.jinja"
            if name == "default"
            else path / f"additional_chat_templates/{name}.jinja"
        )
        target.write_text(TEMPLATES[name], encoding="utf-8")
    return path


LAYOUTS = {
    "config_list": lambda p: _in_config(p, ["default", "tool_use", "rag"]),
    "config_list_tool_use_first": lambda p: _in_config(p, ["tool_use", "rag", "default"]),
    "jinja_files": lambda p: _as_files(p, ["default", "tool_use", "rag"]),
}
REQUESTS = {"no_tools": None, "tools": TOOLS, "empty_tools": []}


def _reference(path: Path, tools: list[dict[str, Any]] | None, **options: Any) -> tuple[str, list[int]]:
    hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
    text = hf.apply_chat_template(
        MESSAGES, tools=tools, tokenize=False, add_generation_prompt=True, **options
    )
    ids = hf.apply_chat_template(
        MESSAGES, tools=tools, tokenize=True, add_generation_prompt=True, return_dict=False, **options
    )
    return text, ids


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("request_kind", sorted(REQUESTS))
def test_the_template_rendered_is_the_one_transformers_chooses(
    tmp_path, layout: str, request_kind: str
) -> None:
    path = LAYOUTS[layout](tmp_path)
    tools = REQUESTS[request_kind]
    text, ids = _reference(path, tools)
    fam = boundary.Family.from_pretrained(path)
    r = fam.render(MESSAGES, tools)
    assert r.text == text and r.token_ids == ids
    expected = "[tool_use]" if tools is not None else "[default]"
    assert text.startswith(expected)
    assert fam.session().render(MESSAGES, tools).text == text


@pytest.mark.parametrize("name", ["default", "tool_use", "rag"])
def test_a_named_variant_is_the_template_of_that_name(tmp_path, name: str) -> None:
    path = LAYOUTS["config_list"](tmp_path)
    text, ids = _reference(path, TOOLS, chat_template=name)
    r = boundary.Family.from_pretrained(path).render(MESSAGES, TOOLS, variant=name)
    assert r.text == text and r.token_ids == ids


def test_without_a_default_a_request_without_tools_is_refused_as_transformers_refuses_it(tmp_path) -> None:
    path = _in_config(tmp_path, ["tool_use", "rag"])
    hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
    with pytest.raises(ValueError, match="no default"):
        hf.apply_chat_template(MESSAGES, tokenize=False)
    fam = boundary.Family.from_pretrained(path)
    with pytest.raises(boundary.RequestError, match="no template named 'default'"):
        fam.render(MESSAGES)
    text, _ = _reference(path, TOOLS)
    assert fam.render(MESSAGES, TOOLS).text == text


@pytest.mark.vllm
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("request_kind", ["no_tools", "tools"])
def test_vllm_resolves_the_same_template(tmp_path, layout: str, request_kind: str) -> None:
    """vLLM 0.33.0's ``resolve_chat_template`` (a request's ``tools: []`` is refused there)."""
    pytest.importorskip("vllm", reason="vLLM is not installed")
    from vllm.renderers.hf import resolve_chat_template

    path = LAYOUTS[layout](tmp_path)
    tools = REQUESTS[request_kind]
    hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
    config = SimpleNamespace(
        tokenizer_revision=None,
        code_revision=None,
        tokenizer=str(path),
        model=str(path),
        trust_remote_code=False,
        hf_config=SimpleNamespace(model_type="llama"),
    )
    chosen = resolve_chat_template(hf, None, tools, model_config=config)  # type: ignore[arg-type]
    fam = boundary.Family.from_pretrained(path)
    assert fam.template(fam.select_variant(None, tools)) == chosen
