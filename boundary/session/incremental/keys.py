"""Exact-content keys of the values a message-loop iteration reads, memoized by identity.

Where it sits: inside the session stage, under ``boundary.session.incremental.store``: the per-session store
holds one ``Keys``; a render's ``incremental_run.Run`` keys the loop's items and every value a
traced iteration reads with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from sys import getsizeof
from typing import Any

import jinja2
from markupsafe import Markup

from boundary.request.identity import ContentKeyer

TRUE, FALSE = (bool, True), (bool, False)  # the keys of the two booleans
_KEPT = 200  # bytes counted per key held beside the key itself: its dict entry, tuple and id


class Keys:
    """Exact-content keys of the values an iteration reads (``content_key``; scalars as
    ``(type, value)``), memoized by identity: within one render for any object (pinned, so
    its id is not reused), and across renders for the objects a session keeps unchanged and
    never exposes (its normalized message dicts and tool list, passed to ``start``)."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Any, Any]] = {}
        self._memo: dict[int, tuple[Any, Any]] = {}
        self._keyer: ContentKeyer | None = None  # made at the first key: a short conversation needs none
        self._kept_bytes = self._memo_bytes = 0  # ``_size`` of the keys each holds

    @property
    def nbytes(self) -> int:
        """Bytes the keys held take (each key's size and ``_KEPT`` beside it)."""
        return self._kept_bytes + self._memo_bytes

    def start(self, keep: Sequence[Any]) -> None:
        kept, memo = self._kept, self._memo
        if memo:
            ids = set(map(id, keep))
            for i, known in memo.items():
                if i in ids:
                    before = kept.get(i)
                    if before is not None:
                        self._kept_bytes -= _size(before[1])
                    kept[i] = known
                    self._kept_bytes += _size(known[1])
            self._memo, self._memo_bytes = {}, 0
        if len(kept) > 2 * len(keep) + 16:  # objects the session no longer keeps
            self._kept = {id(o): kept[id(o)] for o in keep if id(o) in kept and kept[id(o)][0] is o}
            self._kept_bytes = sum(_size(key) for _, key in self._kept.values())

    def of(self, value: Any) -> Any:
        kind = type(value)
        if kind is bool:
            return TRUE if value else FALSE
        if kind is str or kind is int or value is None:
            return (kind, value)
        if kind is dict or kind is list or kind is tuple:
            known = self._kept.get(id(value)) or self._memo.get(id(value))
            if known is not None and known[0] is value:
                return known[1]
            key = self._content_key(value)
            self._memo[id(value)] = (value, key)
            self._memo_bytes += _size(key)
            return key
        if kind is float:
            return self._content_key(value)
        if isinstance(value, jinja2.Undefined):
            return (kind, value._undefined_name, value._undefined_hint)
        if kind is Markup:
            return (kind, str(value))
        return None

    def _content_key(self, value: Any) -> Any:
        keyer = self._keyer
        if keyer is None:
            keyer = self._keyer = ContentKeyer()
        return keyer.key(value)


def _size(key: Any) -> int:
    return _KEPT + getsizeof(key)
