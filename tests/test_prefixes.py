"""Longest common prefixes, by bisection over slices."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from boundary.prefixes import common_prefix_length, common_prefix_packed, packed


def test_common_prefix_length() -> None:
    assert common_prefix_length("", "") == 0
    assert common_prefix_length("abc", "abd") == 2
    long = "x" * 10_000
    assert common_prefix_length(long + "a", long + "b") == 10_000
    assert common_prefix_length(long, long + "tail") == 10_000
    assert common_prefix_length("a" + long, "b" + long) == 0


def test_packed_id_prefixes_agree_with_plain_ones() -> None:
    a, b = list(range(1000)), [*range(600), 7, *range(601, 1000)]
    assert common_prefix_packed(packed(a), packed(b)) == common_prefix_length(a, b) == 600
    assert common_prefix_packed(packed(a), packed(a[:10])) == 10


@given(a=st.lists(st.integers(0, 3), max_size=40), b=st.lists(st.integers(0, 3), max_size=40))
def test_the_bisection_finds_the_first_difference(a: list[int], b: list[int]) -> None:
    expected = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    assert common_prefix_length(a, b) == expected
    assert common_prefix_length("".join(map(str, a)), "".join(map(str, b))) == expected
    assert common_prefix_packed(packed(a), packed(b)) == expected
