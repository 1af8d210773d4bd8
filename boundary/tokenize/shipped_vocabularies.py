"""Shipped vocabularies: ``vocabularies/<name>/vocabulary.toml``, loaded as ``tokenizers.Tokenizer``.

Where it sits: below ``boundary.tokenize.tokenizer`` (which re-exports these names) and the registry,
which builds shipped tokenizers from them; it imports only ``errors``, ``resources`` and
``rank_files``.

A shipped vocabulary is either an HF ``tokenizer.json`` or a tiktoken rank file, converted
once with transformers' ``TikTokenConverter`` and cached on disk (``BOUNDARY_CACHE_DIR``);
``check_against_tiktoken`` proves a conversion gives tiktoken's ids.

Invariant: every vocabulary is built from the shipped bytes, whose sha256 ``vocabulary.toml``
records (checked once per load, ``boundary.tokenize.rank_files``), never from tiktoken's temp cache; a
cached conversion is used only when its own recorded sha256 matches, else rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import tomllib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any, Literal

import tokenizers
from pydantic import BaseModel, ConfigDict

from boundary.errors import TokenizerError
from boundary.shipped.resources import cache_dir, data_dir
from boundary.tokenize.rank_files import RankFile, read_cached, read_verified, write_cached

_CONVERSION_VERSION = "2"  # bump when the conversion below changes


class VocabularySpec(BaseModel):
    """``vocabularies/<name>/vocabulary.toml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["tiktoken", "tokenizers"]
    file: str
    sha256: str  # of ``file``'s bytes, checked on every load
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


def rank_source(name: str) -> tuple[RankFile, str] | None:
    """The rank file and split pattern of shipped vocabulary ``name``, if it is a tiktoken one."""
    spec = vocabulary_spec(name)
    if spec.kind != "tiktoken" or spec.pattern is None:
        return None
    return _rank_file(spec), spec.pattern


def _rank_file(spec: VocabularySpec) -> RankFile:
    return RankFile(data_dir("vocabularies") / spec.name / spec.file, spec.sha256)


@cache
def load_vocabulary(name: str) -> tokenizers.Tokenizer:
    """A shipped vocabulary as a ``tokenizers.Tokenizer`` (converted and cached on first use;
    one per shipped vocabulary)."""
    spec = vocabulary_spec(name)
    if spec.kind == "tokenizers":
        path = data_dir("vocabularies") / name / spec.file
        return _tokenizer_from_bytes(read_verified(path, spec.sha256), str(path))
    return _converted_tiktoken(spec)


def _converted_tiktoken(spec: VocabularySpec) -> tokenizers.Tokenizer:
    """``convert_tiktoken`` of the shipped rank file, through a verified on-disk cache keyed by
    the rank file's sha256, the spec and the conversion version."""
    digest = hashlib.sha256(spec.model_dump_json().encode())
    digest.update(_CONVERSION_VERSION.encode())
    cached = cache_dir() / "vocabularies" / f"{spec.name}-{digest.hexdigest()[:16]}.json"
    data = read_cached(cached)
    if data is not None:
        return _tokenizer_from_bytes(data, str(cached))
    tok = convert_tiktoken(spec, _rank_file(spec))
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
        write_cached(cached, tok.to_str().encode())
    return tok


def convert_tiktoken(spec: VocabularySpec, rank_file: RankFile | Path) -> tokenizers.Tokenizer:
    """Rank file -> HF BPE with transformers' converter, NFC as the vocabulary says, and the
    added tokens at their published ids with their published special flags. The ranks are read
    from ``rank_file``'s bytes (checked against ``spec.sha256``), never through tiktoken's cache."""
    if spec.pattern is None:
        raise TokenizerError("a tiktoken vocabulary needs its split pattern", location=f"{spec.name}.pattern")
    if isinstance(rank_file, Path):
        rank_file = RankFile(rank_file, spec.sha256)
    tok: tokenizers.Tokenizer = _converter(rank_file, spec.pattern).converted()
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


def check_against_tiktoken(name: str, texts: Iterable[str]) -> list[str]:
    """Texts on which the converted vocabulary and tiktoken disagree (empty: identical)."""
    import tiktoken

    spec = vocabulary_spec(name)
    ranks = _rank_file(spec).ranks()
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


def load_tokenizer_json(path: Path) -> tokenizers.Tokenizer:
    """A ``tokenizer.json`` file as a ``tokenizers.Tokenizer``; ``TokenizerError`` if unreadable."""
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises bare Exception subclasses
        raise TokenizerError(f"cannot read {path.name}: {exc}", location=str(path)) from None


def _tokenizer_from_bytes(data: bytes, location: str) -> tokenizers.Tokenizer:
    """A ``tokenizer.json``'s bytes (already verified) as a ``tokenizers.Tokenizer``."""
    try:
        return tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # tokenizers raises bare Exception subclasses
        raise TokenizerError(f"cannot read the tokenizer: {exc}", location=location) from None


def _converter(rank_file: RankFile, pattern: str) -> Any:
    """transformers' ``TikTokenConverter`` fed ``rank_file``'s verified ranks instead of what
    tiktoken's loader would read; ``TokenizerError`` if transformers stops asking for them."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class Verified(TikTokenConverter):  # type: ignore[misc]
        used = False

        def load_tiktoken_bpe(self, tiktoken_url: str) -> dict[bytes, int]:
            self.used = True
            return rank_file.ranks()

        def converted(self) -> tokenizers.Tokenizer:
            tok: tokenizers.Tokenizer = super().converted()
            if not self.used:
                raise TokenizerError(
                    "transformers' TikTokenConverter no longer reads ranks through "
                    "load_tiktoken_bpe; refusing a conversion from an unverified file",
                    location=str(rank_file.path),
                )
            return tok

    return Verified(vocab_file=str(rank_file.path), pattern=pattern)


__all__ = [
    "VocabularySpec",
    "check_against_tiktoken",
    "convert_tiktoken",
    "load_tokenizer_json",
    "load_vocabulary",
    "rank_source",
    "stand_in_backend",
    "vocabulary_names",
    "vocabulary_spec",
]
