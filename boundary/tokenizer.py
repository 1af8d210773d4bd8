"""Vocabularies: loading them from anything a user has, and encoding with char offsets.

``Tokenizer`` wraps a ``tokenizers.Tokenizer`` (the same object transformers' fast
tokenizers run on) together with the special-token variables that chat templates read
(``bos_token``, ``eos_token``, ...). It encodes exactly as ``apply_chat_template`` does
(``add_special_tokens=False``) and returns a ``TokenMap`` for placing char boundaries.

``Tokenizer.cut_rule`` says which added-token boundaries of its encodings are safe cuts (the
rule is in ``boundary.encoding``); a ``Tokenizer`` is never changed after it is built, and
building one never changes the ``tokenizers.Tokenizer`` it is given.

Shipped vocabularies live under ``vocabularies/<name>/vocabulary.toml``: either an HF
``tokenizer.json`` or a tiktoken rank file, converted once with transformers'
``TikTokenConverter`` and cached on disk (``BOUNDARY_CACHE_DIR``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, cast

import tokenizers
from pydantic import BaseModel, ConfigDict

from boundary.encoding import Cut, CutRule, CutTokenMap, SegmentEncoder, cut_rule
from boundary.errors import TokenizerError
from boundary.offsets import CharOffset, OffsetsTokenMap, TokenMap, TokenOffset
from boundary.resources import cache_dir, data_dir

SPECIAL_TOKEN_VARIABLES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_CONVERSION_VERSION = "1"  # bump when the conversion below changes


@dataclass(frozen=True, slots=True)
class Encoded:
    """Token ids, the map from char positions of the encoded text to token boundaries, and
    (when asked for) the safe cuts the encoder declares (``Tokenizer.cut_rule``)."""

    ids: list[int]
    token_map: TokenMap
    cuts: list[Cut] | None = None


class EncodingTokenMap:
    """A ``TokenMap`` that asks a ``tokenizers.Encoding`` only about the positions queried,
    instead of materializing every token's offsets."""

    __slots__ = ("_enc", "_n_chars", "_n_tokens")

    def __init__(self, enc: tokenizers.Encoding, n_chars: int) -> None:
        self._enc = enc
        self._n_chars = n_chars
        self._n_tokens = len(enc.ids)

    def floor(self, char: CharOffset) -> tuple[TokenOffset, CharOffset]:
        if char >= self._n_chars:
            return TokenOffset(self._n_tokens), CharOffset(self._n_chars)
        token = self._enc.char_to_token(char)
        if token is None:  # a char no token covers (dropped by normalization): use the offsets
            return OffsetsTokenMap(self._enc.offsets, self._n_chars).floor(char)
        start = self._chars(token)[0]
        while token > 0:  # tokens sharing a split character have no boundary between them
            prev_start, prev_end = self._chars(token - 1)
            if prev_end <= start:
                break
            token, start = token - 1, prev_start
        return TokenOffset(token), CharOffset(start)

    def _chars(self, token: int) -> tuple[int, int]:
        """Token ``token``'s char span (never None: ``token`` is one of the encoding's)."""
        return cast(tuple[int, int], self._enc.token_to_chars(token))


