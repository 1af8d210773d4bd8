"""A bounded memo shared between threads that builds each key once, however many callers ask
for it together.

Where it sits: below the tokenize and render stages: ``boundary.tokenize.segments`` keeps its
tiktoken encoders, ``boundary.render.template_run`` and ``boundary.session.incremental.store``
their compiled templates and sandbox environments, and ``boundary.session.ids`` its shared id
table in one (``once_cache``); it imports nothing of the package.

``functools.lru_cache`` is safe to share but not once-only: callers that miss the same key
together each build it, and a serving frontend's first requests for a template arrive
together (eight compiles of an instrumented template, each hundreds of milliseconds). Here a
miss makes a cell under the memo's lock, and the build runs under that cell's own lock, so
one caller builds and the others wait for its value; builds of different keys run side by
side. A value is published once and never changed by the memo; callers must not change it
either (the memoized builders return frozen values). A build that raises is not kept: the
next caller of that key builds again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from functools import update_wrapper
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar

_P = ParamSpec("_P")
_V = TypeVar("_V")
_KWARGS = object()  # separates positional from keyword arguments in a key


class CacheInfo(NamedTuple):
    """As ``functools.lru_cache``'s: ``misses`` counts the builds started (exact); ``hits``
    the calls served a value built before (a hit racing another may go uncounted)."""

    hits: int
    misses: int
    maxsize: int
    currsize: int


class _Cell(Generic[_V]):
    """One key's value, published once as a 1-tuple (one attribute, so a reader without the
    lock sees nothing or the whole value); ``failed`` marks a build that raised; ``used`` is
    the memo's clock at its last use."""

    __slots__ = ("failed", "lock", "result", "used")

    def __init__(self, used: int) -> None:
        self.lock = threading.Lock()
        self.result: tuple[_V] | None = None
        self.failed = False
        self.used = used


class OnceCache(Generic[_P, _V]):
    """``build`` memoized by its arguments (hashable), at most ``maxsize`` keys, the least
    recently used dropped first. Invariant: a key held maps to at most one value, built once
    by one caller; a dropped key's value stays with the callers that hold it."""

    def __init__(self, build: Callable[_P, _V], maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._build = build
        self._cells: dict[Hashable, _Cell[_V]] = {}
        self._lock = threading.Lock()
        self._hits = self._misses = 0
        self._clock = 0  # the last use's stamp: a cell's ``used`` orders the cells by recency
        update_wrapper(self, build)

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _V:
        key: Hashable = args if not kwargs else (*args, _KWARGS, *sorted(kwargs.items()))
        # The common case, a value built before, takes no lock: a dict read is atomic, and
        # ``result`` is published whole. The stamp and the hit count are written without it:
        # calls at once may share a stamp or lose a hit, never a value.
        cell = self._cells.get(key)
        found = None if cell is None else cell.result
        if cell is not None and found is not None:
            self._clock += 1
            cell.used = self._clock
            self._hits += 1
            return found[0]
        return self._wait_or_build(key, args, kwargs)

    def _wait_or_build(self, key: Hashable, args: Any, kwargs: Any) -> _V:
        while True:
            cell = self._cell(key)
            with cell.lock:
                found = cell.result
                if found is None and not cell.failed:
                    try:
                        found = (self._build(*args, **kwargs),)
                    except BaseException:
                        cell.failed = True
                        self._forget(key, cell)
                        raise
                    cell.result = found
            if found is not None:
                return found[0]
            # the build this caller waited for raised: look the key up again, to build it anew

    def _cell(self, key: Hashable) -> _Cell[_V]:
        """The key's cell, made (a miss) when it has none or only a failed one; past
        ``maxsize`` cells the least recently used is dropped (a scan: misses are rare)."""
        with self._lock:
            self._clock += 1
            cell = self._cells.get(key)
            if cell is not None and not cell.failed:
                cell.used = self._clock
                self._hits += 1
                return cell
            cell = self._cells[key] = _Cell(self._clock)
            self._misses += 1
            if len(self._cells) > self.maxsize:
                cells = self._cells
                del cells[min(cells, key=lambda k: cells[k].used)]
            return cell

    def _forget(self, key: Hashable, cell: _Cell[_V]) -> None:
        with self._lock:
            if self._cells.get(key) is cell:
                del self._cells[key]

    def cache_info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, self.maxsize, len(self._cells))

    def cache_clear(self) -> None:
        with self._lock:
            self._cells.clear()
            self._hits = self._misses = 0


def once_cache(maxsize: int) -> Callable[[Callable[_P, _V]], OnceCache[_P, _V]]:
    """Decorator: ``OnceCache(function, maxsize)``."""

    def wrap(build: Callable[_P, _V]) -> OnceCache[_P, _V]:
        return OnceCache(build, maxsize)

    return wrap


__all__ = ["CacheInfo", "OnceCache", "once_cache"]
