"""Chained prefix ids name whole prefixes, exactly."""

from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from boundary.cache import PrefixHasher, PrefixReuse
from boundary.prefixes import common_prefix_length

tokens = st.lists(st.integers(0, 5), max_size=60)


@given(tokens, tokens, st.sampled_from([1, 2, 3, 8]))
def test_two_sequences_share_an_id_exactly_where_they_share_the_whole_prefix(a, b, unit):
    hasher = PrefixHasher(unit)
    ia, ib = hasher.prefix_ids(a), hasher.prefix_ids(b)
    assert len(ia) == len(a) // unit
    for i in range(min(len(ia), len(ib))):
        assert (ia[i] == ib[i]) == (a[: (i + 1) * unit] == b[: (i + 1) * unit])


@given(tokens, tokens, st.sampled_from([1, 4]))
def test_reusing_an_earlier_sequence_gives_the_same_ids(a, b, unit):
    hasher = PrefixHasher(unit)
    earlier = array("I", a)
    reuse = PrefixReuse(earlier, hasher.prefix_ids(earlier))
    later = array("I", b)
    assert hasher.prefix_ids(later, reuse=reuse) == hasher.prefix_ids(later)


@given(tokens, tokens)
def test_the_common_prefix_length_is_found_by_bisection(a, b):
    expected = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    assert common_prefix_length(a, b) == expected
