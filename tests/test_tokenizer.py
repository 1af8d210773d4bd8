"""Shipped vocabularies: the converted rank files encode exactly as tiktoken does, ids match
the published special-token ids, and any HF tokenizer form is accepted."""

from __future__ import annotations

import json

import pytest
import tokenizers

import boundary
from boundary.shipped.resources import data_dir
from boundary.tokenize.tokenizer import Tokenizer, check_against_tiktoken, load_vocabulary, vocabulary_spec


def corpus() -> list[str]:
    """Real text: every tau-bench message and tool-call argument, MT-bench questions and answers,
    plus hand-picked Unicode edge cases (combining marks, NFC-changing input, emoji, CJK, digits)."""
    root = data_dir("datasets")
    texts: list[str] = []
    for traj in json.loads((root / "tau_bench" / "gpt-4o-airline.json").read_text(encoding="utf-8")):
        for m in traj["traj"]:
            texts.append(m.get("content") or "")
            texts.extend(c["function"]["arguments"] for c in m.get("tool_calls") or [])
    for line in (root / "mt_bench" / "question.jsonl").read_text(encoding="utf-8").splitlines():
        texts.extend(json.loads(line)["turns"])
    for line in (root / "mt_bench" / "reference_answer_gpt-4.jsonl").read_text(encoding="utf-8").splitlines():
        texts.extend(json.loads(line)["choices"][0]["turns"])
    texts += [
        "e\u0301cole and \u00e9cole",
        "ǅ ǆ ﬁ ﬂ",
        "😀👩‍👩‍👧 ok",
        "日本語のテキスト、中文文本。",
        "١٢٣ 12345678 ١٢٣٤",
        "  \n\n\t  x  \r\n",
        "'s 'S 'LL don't",
        "<|im_start|>user\nhi<|im_end|>",
        "<think>\n\n</think>\n\n",
    ]
    return sorted(set(texts))


@pytest.mark.parametrize("name", ["qwen3", "qwen3_5"])
def test_converted_rank_files_encode_exactly_like_tiktoken(name: str) -> None:
    texts = corpus()
    assert len(texts) > 3500
    assert check_against_tiktoken(name, texts) == []


@pytest.mark.parametrize(
    ("name", "token", "token_id"),
    [
        ("qwen3", "<|im_start|>", 151644),
        ("qwen3", "<think>", 151667),
        ("qwen3_5", "<|im_start|>", 248045),
        ("qwen3_5", "<think>", 248068),
    ],
)
def test_added_tokens_keep_their_published_ids(name: str, token: str, token_id: int) -> None:
    tok = load_vocabulary(name)
    assert tok.token_to_id(token) == token_id
    assert tok.encode(f"a{token}b", add_special_tokens=False).ids[1] == token_id


def test_non_special_added_tokens_keep_their_flag() -> None:
    spec = vocabulary_spec("qwen3")
    decoder = load_vocabulary("qwen3").get_added_tokens_decoder()
    flags = {t.content: t.special for t in decoder.values()}
    assert flags["<think>"] is False and flags["<|im_start|>"] is True
    assert set(spec.non_special) <= {c for c, special in flags.items() if not special}


def test_any_hf_tokenizer_form_is_accepted(tmp_path) -> None:
    backend = load_vocabulary("qwen3")
    path = tmp_path / "tokenizer.json"
    path.write_text(backend.to_str(), encoding="utf-8")
    text = "Hello <|im_start|>world"
    expected = backend.encode(text, add_special_tokens=False).ids
    forms = [backend, str(path), Tokenizer(backend).to_transformers(), Tokenizer(backend)]
    for form in forms:
        assert Tokenizer.from_any(form).encode_ids(text) == expected