class Tokenizer:
    """A vocabulary plus the special-token variables its chat templates read.

    ``source`` says where the vocabulary came from; ``stand_in`` is True for a test
    tokenizer built for a family whose real vocabulary is not available offline.
    Immutable once built (``special_tokens_map`` is read-only), so one instance may be
    shared, as the shipped families share theirs; ``with_special_tokens`` makes a new one.
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        special_tokens: Mapping[str, str] | None = None,
        source: str = "user-supplied",
        stand_in: bool = False,
        chat_control_tokens: Iterable[str] | None = None,
        rank_file: Path | None = None,
        split_pattern: str | None = None,
    ) -> None:
        """``rank_file`` / ``split_pattern``: the tiktoken rank file and split regex ``backend``
        was converted from; when given (and the added tokens allow it) plain text is encoded
        with tiktoken, which gives the same ids (see ``boundary.encoding``)."""
        self.special_tokens_map: Mapping[str, str] = MappingProxyType(
            {k: v for k, v in (special_tokens or {}).items() if v is not None}
        )
        self.backend = _with_special_tokens(backend, self.special_tokens_map.values())
        self.source = source
        self.stand_in = stand_in
        self.chat_control_tokens = tuple(chat_control_tokens) if chat_control_tokens is not None else None
        added = self.added_tokens().values()
        self.added_ids = frozenset(self.backend.token_to_id(t.content) for t in added)
        self.max_added_len = max((len(t.content) for t in added), default=0)
        self.cut_rule: CutRule = cut_rule(self.backend)
        self._rank_file, self._split_pattern = rank_file, split_pattern
        self.segments = _segment_encoder(self.backend, rank_file, split_pattern, self.cut_rule)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab={self.backend.get_vocab_size()}, source={self.source!r})"

    # -- encoding -------------------------------------------------------------------------
    def encode(self, text: str, *, with_cuts: bool = False) -> Encoded:
        """Encode as ``apply_chat_template(tokenize=True)`` does: added tokens matched, no BOS/EOS
        added. ``with_cuts`` also lists the safe cuts (the tiktoken path always does)."""
        if self.segments is not None:
            ids, cuts = self.segments.encode(text)
            return Encoded(ids, CutTokenMap(text, cuts, len(ids), self.segment_map), cuts)
        enc = self.backend.encode(text, add_special_tokens=False)
        ids = enc.ids
        found = self.cut_rule.cuts(text, ids, enc.token_to_chars) if with_cuts else None
        return Encoded(ids, EncodingTokenMap(enc, len(text)), found)

    def segment_map(self, segment: str) -> TokenMap:
        """The exact ``TokenMap`` of the text between two safe cuts, encoded on its own."""
        return EncodingTokenMap(self.backend.encode(segment, add_special_tokens=False), len(segment))

    def encode_ids(self, text: str) -> list[int]:
        if self.segments is not None:
            return self.segments.encode(text)[0]
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_ids_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def encode_as_text(self, text: str) -> Encoded:
        """Encode with no added token matched, special or not, as transformers'
        ``_encode_without_added_tokens`` does (normalizer, pre-tokenizer, model; nothing else).

        Offsets are coarse: every token spans all of ``text``, so the only boundaries inside
        are its two ends. Used for control tokens found in user input, where no boundary of
        interest can fall.
        """
        backend = self.backend
        normalized = backend.normalizer.normalize_str(text) if backend.normalizer is not None else text
        splits = [normalized]
        if backend.pre_tokenizer is not None:
            splits = [split for split, _ in backend.pre_tokenizer.pre_tokenize_str(normalized)]
        ids = [token.id for split in splits for token in backend.model.tokenize(split)]
        return Encoded(ids, OffsetsTokenMap([(0, len(text))] * len(ids), len(text)))

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    # -- control tokens -------------------------------------------------------------------
    def added_tokens(self) -> dict[int, tokenizers.AddedToken]:
        return self.backend.get_added_tokens_decoder()

    def control_tokens(self, template_literals: str) -> tuple[str, ...]:
        """Tokens that ``sanitize_control_tokens`` encodes as text when they appear in input.

        As transformers decides: special added tokens, plus the added tokens listed in
        ``chat_control_tokens`` or, without that list, those appearing in the template's
        literal text (whitespace-only tokens excepted).
        """
        added = self.added_tokens().values()
        if self.chat_control_tokens is not None:
            listed = set(self.chat_control_tokens)
            return tuple(t.content for t in added if t.special or t.content in listed)
        return tuple(
            t.content
            for t in added
            if t.special or (t.content in template_literals and not t.content.isspace())
        )

    def with_special_tokens(self, special_tokens: Mapping[str, str]) -> Tokenizer:
        """A new ``Tokenizer`` whose special-token variables are this one's updated with
        ``special_tokens`` (new ones registered as transformers does); ``self`` is unchanged."""
        merged = {**self.special_tokens_map, **special_tokens}
        if merged == self.special_tokens_map:
            return self
        return Tokenizer(
            self.backend,
            special_tokens=merged,
            source=self.source,
            stand_in=self.stand_in,
            chat_control_tokens=self.chat_control_tokens,
            rank_file=self._rank_file,
            split_pattern=self._split_pattern,
        )

    # -- interop --------------------------------------------------------------------------
    def to_transformers(self, chat_template: str | None = None) -> Any:
        """The equivalent transformers fast tokenizer (for parity checks and for users)."""
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_object=self.backend, **self.special_tokens_map)
        if chat_template is not None:
            tok.chat_template = chat_template
        if self.chat_control_tokens is not None:
            tok.chat_control_tokens = list(self.chat_control_tokens)
        return tok

    @classmethod
    def from_any(cls, obj: Any, *, special_tokens: Mapping[str, str] | None = None) -> Tokenizer:
        """Accept a ``Tokenizer``, a ``tokenizers.Tokenizer``, a transformers fast tokenizer,
        a ``tokenizer.json`` path, or a local model directory."""
        if isinstance(obj, Tokenizer):
            return obj
        if isinstance(obj, tokenizers.Tokenizer):
            return cls(obj, special_tokens=special_tokens)
        if isinstance(obj, (str, os.PathLike)):
            path = Path(obj)
            if path.is_file():
                return cls(_load_json(path), special_tokens=special_tokens, source=str(path))
            if path.is_dir():
                return cls.from_transformers(_auto_tokenizer(str(path)), source=str(path))
            raise TokenizerError(f"no tokenizer at {str(path)!r}", location="tokenizer")
        backend = getattr(obj, "backend_tokenizer", None)
        if isinstance(backend, tokenizers.Tokenizer):
            return cls.from_transformers(obj)
        raise TokenizerError(
            f"cannot use a {type(obj).__name__} as a tokenizer (need a fast/`tokenizers` tokenizer)",
            location="tokenizer",
        )

    @classmethod
    def from_transformers(cls, tok: Any, *, source: str | None = None) -> Tokenizer:
        special = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
        return cls(
            tok.backend_tokenizer,
            special_tokens=special,
            source=source or getattr(tok, "name_or_path", "") or "transformers",
            chat_control_tokens=getattr(tok, "chat_control_tokens", None),
        )


def _segment_encoder(
    backend: tokenizers.Tokenizer, rank_file: Path | None, split_pattern: str | None, rule: CutRule
) -> SegmentEncoder | None:
    """A tiktoken segment encoder for ``backend`` when one provably gives the same ids: a
    converted rank file, no normalizer or NFC (applied with ``backend``'s own normalizer),
    added tokens matched verbatim and every added-token boundary a safe cut."""
    if rank_file is None or split_pattern is None:
        return None
    normalizer = backend.normalizer
    if normalizer is not None and not isinstance(normalizer, tokenizers.normalizers.NFC):
        return None
    decoder = backend.get_added_tokens_decoder()
    added = decoder.values()
    if any(t.lstrip or t.rstrip or t.single_word or t.normalized for t in added):
        return None
    if not rule.every_boundary(frozenset(decoder)):
        return None
    return SegmentEncoder(
        rank_file,
        split_pattern,
        {t.content: cast(int, backend.token_to_id(t.content)) for t in added},
        normalize=normalizer.normalize_str if normalizer is not None else None,
    )


def _with_special_tokens(backend: tokenizers.Tokenizer, tokens: Iterable[str]) -> tokenizers.Tokenizer:
    """``backend`` with ``tokens`` registered as special added tokens, as transformers registers a
    tokenizer's bos/eos/... tokens; copied first when that changes anything."""
    added = {t.content for t in backend.get_added_tokens_decoder().values()}
    missing = [t for t in dict.fromkeys(tokens) if t not in added]
    if not missing:
        return backend
    backend = tokenizers.Tokenizer.from_str(backend.to_str())
    backend.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in missing])
    return backend


