"""Request identity: whether a message, a tool list or any request value is exactly one seen before.

Where it sits: the request stage, beside ``validation``; sessions (``boundary.session.session``) key the
messages and tools they keep validated with it.

Python ``==`` is not identity for a template: it ignores dict key order and holds ``1``,
``1.0`` and ``True`` equal, and templates print them differently (``{{ x }}``, ``tojson``,
``items()`` order). ``content_key`` is a canonical serialization instead: a pickle, in
fast mode (no memo, so shared references serialize like equal copies), of a tree of exact
builtin values (``dict``, ``list``, ``tuple``, ``str``, ``int``, ``float``, ``bool``,
``None``, ``bytes``, ``set``, ``frozenset``). It keeps key order, container types and the
exact type and bits of every scalar.

Invariants:

- equal keys mean equal trees of the same exact types, with keys and set members in the
  same order: nothing a template can read tells the two values apart;
- any other value (a subclass, an enum, a custom or pydantic object inside the tree, a
  cycle, nesting too deep to serialize) has no key (``None``), and callers treat a value
  without a key as changed;
- a key is bytes computed when asked: editing the value afterwards, in place, never
  changes a key already taken, so a stored key is the copy of what was rendered.

Pydantic messages and tools (boundary's models, the OpenAI SDK's) are keyed by their
``model_dump(exclude_unset=True)``, which is what ``validation`` reads of them.

``SeenPrefix`` answers the question a session asks every turn (how many leading messages are
exactly those of the last request) with one serialization of the whole list, the same
pickle at protocol 3 (no frames, so each item's bytes sit at a position worked out from the
items before it), and the items' end positions kept from the last call.
"""

from __future__ import annotations

import io
import pickle
import threading
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NewType

from pydantic import BaseModel

from boundary.footprint import bytes_size
from boundary.prefixes import common_prefix_length

ContentKey = NewType("ContentKey", bytes)
"""The canonical serialization of a plain value tree (``content_key``)."""

_PROTOCOL = 5


class _NotPlain(Exception):
    """Raised inside the pickler at the first value that is not an exact builtin."""


class _PlainPickler(pickle.Pickler):
    """A pickler that serializes exact builtin values only: the C pickler handles ``None``,
    ``bool`` and exact ``int`` / ``float`` / ``str`` / ``bytes`` / ``dict`` / ``list`` /
    ``tuple`` / ``set`` / ``frozenset`` itself and asks ``reducer_override`` about
    everything else, which is refused."""

    def reducer_override(self, obj: Any) -> Any:
        raise _NotPlain


def _pickler(protocol: int = _PROTOCOL) -> tuple[io.BytesIO, _PlainPickler]:
    buffer = io.BytesIO()
    pickler = _PlainPickler(buffer, protocol=protocol)
    pickler.fast = True  # no memo: the bytes depend on the values, never on shared references
    return buffer, pickler


class ContentKeyer:
    """``content_key`` with one pickler kept between calls: a dump in fast mode starts from
    nothing (no memo, a frame of its own), so its bytes are those of a fresh pickler's; after
    a refused value the pickler is replaced, never reused mid-state."""

    __slots__ = ("_buffer", "_pickler")

    def __init__(self) -> None:
        self._buffer, self._pickler = _pickler()

    def key(self, value: object) -> ContentKey | None:
        buffer = self._buffer
        try:
            self._pickler.dump(value)
        except (_NotPlain, RecursionError, ValueError, pickle.PicklingError):
            self._buffer, self._pickler = _pickler()  # not plain, too deep, or a cycle
            return None
        key = ContentKey(buffer.getvalue())
        buffer.seek(0)
        buffer.truncate()
        return key


def content_keys(values: Iterable[object]) -> list[ContentKey | None]:
    """``content_key`` of each of ``values``, with one pickler (``ContentKeyer``)."""
    return list(map(ContentKeyer().key, values))


def content_key(value: object) -> ContentKey | None:
    """The canonical serialization of ``value`` (module docstring), or None when ``value``
    holds anything but exact builtin values (then it must be treated as changed)."""
    return content_keys((value,))[0]


def as_read(item: object) -> object:
    """What ``validation`` reads of one message or tool: a pydantic model's
    ``model_dump(exclude_unset=True)``, a non-dict mapping as a dict, anything else as is."""
    if type(item) is dict:  # the common case, ahead of the slower ``isinstance`` checks
        return item
    if isinstance(item, BaseModel):
        return item.model_dump(exclude_unset=True)
    if isinstance(item, Mapping) and not isinstance(item, dict):
        return dict(item)
    return item


def item_key(item: object) -> ContentKey | None:
    """``content_key`` of what ``validation`` reads of one message or tool (``as_read``)."""
    return content_key(as_read(item))


def item_keys(items: Iterable[object]) -> list[ContentKey | None]:
    """``item_key`` of each of ``items``."""
    return content_keys(map(as_read, items))


def items_key(items: Sequence[object] | None) -> ContentKey | None:
    """``content_key`` of a whole list of messages or tools as ``validation`` reads it; ``None``
    (no tools) has a key of its own, distinct from ``[]``."""
    if items is None or isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        return content_key(items)
    return content_key([as_read(item) for item in items])


_BATCH = 1000  # the C pickler's list batches: MARK items APPENDS; a one-item list: item APPEND


