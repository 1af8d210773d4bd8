"""The cheap size helpers equal ``sys.getsizeof`` for the types they are given."""

from __future__ import annotations

from sys import getsizeof

from boundary.footprint import bytes_size, held_bytes, list_size, set_size, str_size, strings_bytes

STRINGS = ["", "a", "héllo", "日本語", "\U0001f600" * 3, "x" * 10_000]


def test_each_size_helper_is_getsizeof_of_its_type() -> None:
    lists: list[list[object]] = [[], [1], list(range(1000)), [[], "a"]]
    grown: list[int] = []
    for i in range(100):  # over-allocated by appends: the size follows the allocation
        grown.append(i)
        lists.append(grown)
        assert list_size(grown) == getsizeof(grown)
    assert [list_size(x) for x in lists] == [getsizeof(x) for x in lists]
    assert [set_size(x) for x in (set(), {"a"}, set(map(str, range(500))))] == [
        getsizeof(x) for x in (set(), {"a"}, set(map(str, range(500))))
    ]
    assert [str_size(s) for s in STRINGS] == [getsizeof(s) for s in STRINGS]
    assert [bytes_size(s.encode()) for s in STRINGS] == [getsizeof(s.encode()) for s in STRINGS]


def test_held_bytes_walks_containers_and_errs_high_for_shared_items() -> None:
    shared = "x" * 100
    value = {"a": [shared, shared], "b": ("c",)}
    expected = (
        getsizeof(value)
        + getsizeof("a")
        + getsizeof("b")
        + getsizeof(value["a"])
        + getsizeof(value["b"])
        + 2 * getsizeof(shared)
        + getsizeof("c")
    )
    assert held_bytes(value) == expected
    mixed = [None, True, 1, 2**100, 1.5, "é", b"x", {"k": [1, (2, "3")]}, 2j]
    assert held_bytes(mixed) == getsizeof(mixed) + sum(map(getsizeof, mixed)) + getsizeof("k") + getsizeof(
        [1, (2, "3")]
    ) + getsizeof(1) + getsizeof((2, "3")) + getsizeof(2) + getsizeof("3")
    assert strings_bytes(("a", "bc")) == getsizeof(("a", "bc")) + getsizeof("a") + getsizeof("bc")
