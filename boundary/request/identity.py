"""Request identity: whether a message, a tool list or any request value is exactly one seen before.

Where it sits: the request stage, beside ``validation``; sessions (``boundary.session``) key the
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
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NewType

from pydantic import BaseModel

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


def _pickler() -> tuple[io.BytesIO, _PlainPickler]:
    buffer = io.BytesIO()
    pickler = _PlainPickler(buffer, protocol=_PROTOCOL)
    pickler.fast = True  # no memo: the bytes depend on the values, never on shared references
    return buffer, pickler


def content_keys(values: Iterable[object]) -> list[ContentKey | None]:
    """``content_key`` of each of ``values``, with one pickler: a dump in fast mode starts
    from nothing (no memo, a frame of its own), so its bytes are those of a fresh pickler's;
    after a refused value the pickler is replaced, never reused mid-state."""
    buffer, pickler = _pickler()
    keys: list[ContentKey | None] = []
    for value in values:
        try:
            pickler.dump(value)
        except (_NotPlain, RecursionError, ValueError, pickle.PicklingError):
            keys.append(None)  # not plain, nested too deep, or a cycle (fast mode refuses those)
            buffer, pickler = _pickler()
            continue
        keys.append(ContentKey(buffer.getvalue()))
        buffer.seek(0)
        buffer.truncate()
    return keys


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


__all__ = ["ContentKey", "as_read", "content_key", "content_keys", "item_key", "item_keys", "items_key"]
