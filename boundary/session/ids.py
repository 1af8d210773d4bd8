"""The ids a session keeps between requests, and how a request's text reuses them.

Where it sits: inside ``boundary.session.session``, at the tokenization stage: a ``Session`` hands
``KeptIds.encode`` to the renderer as its encoder (``boundary.tokenize.encode.encode_rendering``).

A request's text is encoded as the previous request's ids up to the last safe cut that the
tokenizer's encoder declares (``Tokenizer.cut_rule``) at least ``lookahead`` characters
inside the text both requests share, then the rest encoded on its own; an encoder that
declares no safe cut encodes everything every time.

Invariants: the ids handed out are a list of their own (a caller may change it; nothing
kept is touched); the kept text is emptied before the kept ids are cut, so an encode that
raises part-way leaves nothing a later request reuses; ``nbytes`` is what the kept state
holds, counted as it changes.
"""

from __future__ import annotations

from bisect import bisect_right

from boundary.footprint import ints_bytes, list_size, str_size
from boundary.memo import once_cache
from boundary.offsets import TokenMap
from boundary.prefixes import common_prefix_length
from boundary.tokenize.segments import Clock, CutTokenMap
from boundary.tokenize.tokenizer import Tokenizer

_OWN_INT = 32  # bytes counted per kept id that is an int of its own (28, as the allocator rounds it)
# A session keeps up to this many ids, from its first, as ints of their own (at most 128 KiB
# more than interned): a short conversation interns nothing; past it, ids are interned
_OWN_INTS_MAX = 4096
_TAIL = (64, 4096)  # how far before the previous text's end the two texts are first compared


class KeptIds:
    """The previous request's text and ids with their safe cuts (``cut_chars[i]``,
    ``cut_tokens[i]``). The first ``own_ints`` kept ids, at most ``_OWN_INTS_MAX``, are the
    encoder's ints (interning them costs a cache miss or two an id, so a short conversation,
    its first request included, pays nothing for it); the rest are the shared ints of
    ``_ints``, interned as they are encoded (8 bytes an id, not 40)."""

    __slots__ = (
        "_ints",
        "_tok",
        "cut_chars",
        "cut_tokens",
        "encoded",
        "ids",
        "nbytes",
        "own_ints",
        "reused",
        "text",
    )

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        self._ints: list[int] | None = None  # looked up at the first continuation
        self.reused = self.encoded = 0  # the last encode's tokens reused and encoded
        self.clear()

    def clear(self) -> None:
        self.text = ""
        self.ids: list[int] = []
        self.own_ints = 0
        self.cut_chars: list[int] = []
        self.cut_tokens: list[int] = []
        self._recount()

    def _recount(self) -> None:
        """``nbytes``: what the kept state holds, counted where it changes (and only there)."""
        self.nbytes = (
            str_size(self.text)
            + list_size(self.ids)
            + _OWN_INT * self.own_ints
            + list_size(self.cut_chars)
            + list_size(self.cut_tokens)
            + ints_bytes(len(self.cut_chars) + len(self.cut_tokens))
        )

    def encode(self, text: str, clock: Clock | None = None) -> tuple[list[int], TokenMap]:
        """``text``'s ids and token map, reusing the kept ids up to the last safe cut at least
        ``cut_rule.lookahead`` chars inside the text both requests share."""
        tok = self._tok
        if not self.text:  # nothing kept (a first request): no comparison
            return self._first(text, clock)
        shared = shared_length(self.text, text)
        k = bisect_right(self.cut_chars, shared - tok.cut_rule.lookahead) - 1
        if k < 0:  # no kept cut inside the shared text (every kept cut lies past 0)
            return self._first(text, clock)
        start, start_token = self.cut_chars[k], self.cut_tokens[k]
        suffix = tok.encode(text[start:], with_cuts=True, clock=clock)
        self.text = ""  # nothing is reused from ``ids`` unless this request's encode completes
        kept = self.ids
        del kept[start_token:]
        own = self.own_ints = min(self.own_ints, start_token)
        if own == start_token and own + len(suffix.ids) <= _OWN_INTS_MAX:
            kept += suffix.ids  # all kept ids still their own: these too
            self.own_ints += len(suffix.ids)
        else:
            kept += _shared(self._vocabulary_ints(), suffix.ids)
        ids = kept.copy()
        new_chars, new_tokens = suffix.cut_chars or [], suffix.cut_tokens or []
        skip = bisect_right(new_chars, 0)  # cuts at the suffix's start: the kept cut, or none
        # new lists: a token map handed out earlier holds the old ones
        chars = self.cut_chars[: k + 1] + [start + c for c in new_chars[skip:]]
        tokens = self.cut_tokens[: k + 1] + [start_token + t for t in new_tokens[skip:]]
        self.text, self.cut_chars, self.cut_tokens = text, chars, tokens
        self.reused, self.encoded = start_token, len(suffix.ids)
        self._recount()
        return ids, CutTokenMap(text, chars, tokens, ids, tok.segment_map)

    def _first(self, text: str, clock: Clock | None) -> tuple[list[int], TokenMap]:
        """``encode`` reusing nothing: ``text`` encoded in full and kept (a copy of its ids,
        never the list handed out; its cut lists, which are never changed in place)."""
        encoded = self._tok.encode(text, with_cuts=True, clock=clock)
        ids = encoded.ids
        self.text = ""
        if len(ids) <= _OWN_INTS_MAX:
            self.ids, self.own_ints = ids.copy(), len(ids)
        else:
            self.ids, self.own_ints = _shared(self._vocabulary_ints(), ids), 0
        chars, tokens = encoded.cut_chars or [], encoded.cut_tokens or []
        if chars and chars[0] == 0:  # a cut at the start reuses nothing
            skip = bisect_right(chars, 0)
            chars, tokens = chars[skip:], tokens[skip:]
        self.text, self.cut_chars, self.cut_tokens = text, chars, tokens
        self.reused, self.encoded = 0, len(ids)
        self._recount()
        return ids, encoded.token_map

    def _vocabulary_ints(self) -> list[int]:
        if self._ints is None:
            self._ints = _ints(self._tok.backend.get_vocab_size(with_added_tokens=True))
        return self._ints