def _load_json(path: Path) -> tokenizers.Tokenizer:
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises bare Exception subclasses
        raise TokenizerError(f"cannot read {path.name}: {exc}", location=str(path)) from None


def _auto_tokenizer(path_or_id: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path_or_id)
    except Exception as exc:
        raise TokenizerError(f"cannot load a tokenizer: {exc}", location=path_or_id) from None


# -- shipped vocabularies ---------------------------------------------------------------------


class VocabularySpec(BaseModel):
    """``vocabularies/<name>/vocabulary.toml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["tiktoken", "tokenizers"]
    file: str
    source: str
    license: str
    pattern: str | None = None  # tiktoken: the pre-tokenizer split regex
    normalize: Literal["NFC"] | None = None
    added_tokens: dict[str, int] = {}  # tiktoken: content -> id
    non_special: list[str] = []  # added tokens that are not flagged special


def vocabulary_names() -> list[str]:
    root = data_dir("vocabularies")
    return sorted(p.parent.name for p in root.glob("*/vocabulary.toml"))


def vocabulary_spec(name: str) -> VocabularySpec:
    path = data_dir("vocabularies") / name / "vocabulary.toml"
    if not path.is_file():
        raise TokenizerError(
            f"no shipped vocabulary {name!r} (have: {', '.join(vocabulary_names())})", location="vocabulary"
        )
    with path.open("rb") as f:
        return VocabularySpec.model_validate(tomllib.load(f))


def rank_source(name: str) -> tuple[Path, str] | None:
    """The rank file and split pattern of shipped vocabulary ``name``, if it is a tiktoken one."""
    spec = vocabulary_spec(name)
    if spec.kind != "tiktoken" or spec.pattern is None:
        return None
    return data_dir("vocabularies") / name / spec.file, spec.pattern


@cache
def load_vocabulary(name: str) -> tokenizers.Tokenizer:
    """A shipped vocabulary as a ``tokenizers.Tokenizer`` (converted and cached on first use)."""
    spec = vocabulary_spec(name)
    folder = data_dir("vocabularies") / name
    if spec.kind == "tokenizers":
        return _load_json(folder / spec.file)
    return _converted_tiktoken(spec, folder / spec.file)


def _converted_tiktoken(spec: VocabularySpec, rank_file: Path) -> tokenizers.Tokenizer:
    digest = hashlib.sha256(rank_file.read_bytes())
    digest.update(spec.model_dump_json().encode())
    digest.update(_CONVERSION_VERSION.encode())
    cached = cache_dir() / "vocabularies" / f"{spec.name}-{digest.hexdigest()[:16]}.json"
    if cached.is_file():
        return _load_json(cached)
    tok = convert_tiktoken(spec, rank_file)
    cached.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cached.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(tok.to_str())
    os.replace(tmp, cached)
    return tok


def convert_tiktoken(spec: VocabularySpec, rank_file: Path) -> tokenizers.Tokenizer:
    """Rank file -> HF BPE with transformers' converter, NFC as the vocabulary says, and the
    added tokens at their published ids with their published special flags."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    if spec.pattern is None:
        raise TokenizerError("a tiktoken vocabulary needs its split pattern", location=f"{spec.name}.pattern")
    tok: tokenizers.Tokenizer = TikTokenConverter(vocab_file=str(rank_file), pattern=spec.pattern).converted()
    if spec.normalize == "NFC":
        tok.normalizer = tokenizers.normalizers.NFC()
    base = tok.get_vocab_size(with_added_tokens=False)
    non_special = set(spec.non_special)
    for content, token_id in sorted(spec.added_tokens.items(), key=lambda kv: kv[1]):
        if token_id != tok.get_vocab_size(with_added_tokens=True):
            raise TokenizerError(
                f"added token {content!r} wants id {token_id}, next free id is "
                f"{tok.get_vocab_size(with_added_tokens=True)} (ranks: {base})",
                location=f"{spec.name}.added_tokens",
            )
        tok.add_tokens([tokenizers.AddedToken(content, special=content not in non_special, normalized=False)])
    return tok


