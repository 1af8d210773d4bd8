"""What a kept value holds in memory, in bytes, counted the cheap way.

Where it sits: beside the session stage, under ``boundary.session.session`` and
``boundary.session.incremental.store``,
which count what a session keeps with it (``Session.nbytes``); it imports nothing of the package.

``sys.getsizeof`` of a ``str``, ``bytes`` or list is exact and O(1) (a string's size follows
from its length and widest character), so large values cost nothing to count; containers are
walked. A value reachable twice is counted twice: the count errs high, never low, for what it
walks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from sys import getsizeof
from typing import Any, cast

SLOT = 8  # a list slot or dict value pointer
INT = 32  # an int object past the small ints, with its allocator's rounding
_CONTAINERS = frozenset({dict, list, tuple})
_GC_HEAD = getsizeof([]) - [].__sizeof__()  # what ``getsizeof`` adds for an object the collector tracks
_list_sizeof, _set_sizeof = list.__sizeof__, set.__sizeof__
_str_sizeof, _bytes_sizeof = str.__sizeof__, bytes.__sizeof__


# ``sys.getsizeof`` of one exact type, its ``__sizeof__`` called directly: a seventh of the
# cost, as ``getsizeof`` looks the method up on every call (a session counts on every render).
def list_size(items: list[Any]) -> int:
    return _list_sizeof(items) + _GC_HEAD


def set_size(items: set[Any]) -> int:
    return _set_sizeof(items) + _GC_HEAD


def str_size(text: str) -> int:
    return _str_sizeof(text)


def bytes_size(data: bytes) -> int:
    return _bytes_sizeof(data)


def held_bytes(value: object) -> int:
    """``value``'s size by ``sys.getsizeof`` plus its items', walking into every item whose
    type is exactly dict, list or tuple; a dict's keys and any other item are counted by
    their own size."""
    total, stack = getsizeof(value), [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            mapping = cast("dict[object, object]", item)
            total += sum(map(getsizeof, mapping))
            items: Iterable[object] = mapping.values()
        elif kind is list or kind is tuple:
            items = cast("Sequence[object]", item)
        else:
            continue
        total += sum(map(getsizeof, items))  # each item's own size, containers included
        if not _CONTAINERS.isdisjoint(map(type, items)):
            stack += [x for x in items if type(x) in _CONTAINERS]
    return total


def strings_bytes(strings: tuple[str, ...]) -> int:
    """A tuple of strings: ``held_bytes`` without the walk."""
    return getsizeof(strings) + sum(map(getsizeof, strings))


def ints_bytes(count: int) -> int:
    """``count`` ints held in a list, each its own object."""
    return count * (SLOT + INT)


__all__ = [
    "INT",
    "SLOT",
    "bytes_size",
    "held_bytes",
    "ints_bytes",
    "list_size",
    "set_size",
    "str_size",
    "strings_bytes",
]
