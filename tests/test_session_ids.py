"""The ids a session keeps (``boundary.session.ids``): where two texts part, and which kept ids
are ints of their own and which the shared table's."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from boundary.prefixes import common_prefix_length
from boundary.session.ids import _OWN_INTS_MAX, _TAIL, shared_length
from boundary.shipped.datasets import tau_bench_airline
from tests.support import family

_TEXT = st.text(alphabet="ab\x00é", max_size=40)


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(_TEXT, _TEXT, _TEXT, st.integers(0, 5000))
def test_the_shared_length_is_the_common_prefix_length(head: str, a: str, b: str, pad: int) -> None:
    """Texts that part near the end, far from it (past every ``_TAIL`` step) or not at all."""
    long = "x" * pad
    for before, text in [
        (head + a, head + b),
        (long + head + a, long + head + b),
        (head + a + long, head + b + long),
        (head + a, head + a + b),
        (head + a + b, head + a),
    ]:
        assert shared_length(before, text) == common_prefix_length(before, text)


def test_the_tail_steps_are_each_tried() -> None:
    before = "y" * 10_000
    for cut in (10, _TAIL[0] + 5, _TAIL[1] + 5, 9_999):
        text = before[: 10_000 - cut] + "z" + before[10_000 - cut + 1 :]
        assert shared_length(before, text) == 10_000 - cut


def _requests(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [messages[:i] for i, m in enumerate(messages) if m["role"] == "assistant"]


def test_a_sessions_first_ids_are_its_own_ints_and_the_rest_are_interned() -> None:
    """Up to ``_OWN_INTS_MAX`` ids the kept list holds the encoder's ints (40 bytes an id
    counted); the ids encoded past it are the shared table's (8), and the count follows."""
    fam = family("qwen3_5")
    trajectories = tau_bench_airline()
    chained = [trajectories[0][0]] + [m for t in trajectories[:8] for m in t if m["role"] != "system"]
    session = fam.session()
    kept = session._kept
    crossed = False
    for request in _requests(chained):
        rendered = session.render(request)
        assert rendered.token_ids == fam.render(request).token_ids
        n = len(kept.ids)
        assert kept.own_ints <= _OWN_INTS_MAX and kept.own_ints <= n
        if n <= _OWN_INTS_MAX:
            assert kept.own_ints == n
        else:
            crossed = True
            table = kept._ints
            assert table is not None
            assert all(i is table[i] for i in kept.ids[kept.own_ints :])
            assert all(i is not table[i] for i in kept.ids[: kept.own_ints] if i > 256)
        own = kept.nbytes
        saved = kept.own_ints
        kept.own_ints = 0
        kept._recount()
        assert own - kept.nbytes == 32 * saved
        kept.own_ints = saved
        kept._recount()
    assert crossed


def test_a_first_request_past_the_bound_is_interned_whole() -> None:
    fam = family("qwen3_5")
    trajectories = tau_bench_airline()
    long = [trajectories[0][0]] + [m for t in trajectories[:8] for m in t if m["role"] != "system"]
    request = _requests(long)[-1]
    session = fam.session()
    rendered = session.render(request)
    assert len(rendered.token_ids) > _OWN_INTS_MAX
    assert session._kept.own_ints == 0
    assert rendered.token_ids == fam.render(request).token_ids
