"""Encoding text as segments cut at added tokens.

Both tokenizers and tiktoken first split text at added (control) tokens and encode each
piece between them on its own, so every start and end of an added token is a *hard cut*:
the ids before it do not depend on anything after it. ``SegmentEncoder`` makes that split
explicit. It encodes the plain segments with tiktoken (for vocabularies that are BPE rank
files; about ten times faster than ``tokenizers`` on one core) and records every cut as a
``(char, token)`` pair, which serves two purposes:

- char -> token mapping without per-token offsets (``CutTokenMap``): a position on a cut maps
  directly; any other position is resolved by encoding just its segment with offsets;
- session reuse (``boundary.session``): a previous request's ids can be kept up to any cut
  that lies safely inside the text both requests share.

``SegmentEncoder`` is only built where it is provably the same as the ``tokenizers`` path:
a converted rank file, added tokens matched verbatim (no lstrip/rstrip/single-word rules,
not normalized), NFC applied per segment as the ``tokenizers`` normalizer does. The tests
check identity on a corpus and on every request of the tau-bench replay.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from boundary.offsets import CharOffset, TokenMap, TokenOffset


@dataclass(frozen=True, slots=True)
class Cut:
    """A hard cut: ``tokens[:token]`` encode exactly ``text[:char]``, whatever follows."""

    char: int
    token: int


def added_token_pattern(tokens: Mapping[str, int]) -> re.Pattern[str]:
    """Leftmost-longest match of any added token, as tokenizers' added vocabulary matches."""
    longest_first = sorted(tokens, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, longest_first)) or "(?!)")


@cache
def _tiktoken_encoding(rank_file: str, pattern: str) -> Any:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(rank_file)
    return tiktoken.Encoding(
        name=f"boundary:{Path(rank_file).stem}", pat_str=pattern, mergeable_ranks=ranks, special_tokens={}
    )


class SegmentEncoder:
    """Encodes text as added tokens plus tiktoken-encoded plain segments, recording cuts."""

    __slots__ = ("_added", "_nfc", "_pattern", "_pattern_str", "_rank_file", "max_added_len")

    def __init__(self, rank_file: Path, pattern: str, added_tokens: Mapping[str, int], *, nfc: bool) -> None:
        self._rank_file = str(rank_file)
        self._pattern_str = pattern
        self._added = dict(added_tokens)
        self._pattern = added_token_pattern(self._added)
        self._nfc = nfc
        self.max_added_len = max((len(t) for t in self._added), default=0)

    def encode(self, text: str) -> tuple[list[int], list[Cut]]:
        bpe = _tiktoken_encoding(self._rank_file, self._pattern_str).encode_ordinary
        nfc = self._nfc
        ids: list[int] = []
        cuts: list[Cut] = []
        pos = 0
        for match in self._pattern.finditer(text):
            start = match.start()
            if start > pos:
                segment = text[pos:start]
                ids.extend(bpe(unicodedata.normalize("NFC", segment) if nfc else segment))
            cuts.append(Cut(start, len(ids)))
            ids.append(self._added[match.group()])
            pos = match.end()
            cuts.append(Cut(pos, len(ids)))
        if pos < len(text):
            segment = text[pos:]
            ids.extend(bpe(unicodedata.normalize("NFC", segment) if nfc else segment))
        return ids, cuts


class CutTokenMap:
    """A ``TokenMap`` from cuts. A position on a cut maps directly; any other position lies in
    one plain segment between two cuts, which ``segment_map`` encodes on its own (exact, since
    segments are encoded independently)."""

    __slots__ = ("_chars", "_cuts", "_n_chars", "_n_tokens", "_segment_map", "_text")

    def __init__(
        self,
        text: str,
        cuts: list[Cut],
        n_tokens: int,
        segment_map: Callable[[str], TokenMap],
    ) -> None:
        self._text = text
        self._cuts = cuts
        self._chars = [c.char for c in cuts]
        self._n_chars = len(text)
        self._n_tokens = n_tokens
        self._segment_map = segment_map

    def floor(self, char: int) -> tuple[TokenOffset, CharOffset]:
        if char >= self._n_chars:
            return TokenOffset(self._n_tokens), CharOffset(self._n_chars)
        i = bisect_right(self._chars, char) - 1
        start = self._cuts[i] if i >= 0 else Cut(0, 0)
        if start.char == char:
            return TokenOffset(start.token), CharOffset(char)
        end = self._chars[i + 1] if i + 1 < len(self._chars) else self._n_chars
        token, at = self._segment_map(self._text[start.char : end]).floor(char - start.char)
        return TokenOffset(start.token + token), CharOffset(start.char + at)