def _dump3(value: object) -> bytes | None:
    """``value`` pickled at protocol 3 in fast mode, exact builtin values only (else None)."""
    buffer, pickler = _pickler(3)
    try:
        pickler.dump(value)
    except (_NotPlain, RecursionError, ValueError, pickle.PicklingError):
        return None
    return buffer.getvalue()


class SeenPrefix:
    """How many leading items of a sequence are exactly (``content_key``'s sense) those of the
    sequence given last time. Holds the bytes of the last sequence as ``_dump3`` writes a list
    of ``None`` and then its items read as ``validation`` reads them (``as_read``), each as
    ``(item, None, None, None)``, without the final ``APPENDS`` and ``STOP``, and where each
    item's bytes end; a sequence holding any value without a key keeps nothing, so the next call
    matches no item.

    Invariant: ``ends[k] <= n`` for the length ``n`` of the common byte prefix of two such
    dumps means items ``0..k`` are exactly equal. A 4-tuple is written ``MARK ... TUPLE``, and
    equal bytes leave the unpickler in equal states, so the ``TUPLE`` that ends item ``k``'s
    tuple in one dump pops the same ``MARK`` in the other: that tuple ends there in both. A
    bare item's bytes could be continued instead (``]``, an empty list, then ``N a`` appends
    to it; ``N`` then ``TUPLE1`` wraps it)."""

    def __init__(self) -> None:
        self._body = b""
        self._ends: list[int] = []
        self._next: tuple[bytes, list[int]] = (b"", [])

    @property
    def nbytes(self) -> int:
        """Bytes held: the bytes of the last sequence and, until the next ``common``, of the
        one last passed to it, and each item's end (a list slot and an int)."""
        (body, ends), (pending, pending_ends) = (self._body, self._ends), self._next
        held = bytes_size(body) + 40 * len(ends)
        if pending is not body:  # else ``accept`` made it the last sequence
            held += bytes_size(pending) + 40 * len(pending_ends)
        return held

    def reset(self) -> None:
        self._body, self._ends = b"", []

    def accept(self) -> None:
        """The sequence last passed to ``common`` becomes the last sequence."""
        self._body, self._ends = self._next

    def common(self, items: Sequence[object]) -> int:
        """The number of leading ``items`` equal to the last sequence's (``accept`` makes
        ``items`` the last sequence). With no last sequence (a first call), each item is
        dumped once and the body joined from them, as the whole list's dump writes it."""
        # None first, so that even one item is written in a batch (MARK items APPENDS); then
        # each item read as ``validation`` reads it, in a 4-tuple (MARK ... TUPLE: see the class)
        read = [None, *[(as_read(item), None, None, None) for item in items]]
        self._next = (b"", [])
        if not items:
            return 0
        if not self._body:
            self._next = self._dump_items(read, 0, [], [_HEAD]) or (b"", [])
            return 0
        dump = self._dump(read)
        if dump is None:
            return 0
        body, old, ends = dump[:-2], self._body, self._ends
        shared = len(old) if body.startswith(old) else common_prefix_length(old, body)
        keep = min(bisect_right(ends, shared), len(items))
        kept = self._dump_items(read, keep, ends[:keep], None)
        if kept is not None and kept[1][-1] == len(body):  # else a pickler batching otherwise
            self._next = (body, kept[1])
        return keep

    @staticmethod
    def _dump(value: object) -> bytes | None:
        """``_dump3(value)`` with this thread's kept pickler (replaced after a refused value)."""
        kept = _THREAD.__dict__
        dumper = kept.get("dumper")
        if dumper is None:
            dumper = kept["dumper"] = _pickler(3)
        buffer, pickler = dumper
        buffer.seek(0)
        buffer.truncate()
        try:
            pickler.dump(value)
        except (_NotPlain, RecursionError, ValueError, pickle.PicklingError):
            del kept["dumper"]
            return None
        except BaseException:  # never reused mid-state
            del kept["dumper"]
            raise
        return buffer.getvalue()

    def _dump_items(
        self, read: list[Any], keep: int, ends: list[int], pieces: list[bytes] | None
    ) -> tuple[bytes, list[int]] | None:
        """``ends`` continued over ``read[keep + 1:]``, each item dumped alone (its bytes in
        the whole list's dump, without PROTO and STOP); with ``pieces`` (the bytes before
        them) also their body, joined. None when an item is not plain."""
        at = ends[-1] if ends else len(_HEAD)
        for k in range(keep + 1, len(read)):
            if k % _BATCH == 0:
                at += 2  # the last batch's APPENDS, this one's MARK
                if pieces is not None:
                    pieces.append(_NEXT_BATCH)
            item = self._dump(read[k])
            if item is None:
                return None
            at += len(item) - 3
            ends.append(at)
            if pieces is not None:
                pieces.append(item[2:-1])
        return (b"".join(pieces) if pieces is not None else b""), ends


# Each thread's pickler for ``SeenPrefix`` (one dump at a time: nothing a dump calls dumps again)
_THREAD = threading.local()
_HEAD = b"\x80\x03](N"  # PROTO 3, EMPTY_LIST, MARK, NONE: a dump of ``read`` up to its items
_NEXT_BATCH = b"e("  # APPENDS, MARK: between two batches


__all__ = [
    "ContentKey",
    "ContentKeyer",
    "SeenPrefix",
    "as_read",
    "content_key",
    "content_keys",
    "item_key",
    "item_keys",
    "items_key",
]
