"""Encoders declare their own safe cuts, and only those are reused.

Tokenizers built here from ``tokenizers`` components (none is shipped) cover the layouts where
"every added token is a cut" is false: Metaspace with ``prepend_scheme="first"`` (Llama-2 /
Mistral), added tokens that strip whitespace (``lstrip`` / ``rstrip``), normalized added tokens
under a BERT normalizer and under a ``Prepend`` normalizer. Sessions over each give exactly the
ids of a full render and of transformers' ``apply_chat_template``; every cut an encoder declares
is checked independent on random texts; the boundaries it declines are shown to be dependent.
The tiktoken fast path normalizes with the vocabulary's own NFC.
"""

from __future__ import annotations

import itertools
import random
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
import tokenizers
from tokenizers import AddedToken, models, normalizers, pre_tokenizers, trainers

import boundary
from boundary.tokenize.segments import CutRule, cut_rule
from tests.support import keyed_session

_CORPUS = [
    "Hello there, I would like to change my flight please.",
    "Sure! Could you give me your user id and reservation number?",
    "my user id is mia_li_3668 and the reservation is NO6JO3.",
    "Café crème, naïve résumé — ÉCOLE Straße déjà vu",
    "    indented   text\twith\ttabs\n\nand blank lines   ",
    "The flight HAT045 departs at 15:00 from SEA to JFK on 2024-05-16.",
    '{"name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}} <|> [INST] </s>',
]
_ALPHABET = sorted(set("".join(_CORPUS)) | set(string.printable) - set("\x0b\x0c"))


def _bpe(pre: Any, specials: list[str], normalizer: Any = None) -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<unk>", *specials], initial_alphabet=_ALPHABET, show_progress=False
    )
    tok.train_from_iterator(_CORPUS * 3, trainer)
    return tok


@dataclass(frozen=True)
class Layout:
    """A tokenizer built from components, a chat template for it and its special-token variables."""

    build: Callable[[], tokenizers.Tokenizer]
    template: str
    special_tokens: Mapping[str, str]


def _metaspace_first() -> tokenizers.Tokenizer:
    """Llama-2 / Mistral-v0.3 layout: "▁" prepended to the first piece of a text only."""
    pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    return _bpe(pre, ["<s>", "</s>", "[INST]", "[/INST]"])


def _stripping() -> tokenizers.Tokenizer:
    """Phi-3-like: role tokens swallow the whitespace after them, the end token the run before it."""
    tok = _bpe(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False), [])
    tok.add_special_tokens(
        [
            AddedToken("<|system|>", rstrip=True, normalized=False),
            AddedToken("<|user|>", rstrip=True, normalized=False),
            AddedToken("<|assistant|>", rstrip=True, normalized=False),
            AddedToken("<|end|>", lstrip=True, normalized=False),
            AddedToken("<s>", normalized=False),
        ]
    )
    return tok


def _bert() -> tokenizers.Tokenizer:
    """BERT-style: lowercasing, accent-stripping normalizer; role markers are normalized tokens."""
    tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=400,
        special_tokens=["[UNK]", "[CLS]", "[SEP]"],
        initial_alphabet=_ALPHABET,
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 3, trainer)
    tok.add_tokens([AddedToken("[user]", normalized=True), AddedToken("[bot]", normalized=True)])
    return tok


def _prepend() -> tokenizers.Tokenizer:
    """Legacy Llama layout: "▁" prepended by the normalizer, to every piece; normalized tool tags."""
    norm = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok = _bpe(None, ["<s>", "</s>"], normalizer=norm)
    tok.add_tokens([AddedToken("<tool>", normalized=True), AddedToken("</tool>", normalized=True)])
    return tok


def _byte_level_nfc() -> tokenizers.Tokenizer:
    """GPT-2 layout with a prefix space and NFC: every added-token boundary is a safe cut."""
    tok = _bpe(pre_tokenizers.ByteLevel(add_prefix_space=True), ["<|im_start|>", "<|im_end|>"])
    tok.normalizer = normalizers.NFC()
    return tok


def _identity_normalizer() -> tokenizers.Tokenizer:
    """DeepSeek layout: an empty normalizer ``Sequence`` and normalized role tokens next to
    non-normalized ones, so cuts come from both matching passes."""
    tok = _bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<s>", "</s>"])
    tok.normalizer = normalizers.Sequence([])
    tok.add_tokens(
        [AddedToken("<｜User｜>", normalized=True), AddedToken("<｜Assistant｜>", normalized=True)]
    )
    return tok


