"""Encoding text as segments cut at added tokens, and where an encoder may be cut.

Where it sits: below the tokenizer and the render stage: the cut rules and segment encoder that
``tokenizer``, ``encode``, ``boundary.renderer`` and ``boundary.session.ids`` use; it imports ``offsets`` and
``rank_files``.

Both ``tokenizers`` and tiktoken first split text at added (control) tokens and encode each
piece between them on its own. A *safe cut* is a ``(char, token)`` position of an encoding
of a text ``T`` (ids ``I``) such that, ``L = CutRule.lookahead``:

- left independence: ``encode(T[:char]) == I[:token]``;
- right independence: when ``char + L <= len(T)``, for every text ``T2`` that starts with
  ``T[:char + L]``, ``encode(T2) == I[:token] + encode(T2[char:])``;
- the text between two safe cuts encodes on its own to the ids between them.

Sessions (``boundary.session.session``) keep a previous request's ids up to a safe cut; the map from
chars to tokens (``CutTokenMap``) encodes just the segment between two safe cuts.

Which added-token boundaries are safe is a property of the encoder, decided by ``cut_rule``
from its components (``tokenizers``' added-vocabulary split, then per piece: normalizer,
pre-tokenizer, model). The rule, conservative wherever a case is not proven:

- no safe cut at all when the model is not BPE (without dropout) / Unigram / WordLevel /
  WordPiece, a pre-tokenizer is not one known to work piece by piece, truncation or padding
  is on, special tokens are encoded as text, any added token is ``single_word`` (its match
  depends on the character before it), or a token strips whitespace on its right while
  another added token starts with whitespace (their matches may overlap);
- only added tokens matched before normalization (``normalized=False``) give cuts when there
  is a normalizer: a normalized token is matched inside a normalized piece, and a normalizer
  need not commute with cutting that piece (``Prepend``, ``Strip``, NFC across the cut, ...)
  nor keep a bounded lookahead (characters it deletes); no normalizer is trusted to be
  per-character safe here. With no normalizer, or one that is provably the identity (an
  empty ``Sequence``), every added token gives cuts;
- the start of an added token is a safe cut unless it strips whitespace on its left
  (``lstrip``: its match reaches back over a whitespace run of any length);
- the end of an added token is a safe cut unless the pre-tokenizer is ``Metaspace`` with
  ``prepend_scheme="first"`` (the first piece of a text gets a "▁", a piece after an added
  token does not, so text after the cut encodes differently on its own);
- ``L`` is the longest added token: a leftmost-longest match is decided within that many
  characters of its start, and the end of an ``rstrip`` token's whitespace run (the cut)
  by the first character after it, which ``L >= 1`` keeps shared. ``L`` is doubled when
  tokens matched after the first split give cuts: the end of their piece is itself a match
  decided up to one token length further.

Every other pre-tokenizer, normalizer and model works on one piece at a time, never seeing
where the piece lies in the text, so pieces between cuts encode the same alone.
``CutRule.cuts`` reads the cuts off an encoding and keeps an added token only where its
offsets span exactly its content (plus stripped whitespace; for ``rstrip``, up to a
non-whitespace character), so a model-produced id or trimmed offsets never yield a cut.

``SegmentEncoder`` is the fast path for vocabularies that are BPE rank files: every added-
token boundary safe, added tokens matched verbatim; plain segments are encoded with tiktoken
(about ten times faster than ``tokenizers`` on one core) after the vocabulary's own
normalizer (``tokenizers``' NFC, whose Unicode tables differ from Python's ``unicodedata``),
skipped on ASCII segments, which NFC leaves unchanged. Long plain segments are kept across
requests by exact text (``boundary.tokenize.segment_cache``). The tests check identity on a corpus and
on every request of the tau-bench replay.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import tokenizers

from boundary.memo import once_cache
from boundary.offsets import ByteTokenMap, CharOffset, TokenMap, TokenOffset
from boundary.tokenize.rank_files import RankFile
from boundary.tokenize.segment_cache import SegmentCache

# Pre-tokenizers that split and rewrite each piece on its own, wherever the piece lies.
_PIECEWISE_PRE_TOKENIZERS = frozenset(
    {
        "BertPreTokenizer",
        "ByteLevel",
        "CharDelimiterSplit",
        "Digits",
        "FixedLength",
        "Metaspace",
        "Punctuation",
        "Split",
        "UnicodeScripts",
        "Whitespace",
        "WhitespaceSplit",
    }
)
_PIECEWISE_MODELS = frozenset({"BPE", "Unigram", "WordLevel", "WordPiece"})
_CHARS_PER_CLOCK = 1 << 16  # a segment encoder reads the clock after this much text


class Clock(Protocol):
    """What tokenizing reads of a render's deadline (``boundary.render.sandbox.Deadline``)."""

    def check_tokenizing(self) -> None:
        """Raise ``RenderLimitExceeded`` once the render's ``max_seconds`` have passed."""


