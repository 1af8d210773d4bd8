"""Positions in a rendered prompt.

Where it sits: the bottom, with ``errors``: position types read by every stage from render on.

Every span is half-open ``[start, end)``. Character and token positions are distinct
types so a char offset cannot be passed where a token offset is meant.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from itertools import accumulate
from typing import NewType, Protocol

CharOffset = NewType("CharOffset", int)
TokenOffset = NewType("TokenOffset", int)


@dataclass(frozen=True, slots=True)
class Span:
    """Half-open ``[start, end)`` in characters of the rendered text."""

    start: CharOffset
    end: CharOffset


class BoundaryStatus(StrEnum):
    FOUND = "found"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Boundary:
    """A logical position in the prompt and the token boundary it materializes at.

    When FOUND: ``token`` is the deepest token boundary at or before ``char``; ``token_char``
    is where that boundary lies in the text, so ``straddled`` (a token crosses ``char``) is
    ``token_char != char``. When UNAVAILABLE all positions are None and ``reason`` says why.
    """

    status: BoundaryStatus
    char: CharOffset | None = None
    token: TokenOffset | None = None
    token_char: CharOffset | None = None
    reason: str | None = None

    @property
    def straddled(self) -> bool:
        return self.status is BoundaryStatus.FOUND and self.token_char != self.char

    @classmethod
    def unavailable(cls, reason: str) -> Boundary:
        return cls(BoundaryStatus.UNAVAILABLE, reason=reason)


class TokenMap(Protocol):
    """Maps character positions of a text onto the token boundaries of its encoding."""

    def floor(self, char: CharOffset) -> tuple[TokenOffset, CharOffset]:
        """The deepest token boundary at or before ``char`` and the char position it lies at."""
        ...


class OffsetsTokenMap:
    """A ``TokenMap`` over per-token ``(start, end)`` character offsets.

    A boundary before token ``k`` is clean only when token ``k-1`` ends at or before token
    ``k`` starts; byte-level BPE can split one character over two tokens whose offsets
    overlap, and no prefix of the text ends between them.
    """

    __slots__ = ("_ends", "_n_chars", "_starts")

    def __init__(self, offsets: list[tuple[int, int]], n_chars: int) -> None:
        self._starts = [s for s, _ in offsets]
        self._ends = [e for _, e in offsets]
        self._n_chars = n_chars

    def floor(self, char: CharOffset) -> tuple[TokenOffset, CharOffset]:
        if char >= self._n_chars:
            return TokenOffset(len(self._ends)), CharOffset(self._n_chars)
        k = bisect_right(self._ends, char)
        while 0 < k < len(self._starts) and self._starts[k] < self._ends[k - 1]:
            k -= 1
        return TokenOffset(k), CharOffset(self._ends[k - 1] if k else 0)


class ByteTokenMap:
    """A ``TokenMap`` over a text whose tokens' UTF-8 byte lengths are known (a BPE encoding of
    exactly that text, in order): the boundary before token ``k`` is the sum of the lengths
    before it, and is no boundary when it falls inside a character (byte-level BPE splits one
    character over two tokens, as ``OffsetsTokenMap`` says). Holds one int per token, not an
    encoding with offsets."""

    __slots__ = ("_data", "_ends", "_n_chars", "_text")

    def __init__(self, text: str, token_lengths: Iterable[int]) -> None:
        self._text = text
        self._data = text.encode("utf-8")
        self._ends = list(accumulate(token_lengths))
        self._n_chars = len(text)

    def floor(self, char: CharOffset) -> tuple[TokenOffset, CharOffset]:
        if char >= self._n_chars:
            return TokenOffset(len(self._ends)), CharOffset(self._n_chars)
        k = bisect_right(self._ends, len(self._text[:char].encode("utf-8")))
        while k and self._data[self._ends[k - 1]] & 0xC0 == 0x80:  # inside a character
            k -= 1
        byte = self._ends[k - 1] if k else 0
        return TokenOffset(k), CharOffset(len(self._data[:byte].decode("utf-8")))


class PiecewiseTokenMap:
    """A ``TokenMap`` for text encoded as consecutive pieces, each with its own map.

    Piece boundaries are hard cuts: no token spans two pieces.
    """

    __slots__ = ("_char_starts", "_maps", "_n_chars", "_n_tokens", "_token_starts")

    def __init__(
        self, pieces: list[tuple[CharOffset, TokenOffset, TokenMap]], n_chars: int, n_tokens: int
    ) -> None:
        self._char_starts = [c for c, _, _ in pieces]
        self._token_starts = [t for _, t, _ in pieces]
        self._maps = [m for _, _, m in pieces]
        self._n_chars = n_chars
        self._n_tokens = n_tokens

    def floor(self, char: CharOffset) -> tuple[TokenOffset, CharOffset]:
        if char >= self._n_chars:
            return TokenOffset(self._n_tokens), CharOffset(self._n_chars)
        i = bisect_right(self._char_starts, char) - 1
        if i < 0:
            return TokenOffset(0), CharOffset(0)
        token, at = self._maps[i].floor(CharOffset(char - self._char_starts[i]))
        return TokenOffset(self._token_starts[i] + token), CharOffset(self._char_starts[i] + at)


class ShiftedTokenMap:
    """The ``TokenMap`` of a text encoded behind a prefix of ``chars`` characters that encoded
    to exactly ``tokens`` tokens, which were then dropped."""

    __slots__ = ("_chars", "_inner", "_tokens")

    def __init__(self, inner: TokenMap, chars: CharOffset, tokens: TokenOffset) -> None:
        self._inner, self._chars, self._tokens = inner, chars, tokens

    def floor(self, char: CharOffset) -> tuple[TokenOffset, CharOffset]:
        token, at = self._inner.floor(CharOffset(char + self._chars))
        if token < self._tokens:
            return TokenOffset(0), CharOffset(0)
        return TokenOffset(token - self._tokens), CharOffset(at - self._chars)


def locate(token_map: TokenMap, char: CharOffset) -> Boundary:
    token, at = token_map.floor(char)
    return Boundary(BoundaryStatus.FOUND, char=char, token=token, token_char=at)