def _single_word() -> tokenizers.Tokenizer:
    tok = _bpe(pre_tokenizers.Metaspace(), ["<s>", "</s>"])
    tok.add_tokens([AddedToken("<mask>", single_word=True, normalized=False)])
    return tok


_INST = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}[INST]{{ m['content'] }}[/INST]"
    "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)
_PHI = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_BERT = (
    "[CLS]{% for m in messages %}{{ '[bot]' if m['role'] == 'assistant' else '[user]' }}"
    "{{ m['content'] }}[SEP]{% endfor %}"
)
_ROLES = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
_DEEPSEEK = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<｜Assistant｜>{{ m['content'] }}{{ eos_token }}"
    "{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜>{% endif %}"
)
_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_S = {"bos_token": "<s>", "eos_token": "</s>"}
LAYOUTS = {
    "metaspace_first": Layout(_metaspace_first, _INST, _S),
    "lstrip_rstrip": Layout(_stripping, _PHI, {"bos_token": "<s>", "eos_token": "<|end|>"}),
    "bert_normalizer": Layout(_bert, _BERT, {"cls_token": "[CLS]", "sep_token": "[SEP]"}),
    "prepend_normalizer": Layout(_prepend, _ROLES, _S),
    "byte_level_nfc": Layout(_byte_level_nfc, _CHATML, {"eos_token": "<|im_end|>"}),
    "identity_normalizer": Layout(_identity_normalizer, _DEEPSEEK, _S),
    "single_word": Layout(_single_word, _ROLES, _S),
}


@cache
def backend(name: str) -> tokenizers.Tokenizer:
    return LAYOUTS[name].build()


def family(name: str) -> boundary.Family:
    layout = LAYOUTS[name]
    return boundary.Family.from_template(layout.template, backend(name), special_tokens=layout.special_tokens)


def transformers_ids(name: str, messages: list[dict[str, Any]]) -> list[int]:
    """The independent oracle: transformers over the same ``tokenizers`` object."""
    from transformers import PreTrainedTokenizerFast

    layout = LAYOUTS[name]
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend(name), chat_template=layout.template, **layout.special_tokens
    )
    out = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if isinstance(out, Mapping) else out)


# Content that trips a rule that is too loose: text right after a control token, whitespace
# runs before a token that strips them, accents and capitals a normalizer rewrites, tool tags.
_TURNS = [
    ("system", "You are a helpful airline agent.   "),
    ("user", "Hello there, I would like to change my flight please."),
    ("assistant", "Sure! Could you give me your user id?" + " " * 40),
    ("user", "my user id is mia_li_3668\n\n\n"),
    ("assistant", '<tool>{"name": "get_user_details"}</tool>'),
    ("user", "Café CRÈME — naïve RÉSUMÉ, [USER] and [BOT] déjà vu"),
    ("assistant", "\tindented   text\twith\ttabs\n\nand blank lines   "),
    ("user", "    and the flight HAT045 on 2024-05-16 <mask> please"),
]


def _requests() -> list[list[dict[str, str]]]:
    """Every turn of one conversation, in order, plus a last user message edited inside its
    trailing whitespace (the texts then share a prefix ending in the middle of a run)."""
    messages = [{"role": role, "content": content} for role, content in _TURNS]
    out = [messages[: i + 1] for i in range(1, len(messages))]
    edited = [*messages[:3], {"role": "user", "content": "Sure! Could" + " " * 40}]
    out += [edited, [*edited[:3], {"role": "user", "content": "Sure! Could" + " " * 40 + "you"}]]
    return out


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_sessions_give_the_ids_of_a_full_render_and_of_transformers(name: str) -> None:
    fam = family(name)
    session = keyed_session(fam)
    for request in _requests():
        warm = session.render(request)
        cold = fam.render(request)
        assert warm.token_ids == cold.token_ids, (name, len(request))
        assert warm.token_ids == transformers_ids(name, request), (name, len(request))
        assert warm.text == cold.text and warm.input_end == cold.input_end