@dataclass(frozen=True, slots=True)
class Cut:
    """A safe cut: ``tokens[:token]`` encode exactly ``text[:char]``, and the text from ``char``
    on encodes on its own, whatever follows ``char + lookahead`` (see the module docstring)."""

    char: CharOffset
    token: TokenOffset


@dataclass(frozen=True, slots=True)
class AddedSpan:
    """How an added token's span looks in the text: its content, plus any whitespace run it
    strips on the left / right."""

    content: str
    lstrip: bool = False
    rstrip: bool = False

    def spans(self, text: str, start: int, end: int) -> bool:
        """Whether ``text[start:end]`` is exactly this token's match (``end`` the true end of an
        ``rstrip`` run: the text ends there or a non-whitespace character follows)."""
        core = text[start:end]
        if self.lstrip:
            core = core.lstrip()
        if self.rstrip:
            core = core.rstrip()
            if end < len(text) and text[end].isspace():
                return False
        return core == self.content


@dataclass(frozen=True, slots=True)
class CutRule:
    """Which added-token boundaries of one encoder are safe cuts.

    ``starts`` / ``ends``: ids of added tokens whose start / end is a safe cut; a cut holds
    in another text only if it shares ``lookahead`` characters past the cut. ``reason``
    says, in words, what the encoder allows and why.
    """

    starts: frozenset[int]
    ends: frozenset[int]
    lookahead: int
    reason: str
    spans: Mapping[int, AddedSpan] = field(default_factory=dict, repr=False)

    @classmethod
    def none(cls, reason: str) -> CutRule:
        """No safe cut: every encode is a full encode."""
        return cls(frozenset(), frozenset(), 0, reason)

    @property
    def any(self) -> bool:
        return bool(self.starts or self.ends)

    def every_boundary(self, ids: frozenset[int]) -> bool:
        """True when the start and end of every token in ``ids`` is a safe cut."""
        return ids <= self.starts and ids <= self.ends

    def cuts(
        self, text: str, ids: list[int], token_chars: Callable[[int], tuple[int, int] | None]
    ) -> list[Cut]:
        """The safe cuts of ``ids`` (an encoding of ``text``), in order; ``token_chars(i)``
        gives token ``i``'s char span."""
        if not self.any:
            return []
        eligible = self.starts | self.ends
        out: list[Cut] = []
        for i, token_id in enumerate(ids):
            if token_id not in eligible:
                continue
            chars = token_chars(i)
            if chars is None or not self.spans[token_id].spans(text, *chars):
                continue
            start, end = chars
            if token_id in self.starts and (not out or out[-1].char != start):
                out.append(Cut(CharOffset(start), TokenOffset(i)))
            if token_id in self.ends:
                out.append(Cut(CharOffset(end), TokenOffset(i + 1)))
        return out


def cut_rule(backend: tokenizers.Tokenizer) -> CutRule:
    """The safe cuts of ``backend``'s encodings, read from its components (module docstring)."""
    model = type(backend.model).__name__
    if model not in _PIECEWISE_MODELS:
        return CutRule.none(f"model {model} is not known to encode piece by piece")
    if getattr(backend.model, "dropout", None):
        return CutRule.none("BPE dropout makes every encoding random")
    if backend.truncation is not None or backend.padding is not None:
        return CutRule.none("truncation or padding is on")
    if backend.encode_special_tokens:
        return CutRule.none("special tokens are encoded as text")
    try:
        pre = _pre_tokenizer_kinds(backend.pre_tokenizer)
    except Exception:  # a custom (Python) pre-tokenizer cannot be serialized
        return CutRule.none("the pre-tokenizer cannot be inspected")
    unknown = pre - _PIECEWISE_PRE_TOKENIZERS - {"Metaspace:first"}
    if unknown:
        return CutRule.none(f"pre-tokenizer {', '.join(sorted(unknown))} is not known to work piece by piece")
    added = backend.get_added_tokens_decoder()
    if not added:
        return CutRule.none("no added tokens")
    if any(t.single_word for t in added.values()):
        return CutRule.none("a single_word added token matches depending on the character before it")
    rstrip = any(t.rstrip for t in added.values())
    if rstrip and any(t.content[:1].isspace() for t in added.values()):
        return CutRule.none("an rstrip token's whitespace run may overlap a token starting with whitespace")
    has_normalizer = not _is_identity(backend.normalizer)
    eligible = {i: t for i, t in added.items() if not (has_normalizer and t.normalized)}
    if not eligible:
        return CutRule.none("every added token is matched after normalization")
    first_only = "Metaspace:first" in pre
    starts = frozenset(i for i, t in eligible.items() if not t.lstrip)
    ends = frozenset() if first_only else frozenset(eligible)
    longest = max(len(t.content) for t in added.values())
    # cuts at tokens matched in the second pass, inside a piece the first pass delimits
    two_passes = any(t.normalized for t in eligible.values()) and not all(
        t.normalized for t in added.values()
    )
    lookahead = longest * (2 if two_passes else 1)
    notes = []
    if len(eligible) < len(added):
        notes.append("normalized tokens give no cut")
    if len(starts) < len(eligible):
        notes.append("lstrip tokens give no start cut")
    if first_only:
        notes.append('Metaspace prepend_scheme="first": no end cuts')
    return CutRule(
        starts,
        ends,
        lookahead,
        "; ".join(notes) or "every added-token boundary",
        {i: AddedSpan(t.content, t.lstrip, t.rstrip) for i, t in eligible.items()},
    )


