"""The oracle: the deepest unit boundary any earlier request computed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from boundary.cache import CacheRequest, OracleCache, PrefixHasher

requests = st.lists(
    st.tuples(st.lists(st.integers(0, 3), min_size=2, max_size=40), st.integers(1, 6)), max_size=12
)


@given(requests, st.sampled_from([1, 2, 4]))
def test_the_oracle_matches_the_longest_prefix_computed_before_floored_to_the_unit(stream, unit):
    hasher, oracle = PrefixHasher(unit), OracleCache(unit)
    computed: list[list[int]] = []
    for rid, (prompt, output) in enumerate(stream):
        tokens = prompt + list(range(100, 100 + output))
        request = CacheRequest.from_tokens(rid, tokens, len(prompt), hasher)
        best = 0
        for seq in computed:
            common = next(
                (i for i, (x, y) in enumerate(zip(seq, prompt, strict=False)) if x != y),
                min(len(seq), len(prompt)),
            )
            best = max(best, common)
        expected = min(best, len(prompt) - 1) // unit * unit
        assert oracle.admit(request) == expected
        oracle.finish(rid)
        oracle.check_invariants()
        computed.append(tokens[: len(tokens) - 1])  # the last sampled token is never computed