@pytest.mark.parametrize(
    ("name", "reused"),
    [
        ("metaspace_first", True),
        ("lstrip_rstrip", True),
        ("bert_normalizer", True),
        ("prepend_normalizer", True),
        ("byte_level_nfc", True),
        ("identity_normalizer", True),
        ("single_word", False),
    ],
)
def test_sessions_reuse_ids_only_where_the_encoder_declares_cuts(name: str, reused: bool) -> None:
    fam = family(name)
    session = fam.session()
    for request in _requests()[:-2]:
        session.render(request)
    assert (session.stats.reused_tokens > 0) is reused
    assert fam.tokenizer.cut_rule.any is reused


def _ids(name: str, added: str) -> int:
    token_id = backend(name).token_to_id(added)
    assert token_id is not None
    return token_id


def test_each_encoder_declares_the_cuts_its_components_allow() -> None:
    first = cut_rule(backend("metaspace_first"))
    controls = {_ids("metaspace_first", t) for t in ("<s>", "</s>", "[INST]", "[/INST]")}
    assert controls <= first.starts and not first.ends

    strip = cut_rule(backend("lstrip_rstrip"))
    end, user = _ids("lstrip_rstrip", "<|end|>"), _ids("lstrip_rstrip", "<|user|>")
    assert end not in strip.starts and end in strip.ends
    assert user in strip.starts and user in strip.ends

    for name, tags in [
        ("bert_normalizer", ("[user]", "[bot]")),
        ("prepend_normalizer", ("<tool>", "</tool>")),
    ]:
        rule = cut_rule(backend(name))
        assert not {_ids(name, t) for t in tags} & (rule.starts | rule.ends), name

    for name in ["byte_level_nfc", "identity_normalizer"]:
        tok = backend(name)
        assert cut_rule(tok).every_boundary(frozenset(tok.get_added_tokens_decoder())), name
    assert not cut_rule(backend("single_word")).any
    for shipped in ["qwen3_5", "deepseek_v3"]:  # a rank file; a tokenizer.json, normalizer Sequence([])
        tok = boundary.load_family(shipped).tokenizer
        assert tok.cut_rule.every_boundary(tok.added_ids), shipped


def test_encoders_that_cannot_be_cut_safely_declare_no_cut() -> None:
    tok = tokenizers.Tokenizer.from_str(backend("byte_level_nfc").to_str())
    tok.enable_truncation(64)
    assert not cut_rule(tok).any
    tok = tokenizers.Tokenizer.from_str(backend("byte_level_nfc").to_str())
    tok.encode_special_tokens = True
    assert not cut_rule(tok).any
    tok = tokenizers.Tokenizer.from_str(backend("lstrip_rstrip").to_str())
    tok.add_tokens([AddedToken(" <x>", normalized=False)])  # may start inside an rstrip run
    assert not cut_rule(tok).any


@pytest.mark.parametrize(
    ("name", "token", "after"),
    [
        ("metaspace_first", "[/INST]", "Sure"),  # the end of a token: "▁" only on a text's first piece
        ("lstrip_rstrip", "<|end|>", None),  # the start of an lstrip token: the run before it
        ("prepend_normalizer", "</tool>", "done"),  # normalized token: the normalizer prepends per piece
    ],
)
def test_declined_boundaries_are_not_independent(name: str, token: str, after: str | None) -> None:
    tok = backend(name)

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    if after is not None:  # the text after the token encodes differently on its own
        head = f"hi {token}"
        assert enc(head + after) != enc(head) + enc(after)
    else:  # the text before the token encodes differently once the token no longer follows
        head = "Sure! Could" + " " * 12
        assert enc(head + token)[: len(enc("Sure! Could"))] == enc("Sure! Could")
        assert enc(head + "you")[: len(enc("Sure! Could"))] != enc("Sure! Could")


_PLAIN = [" ", "  ", " " * 9, "\n", "\t", "hi", "Sure", "Café", "ÉCOLE", "naïve", "15:00", "e\u0301"]