def _is_identity(normalizer: Any) -> bool:
    """True for no normalizer, or one provably the identity: a ``Sequence`` of such (empty
    included, as DeepSeek's tokenizer.json has)."""
    if normalizer is None:
        return True
    try:
        stack = [json.loads(normalizer.__getstate__())]
    except Exception:  # a custom (Python) normalizer cannot be serialized
        return False
    while stack:
        node = stack.pop()
        if node.get("type") != "Sequence":
            return False
        stack.extend(node.get("normalizers", []))
    return True


def _pre_tokenizer_kinds(pre_tokenizer: Any) -> set[str]:
    """The pre-tokenizer types in ``pre_tokenizer`` (a Sequence flattened); a Metaspace that
    prepends "▁" to the first piece only is ``Metaspace:first``."""
    if pre_tokenizer is None:
        return set()
    kinds: set[str] = set()
    stack = [json.loads(pre_tokenizer.__getstate__())]
    while stack:
        node = stack.pop()
        kind = node.get("type")
        if kind == "Sequence":
            stack.extend(node.get("pretokenizers", []))
        elif kind == "Metaspace" and node.get("prepend_scheme", "always") == "first":
            kinds.add("Metaspace:first")
        else:
            kinds.add(str(kind))
    return kinds


def token_pattern(tokens: Iterable[str]) -> re.Pattern[str]:
    """Leftmost-longest match of any of ``tokens``, as tokenizers' added vocabulary matches
    (the one builder for added-token and control-token regexes; never matches when empty)."""
    longest_first = sorted(tokens, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, longest_first)) or "(?!)")


@once_cache(maxsize=16)
def _tiktoken_encoding(rank_file: RankFile, pattern: str) -> tuple[Any, list[int]]:
    """tiktoken's encoder over ``rank_file``'s verified bytes (read and hashed once per process,
    however many threads encode first at once; never tiktoken's own loader, which prefers an
    unchecked copy in its temp cache), and each rank's length in bytes. At most 16
    vocabularies kept (``boundary.memo``)."""
    import tiktoken

    ranks = rank_file.ranks()
    lengths = [0] * (max(ranks.values(), default=-1) + 1)
    for token, rank in ranks.items():
        lengths[rank] = len(token)
    encoding = tiktoken.Encoding(
        name=f"boundary:{rank_file.path.stem}", pat_str=pattern, mergeable_ranks=ranks, special_tokens={}
    )
    return encoding, lengths