def shared_length(before: str, text: str) -> int:
    """``common_prefix_length(before, text)``, quick where the texts part near ``before``'s
    end (a session's next request extends its previous text, or rewrites its last turns):
    ``text`` is compared in place first, then ``before`` cut ``_TAIL`` chars short, and only
    the stretch left is bisected (no slice of the whole text at each step)."""
    if text.startswith(before):
        return len(before)
    n = min(len(before), len(text))
    if len(text) < len(before) and before.startswith(text):
        return n
    lo, hi = 0, n  # before[:lo] == text[:lo]; before[:hi] != text[:hi]
    for tail in _TAIL:
        if n - tail <= lo:
            break
        if text.startswith(before[: n - tail]):
            lo = n - tail
            break
        hi = n - tail
    if lo == 0:
        return common_prefix_length(before[:hi], text[:hi])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if text.startswith(before[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


@once_cache(maxsize=4)
def _ints(n: int) -> list[int]:
    """The ints ``0 .. n - 1``, one object each, shared by every session over a vocabulary
    of ``n`` ids and never changed; at most 4 kept (about 10 MB for 250,000 ids)."""
    return list(range(n))


def _shared(ints: list[int], ids: list[int]) -> list[int]:
    """``ids`` as the objects of ``ints``, so a kept id costs its list slot alone (8 bytes),
    not an int of its own (32 more); an id past ``ints`` (none a vocabulary gives) as is.
    Not an ``array('I')``: handing out a fresh list from one makes an int per id, about five
    times the cost of copying a list on every request."""
    try:
        return [ints[i] for i in ids]
    except IndexError:
        return [ints[i] if i < len(ints) else i for i in ids]
