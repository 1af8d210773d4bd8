"""Longest common prefixes of texts and token-id sequences.

Where it sits: the bottom: the one longest-common-prefix function, used by sessions, the round
trip, the audit and the cache model.

A bisection over slice comparisons: O(log n) comparisons, each done in C, and no per-item
Python work. ``packed`` turns ids into bytes once, for sequences compared many times.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TypeVar

S = TypeVar("S", str, bytes, Sequence[int])

_ID_BYTES = 8


def common_prefix_length(a: S, b: S) -> int:
    """The length of the longest common prefix of two strings, byte strings or id sequences."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def packed(ids: Sequence[int]) -> bytes:
    """Ids as 8-byte machine integers, for ``common_prefix_packed``."""
    return array("q", ids).tobytes()


def common_prefix_packed(a: bytes, b: bytes) -> int:
    """``common_prefix_length`` of two id sequences given ``packed``, in ids."""
    n = min(len(a), len(b)) // _ID_BYTES
    if a[: n * _ID_BYTES] == b[: n * _ID_BYTES]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi], in ids
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo * _ID_BYTES : mid * _ID_BYTES] == b[lo * _ID_BYTES : mid * _ID_BYTES]:
            lo = mid
        else:
            hi = mid
    return lo