class SegmentEncoder:
    """Encodes text as added tokens plus tiktoken-encoded plain segments, recording a cut at
    every added-token boundary (only built for encoders whose every such boundary is safe).

    ``normalize``: the vocabulary's normalizer, applied to each non-ASCII segment; it must
    leave ASCII text unchanged (NFC does). ``fallback``: the same vocabulary's ``tokenizers``
    encoding of one plain segment (same ids), used for a segment tiktoken cannot encode (its
    regex engine panics on a whitespace run of about a million characters). With a ``clock``,
    ``encode`` reads it after every ``_CHARS_PER_CLOCK`` characters encoded. Plain segments of
    ``SegmentCache.min_chars`` or more go through ``cache`` (kept by exact text, across requests).
    """

    __slots__ = (
        "_added",
        "_added_lengths",
        "_fallback",
        "_normalize",
        "_pattern",
        "_pattern_str",
        "_rank_file",
        "cache",
    )

    def __init__(
        self,
        rank_file: RankFile,
        pattern: str,
        added_tokens: Mapping[str, int],
        *,
        normalize: Callable[[str], str] | None,
        fallback: Callable[[str], list[int]],
    ) -> None:
        self._rank_file = rank_file
        self._pattern_str = pattern
        self._added = dict(added_tokens)
        self._pattern = token_pattern(self._added)
        self._normalize = normalize
        self._fallback = fallback
        self._added_lengths = {i: len(t.encode("utf-8")) for t, i in self._added.items()}
        self.cache = SegmentCache()

    def encode(self, text: str, clock: Clock | None = None) -> tuple[list[int], list[int], list[int]]:
        """``text``'s ids and its cuts as two parallel lists: the cuts' chars and their tokens
        (a cut before and after every added token, in order)."""
        bpe = _tiktoken_encoding(self._rank_file, self._pattern_str)[0].encode_ordinary
        try:
            return self._encode(text, bpe, clock)
        except BaseException as exc:  # pyo3's PanicException derives from BaseException
            if type(exc).__name__ != "PanicException":
                raise
        return self._encode(text, self._guarded(bpe), clock)

    def token_map(self, segment: str, ids: Sequence[int]) -> TokenMap | None:
        """A ``ByteTokenMap`` of ``segment`` from ``ids``, its encoding by ``encode`` (no
        re-encoding); None when the normalizer changes ``segment`` (offsets would differ)."""
        if self._normalize is not None and not segment.isascii() and self._normalize(segment) != segment:
            return None
        lengths = _tiktoken_encoding(self._rank_file, self._pattern_str)[1]
        added = self._added_lengths
        return ByteTokenMap(segment, [added[i] if i in added else lengths[i] for i in ids])

    def _guarded(self, bpe: Callable[[str], list[int]]) -> Callable[[str], list[int]]:
        def encode(segment: str) -> list[int]:
            try:
                return bpe(segment)
            except BaseException as exc:
                if type(exc).__name__ != "PanicException":
                    raise
            return self._fallback(segment)  # normalized again by the fallback: NFC is idempotent

        return encode

    def _encode(
        self, text: str, bpe: Callable[[str], list[int]], clock: Clock | None
    ) -> tuple[list[int], list[int], list[int]]:
        added = self._added
        ids: list[int] = []
        chars: list[int] = []
        tokens: list[int] = []
        pos = read_at = 0
        for match in self._pattern.finditer(text):
            start, end = match.span()
            if start > pos:
                ids.extend(self._plain(text[pos:start], bpe))
                if clock is not None and start - read_at > _CHARS_PER_CLOCK:
                    clock.check_tokenizing()
                    read_at = start
            at = len(ids)
            ids.append(added[match.group()])
            chars += (start, end)
            tokens += (at, at + 1)
            pos = end
        if pos < len(text):
            ids.extend(self._plain(text[pos:], bpe))
        if clock is not None:
            clock.check_tokenizing()
        return ids, chars, tokens

    def _plain(self, segment: str, bpe: Callable[[str], list[int]]) -> Sequence[int]:
        """One plain segment's ids: normalized first unless ASCII; kept by the cache if long."""
        long = len(segment) >= self.cache.min_chars
        found = self.cache.get(segment) if long else None
        if found is not None:
            return found
        normalize = self._normalize
        ids = bpe(segment if normalize is None or segment.isascii() else normalize(segment))
        if long:
            self.cache.put(segment, ids)
        return ids


class CutTokenMap:
    """A ``TokenMap`` from cuts, given as two parallel lists (``chars[i]``, ``tokens[i]``: cut
    ``i``). A position on a cut maps directly; any other position lies in one plain segment
    between two cuts, whose map ``segment_map`` gives from its text and its ids (``ids``
    between the two cuts: segments are encoded independently)."""

    __slots__ = ("_chars", "_ids", "_n_chars", "_n_tokens", "_segment_map", "_text", "_tokens")

    def __init__(
        self,
        text: str,
        chars: Sequence[int],
        tokens: Sequence[int],
        ids: Sequence[int],
        segment_map: Callable[[str, Sequence[int]], TokenMap],
    ) -> None:
        self._text = text
        self._chars = chars
        self._tokens = tokens
        self._n_chars = len(text)
        self._ids = ids
        self._n_tokens = len(ids)
        self._segment_map = segment_map

    def floor(self, char: CharOffset) -> tuple[TokenOffset, CharOffset]:
        if char >= self._n_chars:
            return TokenOffset(self._n_tokens), CharOffset(self._n_chars)
        chars, tokens = self._chars, self._tokens
        i = bisect_right(chars, char) - 1
        start, start_token = (chars[i], tokens[i]) if i >= 0 else (0, 0)
        if start == char:
            return TokenOffset(start_token), char
        end, end_token = self._n_chars, self._n_tokens
        if i + 1 < len(chars):
            end, end_token = chars[i + 1], tokens[i + 1]
        segment_map = self._segment_map(self._text[start:end], self._ids[start_token:end_token])
        token, at = segment_map.floor(CharOffset(char - start))
        return TokenOffset(start_token + token), CharOffset(start + at)
