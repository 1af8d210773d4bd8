"""Vocabularies: loading them from anything a user has, and encoding with char offsets.

Where it sits: the tokenize stage's vocabulary, under ``boundary.tokenize.encode`` and
``boundary.session.ids``, and beside the registry,
which builds shipped tokenizers with it.

``Tokenizer`` wraps a ``tokenizers.Tokenizer`` (the same object transformers' fast
tokenizers run on) together with the special-token variables that chat templates read
(``bos_token``, ``eos_token``, ...). It encodes exactly as ``apply_chat_template`` does
(``add_special_tokens=False``) and returns a ``TokenMap`` for placing char boundaries.

``Tokenizer.cut_rule`` says which added-token boundaries of its encodings are safe cuts (the
rule is in ``boundary.tokenize.segments``); a ``Tokenizer`` is never changed after it is built, and
building one never changes the ``tokenizers.Tokenizer`` it is given.

Shipped vocabularies (``vocabularies/<name>/vocabulary.toml``) are loaded by
``boundary.tokenize.shipped_vocabularies``; its names are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import tokenizers

from boundary.errors import TemplateLoadError, TokenizerError
from boundary.offsets import CharOffset, OffsetsTokenMap, TokenMap, TokenOffset
from boundary.tokenize.rank_files import RankFile
from boundary.tokenize.segments import Clock, Cut, CutRule, CutTokenMap, SegmentEncoder, cut_rule
from boundary.tokenize.shipped_vocabularies import (
    VocabularySpec,
    check_against_tiktoken,
    convert_tiktoken,
    load_tokenizer_json,
    load_vocabulary,
    rank_source,
    stand_in_backend,
    vocabulary_names,
    vocabulary_spec,
)


@dataclass(frozen=True, slots=True)
class Encoded:
    """Token ids, the map from char positions of the encoded text to token boundaries, and
    (when asked for) the safe cuts the encoder declares (``Tokenizer.cut_rule``)."""

    ids: list[int]
    token_map: TokenMap
    cut_chars: list[int] | None = None  # the safe cuts, where listed: their chars ...
    cut_tokens: list[int] | None = None  # ... and their tokens, in order

    @property
    def cuts(self) -> list[Cut] | None:
        """The safe cuts as ``Cut``s (None when not listed)."""
        if self.cut_chars is None or self.cut_tokens is None:
            return None
        return [
            Cut(CharOffset(c), TokenOffset(t)) for c, t in zip(self.cut_chars, self.cut_tokens, strict=True)
        ]


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
        rank_file: RankFile | None = None,
        split_pattern: str | None = None,
    ) -> None:
        """``rank_file`` / ``split_pattern``: the tiktoken rank file (read only from its verified
        bytes) and split regex ``backend`` was converted from; when given (and the added tokens
        allow it) plain text is encoded with tiktoken, which gives the same ids (see
        ``boundary.tokenize.segments``)."""
        self.special_tokens_map: Mapping[str, str] = MappingProxyType(
            {k: v for k, v in (special_tokens or {}).items() if v is not None}
        )
        self.backend = _with_special_tokens(backend, self.special_tokens_map.values())
        self.source = source
        self.stand_in = stand_in
        self.chat_control_tokens = tuple(chat_control_tokens) if chat_control_tokens is not None else None
        added = self.added_tokens().values()
        self.added_ids = frozenset(self.backend.token_to_id(t.content) for t in added)
        self.cut_rule: CutRule = cut_rule(self.backend)
        self._rank_file, self._split_pattern = rank_file, split_pattern
        self.segments = _segment_encoder(self.backend, rank_file, split_pattern, self.cut_rule)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab={self.backend.get_vocab_size()}, source={self.source!r})"

    # -- encoding -------------------------------------------------------------------------
    def encode(self, text: str, *, with_cuts: bool = False, clock: Clock | None = None) -> Encoded:
        """Encode as ``apply_chat_template(tokenize=True)`` does: added tokens matched, no BOS/EOS
        added. ``with_cuts`` also lists the safe cuts (the tiktoken path always does). ``clock``
        (a render's deadline) is read between tiktoken segments, else before and after the
        one ``tokenizers`` call."""
        if self.segments is not None:
            ids, chars, tokens = self.segments.encode(text, clock)
            return Encoded(ids, CutTokenMap(text, chars, tokens, ids, self.segment_map), chars, tokens)
        if clock is not None:
            clock.check_tokenizing()
        enc = self.backend.encode(text, add_special_tokens=False)
        if clock is not None:
            clock.check_tokenizing()
        ids = enc.ids
        token_map = EncodingTokenMap(enc, len(text))
        if not with_cuts:
            return Encoded(ids, token_map)
        found = self.cut_rule.cuts(text, ids, enc.token_to_chars)
        return Encoded(ids, token_map, [c.char for c in found], [c.token for c in found])

    def segment_map(self, segment: str, ids: Sequence[int] | None = None) -> TokenMap:
        """The exact ``TokenMap`` of the text between two safe cuts: from ``ids`` (its encoding)
        on the tiktoken path, else encoded on its own."""
        if ids is not None and self.segments is not None:
            token_map = self.segments.token_map(segment, ids)
            if token_map is not None:
                return token_map
        return EncodingTokenMap(self.backend.encode(segment, add_special_tokens=False), len(segment))

    def encode_ids(self, text: str) -> list[int]:
        if self.segments is not None:
            return self.segments.encode(text)[0]
        return self.backend.encode(text, add_special_tokens=False).ids

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
                return cls(load_tokenizer_json(path), special_tokens=special_tokens, source=str(path))
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
    backend: tokenizers.Tokenizer, rank_file: RankFile | None, split_pattern: str | None, rule: CutRule
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
        fallback=lambda segment: backend.encode(segment, add_special_tokens=False).ids,
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


def _auto_tokenizer(path_or_id: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path_or_id)
    except Exception as exc:
        raise TokenizerError(f"cannot load a tokenizer: {exc}", location=path_or_id) from None


def template_literals(template_source: str) -> str:
    """The template's literal strings joined by NUL, as transformers collects them."""
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        ast = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).parse(template_source)
    except RecursionError:
        raise TemplateLoadError("the template nests too deeply to parse", location="template") from None
    literals = {n.data for n in ast.find_all(nodes.TemplateData)}
    literals |= {n.value for n in ast.find_all(nodes.Const) if isinstance(n.value, str)}
    return "\0".join(literals)


__all__ = [
    "Encoded",
    "EncodingTokenMap",
    "Tokenizer",
    "VocabularySpec",
    "check_against_tiktoken",
    "convert_tiktoken",
    "load_vocabulary",
    "rank_source",
    "stand_in_backend",
    "template_literals",
    "vocabulary_names",
    "vocabulary_spec",
]
