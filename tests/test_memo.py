"""A once-only memo builds each key once however many threads ask at once, keeps at most its
bound (least recently used dropped first), and keeps no failed build."""

from __future__ import annotations

import threading

import pytest

from boundary.memo import once_cache

pytestmark = pytest.mark.usefixtures("switch_often")


def test_callers_asking_for_one_key_together_get_one_value_built_once() -> None:
    builds: list[int] = []
    started, release = threading.Event(), threading.Event()

    @once_cache(maxsize=4)
    def slow(n: int) -> list[int]:
        builds.append(n)
        started.set()
        release.wait()  # the other callers arrive while this build runs
        return [n]

    got: list[list[int]] = []
    arrived = threading.Barrier(13)

    def call() -> None:
        arrived.wait()
        got.append(slow(7))

    callers = [threading.Thread(target=call) for _ in range(12)]
    for t in callers:
        t.start()
    arrived.wait()
    started.wait()
    release.set()
    for t in callers:
        t.join()
    assert builds == [7]
    assert len(got) == 12 and all(v is got[0] for v in got)
    assert slow.cache_info().misses == 1


def test_keys_past_the_bound_drop_the_least_recently_used() -> None:
    built: list[str] = []

    @once_cache(maxsize=2)
    def make(key: str) -> str:
        built.append(key)
        return key * 2

    make("a")
    make("b")
    make("a")  # "b" is now the least recently used
    make("c")
    make("a")
    make("b")
    assert built == ["a", "b", "c", "b"]
    assert make.cache_info().currsize == 2


def test_a_build_that_raises_is_not_kept() -> None:
    calls: list[int] = []

    @once_cache(maxsize=2)
    def flaky(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise ValueError("first build fails")
        return n

    with pytest.raises(ValueError):
        flaky(1)
    assert flaky(1) == 1 and flaky(1) == 1
    assert calls == [1, 1]
    make_bad = once_cache(maxsize=0)
    with pytest.raises(ValueError, match="maxsize"):
        make_bad(len)