def stand_in_backend(base: str, control_tokens: Iterable[str]) -> tokenizers.Tokenizer:
    """A test vocabulary: shipped vocabulary ``base`` plus ``control_tokens`` as special added tokens.

    For families with no vocabulary available offline. Text tokenizes like ``base``, the
    family's control tokens are single tokens; ids are not the real model's.
    """
    tok = tokenizers.Tokenizer.from_str(load_vocabulary(base).to_str())
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in control_tokens])
    return tok


def template_literals(template_source: str) -> str:
    """The template's literal strings joined by NUL, as transformers collects them."""
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    ast = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).parse(template_source)
    literals = {n.data for n in ast.find_all(nodes.TemplateData)}
    literals |= {n.value for n in ast.find_all(nodes.Const) if isinstance(n.value, str)}
    return "\0".join(literals)


def check_against_tiktoken(name: str, texts: Iterable[str]) -> list[str]:
    """Texts on which the converted vocabulary and tiktoken disagree (empty: identical)."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    spec = vocabulary_spec(name)
    ranks = load_tiktoken_bpe(str(data_dir("vocabularies") / name / spec.file))
    ref = tiktoken.Encoding(
        name=f"boundary-{name}",
        pat_str=spec.pattern or "",
        mergeable_ranks=ranks,
        special_tokens=dict(spec.added_tokens),
    )
    ours = load_vocabulary(name)
    bad = []
    for text in texts:
        expected = ref.encode(_nfc(text, spec), allowed_special="all")
        if ours.encode(text, add_special_tokens=False).ids != expected:
            bad.append(text)
    return bad


def _nfc(text: str, spec: VocabularySpec) -> str:
    """NFC as the converted vocabulary applies it (``tokenizers``' tables, not ``unicodedata``'s)."""
    return tokenizers.normalizers.NFC().normalize_str(text) if spec.normalize == "NFC" else text