def _random_text(rng: random.Random, tokens: list[str]) -> str:
    pieces = [*tokens, *_PLAIN]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_declared_cut_is_independent_on_random_texts(name: str) -> None:
    """Left: ids before a cut encode the text before it. Right: any text sharing ``lookahead``
    chars past the cut encodes as those ids plus its own rest encoded alone. Between two cuts:
    the segment encodes alone (what ``CutTokenMap`` relies on)."""
    tok = boundary.Tokenizer(backend(name))
    rule: CutRule = tok.cut_rule
    contents = [t.content for t in tok.added_tokens().values()]
    contents += [c.upper() for c in contents]

    def enc(text: str) -> list[int]:
        return tok.backend.encode(text, add_special_tokens=False).ids

    rng = random.Random(name)
    checked = 0
    for _ in range(150):
        text = _random_text(rng, contents)
        encoded = tok.encode(text, with_cuts=True)
        assert encoded.ids == enc(text)
        cuts = encoded.cuts or []
        for cut in cuts:
            assert enc(text[: cut.char]) == encoded.ids[: cut.token], (text, cut)
            assert enc(text[cut.char :]) == encoded.ids[cut.token :], (text, cut)
            if cut.char + rule.lookahead > len(text):
                continue  # a session keeps a cut only that far inside the text both requests share
            other = text[: cut.char + rule.lookahead] + _random_text(rng, contents)
            assert enc(other) == encoded.ids[: cut.token] + enc(other[cut.char :]), (text, other, cut)
            checked += 1
        for a, b in itertools.pairwise(cuts):
            assert enc(text[a.char : b.char]) == encoded.ids[a.token : b.token], (text, a, b)
    assert checked > 0 or not rule.any


def test_the_fast_path_normalizes_with_the_vocabularys_own_nfc() -> None:
    """Python's ``unicodedata`` composes this pair; ``tokenizers``' NFC tables do not."""
    fam = boundary.load_family("qwen3_5")
    assert fam.tokenizer.segments is not None
    text = "\U00011935\U00011930 and \u00e9 e\u0301"
    assert fam.tokenizer.encode_ids(text) == fam.tokenizer.backend.encode(text, add_special_tokens=False).ids
    messages = [{"role": "user", "content": text}]
    hf = fam.tokenizer.to_transformers(fam.template())
    expected = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert fam.render(messages).token_ids == list(expected)
    session = keyed_session(fam)
    session.render(messages)
    later = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": text}]
    assert session.render(later).token_ids == fam.render(later).token_ids


def test_nfc_leaves_every_ascii_text_unchanged() -> None:
    """The fast path skips normalizing ASCII segments: no ASCII character decomposes, and no
    two compose, so every ASCII string is its own NFC (checked on every pair)."""
    nfc = tokenizers.normalizers.NFC()
    chars = [chr(c) for c in range(128)]
    assert all(nfc.normalize_str(a + b) == a + b for a in chars for b in chars)


_MAP_TEXTS = [
    *_CORPUS,
    "😀👩‍👩‍👧 ok 😀😀",
    "日本語のテキスト、中文文本。",
    "e\u0301cole and \u00e9cole",  # NFC changes it: the map falls back to encoding the segment
    "\U00011935\U00011930 \u0915\u094d\u0937",
    "  \n\n\t  x  \r\n" + " " * 300,
]


@pytest.mark.parametrize("name", ["qwen3", "qwen3_5"])
def test_the_tiktoken_path_maps_every_position_as_the_full_encoding_does(name: str) -> None:
    """``CutTokenMap`` reads a segment's boundaries off the ids it already has (byte lengths):
    at every character of every text, the same (token, char) as ``tokenizers``' own offsets."""
    from boundary.tokenize.tokenizer import EncodingTokenMap

    tok = boundary.load_family(name).tokenizer
    for text in _MAP_TEXTS:
        full = f"<|im_start|>user\n{text}<|im_end|>\n{text}"
        ours = tok.encode(full).token_map
        reference = EncodingTokenMap(tok.backend.encode(full, add_special_tokens=False), len(full))
        for char in range(len(full) + 1):
            assert ours.floor(char) == reference.floor(char), (text, char)


def test_a_whitespace_run_tiktoken_cannot_encode_gives_the_same_ids_through_tokenizers() -> None:
    """tiktoken's regex engine panics (``PanicException``, a ``BaseException``) on a run of a
    million spaces; the segment encoder falls back to the same vocabulary in ``tokenizers``."""
    tok = boundary.load_family("qwen3").tokenizer
    assert tok.segments is not None
    text = "<|im_start|>a" + " " * 1_000_000 + "b<|im_end|>"
    from boundary.tokenize.tokenizer import EncodingTokenMap

    encoded = tok.encode(text)
    reference = tok.backend.encode(text, add_special_tokens=False)
    assert encoded.ids == reference.ids
    for char in (13, 14, 500_000, len(text) - 12):
        assert encoded.token_map.floor(char) == EncodingTokenMap(reference, len(text)).floor(char)