def test_special_token_variables_are_registered_like_transformers_does() -> None:
    tok = Tokenizer(load_vocabulary("qwen3"), special_tokens={"bos_token": "<s>"})
    hf = tok.to_transformers()
    assert tok.encode_ids("<s>hi") == hf("<s>hi", add_special_tokens=False)["input_ids"]
    assert len(tok.encode_ids("<s>")) == 1
    assert len(load_vocabulary("qwen3").encode("<s>", add_special_tokens=False).ids) == 2  # untouched


def test_unknown_inputs_are_tokenizer_errors(tmp_path) -> None:
    with pytest.raises(boundary.TokenizerError, match="no tokenizer"):
        Tokenizer.from_any(tmp_path / "missing.json")
    with pytest.raises(boundary.TokenizerError, match="cannot use a int"):
        Tokenizer.from_any(3)
    with pytest.raises(boundary.TokenizerError, match="no shipped vocabulary"):
        vocabulary_spec("klingon")


def test_stand_in_tokenizers_are_labelled_and_register_the_family_control_tokens() -> None:
    fam = boundary.load_family("granite_4_h")
    assert fam.tokenizer.stand_in
    assert "stand-in" in fam.tokenizer.source
    for token in fam.spec.control_tokens:
        assert len(fam.tokenizer.encode_ids(token)) == 1, token
    assert not boundary.load_family("qwen3_5").tokenizer.stand_in


def test_a_tokenizers_object_is_not_copied_when_nothing_needs_adding() -> None:
    backend = tokenizers.Tokenizer.from_str(load_vocabulary("qwen3").to_str())
    assert Tokenizer(backend, special_tokens={"eos_token": "<|im_end|>"}).backend is backend


@pytest.mark.parametrize("family_name", ["qwen3", "qwen3_5", "granite_4_h"])
def test_the_tiktoken_segment_path_gives_the_tokenizers_ids(family_name: str) -> None:
    tok = boundary.load_family(family_name).tokenizer
    assert tok.segments is not None
    texts = corpus()
    controls = [t.content for t in tok.added_tokens().values()]
    texts += [f"{a}{t}{b}" for a, t, b in zip(texts[::7], controls * 50, texts[3::7], strict=False)]
    for text in texts:
        expected = tok.backend.encode(text, add_special_tokens=False).ids
        encoded = tok.encode(text)
        assert encoded.ids == expected, text[:80]
        for cut in encoded.cuts:
            assert tok.backend.encode(text[: cut.char], add_special_tokens=False).ids == expected[: cut.token]


def test_vocabularies_without_a_rank_file_use_the_tokenizers_path() -> None:
    assert boundary.load_family("deepseek_v3").tokenizer.segments is None


def test_from_template_changes_neither_the_given_nor_a_shipped_tokenizer() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    before = boundary.load_family("deepseek_v3").render(messages)
    shipped = boundary.load_family("deepseek_v3").tokenizer
    special_before = dict(shipped.special_tokens_map)
    added_before = {i: str(t) for i, t in shipped.backend.get_added_tokens_decoder().items()}
    template = boundary.load_family("deepseek_v3").template()

    custom = boundary.Family.from_template(template, shipped, special_tokens={"bos_token": "<|my_bos|>"})
    raw = load_vocabulary("deepseek_v4")
    boundary.Family.from_template(template, raw, special_tokens={"bos_token": "<|other_bos|>"})

    after = boundary.load_family("deepseek_v3").render(messages)
    assert (after.text, after.token_ids) == (before.text, before.token_ids)
    assert dict(shipped.special_tokens_map) == special_before
    assert {i: str(t) for i, t in shipped.backend.get_added_tokens_decoder().items()} == added_before
    assert raw.token_to_id("<|other_bos|>") is None and raw.token_to_id("<|my_bos|>") is None
    with pytest.raises(TypeError):
        shipped.special_tokens_map["bos_token"] = "x"  # type: ignore[index]
    # the new family has its bos, registered as a special token as transformers registers it
    assert custom.render(messages).text.startswith("<|my_bos|>")
    assert len(custom.tokenizer.encode_ids("<|my_bos|>")) == 1
