"""A session cache is bounded in bytes: sessions count what they hold, the cache evicts the
least recently used past its bound, and what sessions hold in memory stays within the count."""

from __future__ import annotations

import gc
import json
import tracemalloc
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import boundary
from boundary.shipped.datasets import tau_bench_airline
from boundary.tokenize.segment_cache import SegmentCache
from tests.support import family

MiB = 1024 * 1024


def _turns(trajectory: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [trajectory[:i] for i, m in enumerate(trajectory) if m["role"] == "assistant"]


def _conversation(chars: int, first: int = 0) -> list[dict[str, Any]]:
    """tau-bench trajectories one after another, behind one system prompt, until the messages
    hold about ``chars`` characters: a conversation near the render limit."""
    trajectories = tau_bench_airline()
    messages = [trajectories[first][0]]
    held, t = len(messages[0]["content"]), first
    while held < chars:
        for m in trajectories[t % len(trajectories)][1:]:
            messages.append(m)
            held += len(m.get("content") or "") + len(json.dumps(m.get("tool_calls") or ""))
        t += 1
    return messages[: max(i for i, m in enumerate(messages) if m["role"] == "assistant")]


def _held_after(cache: boundary.SessionCache, sizes: dict[str, int]) -> None:
    stats = cache.stats
    assert stats.bytes == sum(sizes[i] for i in cache.ids()) <= stats.max_bytes
    assert stats.sessions == len(cache) <= stats.capacity


def test_a_session_counts_what_it_holds_after_each_render() -> None:
    fam = family("qwen3_5")
    session = fam.session()
    empty = session.nbytes
    for request in _turns(tau_bench_airline()[3]):
        session.render(request)
        assert session.stats.bytes == session.nbytes
    # the ids are kept as slots of one list (the ints are shared), so the count stays well
    # under a list of ints of their own (40 bytes an id) plus the text and its pickle
    assert empty < session.nbytes < 40 * len(session._kept.ids) + 12 * len(session._kept.text)


def test_a_cache_past_its_byte_bound_evicts_the_least_recently_used_sessions_first() -> None:
    fam = family("qwen3_5")
    conversations = {c: _turns(tau_bench_airline()[t])[-1] for c, t in zip("abc", (0, 10, 50), strict=True)}
    sizes = {}
    for c, request in conversations.items():
        session = fam.session()
        for _ in range(2 if c == "a" else 1):  # as the cache renders them ("a" twice)
            session.render(request)
        sizes[c] = session.nbytes
    cache = fam.sessions(max_bytes=sizes["a"] + sizes["b"] + sizes["c"] - 1)
    cache.render("a", conversations["a"])
    cache.render("b", conversations["b"])
    cache.render("a", conversations["a"])  # "b" is now the least recently used
    cache.render("c", conversations["c"])
    assert cache.ids() == ["a", "c"]
    assert cache.evictions == cache.stats.evictions == 1
    _held_after(cache, sizes)
    assert cache.drop("a") and cache.stats.bytes == sizes["c"]
    cache.clear()
    assert cache.stats.bytes == 0 and len(cache) == 0


def test_a_session_larger_than_the_bound_is_served_but_not_kept() -> None:
    fam = family("qwen3_5")
    request = _turns(tau_bench_airline()[3])[-1]
    cache = fam.sessions(max_bytes=64 * 1024)
    small = [{"role": "user", "content": "hi"}]
    cache.render("small", small)
    rendered = cache.render("big", request)
    assert rendered.token_ids == fam.render(request).token_ids
    assert "big" not in cache and "small" in cache
    assert cache.stats.bytes == cache.get("small").nbytes <= 64 * 1024
    with pytest.raises(ValueError, match="max_bytes"):
        fam.sessions(max_bytes=0)


@cache
def _small_requests() -> tuple[tuple[list[dict[str, Any]], ...], tuple[list[int], ...]]:
    requests = tuple(r for t in (0, 10, 50) for r in _turns(tau_bench_airline()[t])[:4])
    return requests, tuple(family("qwen3_5").render(r).token_ids for r in requests)


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["render", "get", "drop", "clear"]), st.sampled_from("abcd"), st.integers(0, 11)
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(operations=OPERATIONS, capacity=st.integers(1, 4), room=st.integers(1, 4))
def test_any_sequence_of_cache_operations_keeps_the_bounds_and_the_least_recently_used_order(
    operations: list[tuple[str, str, int]], capacity: int, room: int
) -> None:
    requests, cold = _small_requests()
    cache = family("qwen3_5").sessions(capacity, max_bytes=room * 120 * 1024)
    order: list[str] = []  # the ids by last use, as the cache must keep them (of those kept)
    for action, session_id, i in operations:
        if action == "render":
            assert cache.render(session_id, requests[i]).token_ids == cold[i]
        elif action == "get":
            cache.get(session_id)
        elif action == "drop":
            cache.drop(session_id)
        else:
            cache.clear()
        if action in ("render", "get"):
            order = [k for k in order if k != session_id] + [session_id]
        kept = cache.ids()
        assert kept == [k for k in order if k in kept]  # evictions take the oldest first
        stats = cache.stats
        assert stats.sessions == len(kept) <= capacity
        assert stats.bytes <= stats.max_bytes


def test_the_default_bound_is_256_mib() -> None:
    stats = family("qwen3_5").sessions().stats
    assert (stats.max_bytes, stats.capacity, stats.bytes, stats.sessions) == (256 * MiB, 1024, 0, 0)


def test_a_cache_of_near_limit_sessions_holds_no_more_memory_than_it_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tracemalloc's count of what the cache holds, with requests parsed afresh each time (as
    a frontend receives them) and dropped after rendering: at most ``stats.bytes`` plus
    1 MiB (the allocator's and the cache's own objects), and ``stats.bytes <= max_bytes``."""
    fam = family("qwen3_5")
    # no long segments kept across requests while measuring (the tokenizer's own cache)
    monkeypatch.setattr(fam.tokenizer.segments, "cache", SegmentCache(max_chars=0))
    payloads = [json.dumps(_conversation(1_750_000, first)) for first in (0, 1)]
    fam.session().render([{"role": "user", "content": "warm up"}])
    cache = fam.sessions(max_bytes=48 * MiB)  # room for one near-limit session (about 38 MiB), not two
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for c, payload in enumerate(payloads):
            rendered = cache.render(str(c), json.loads(payload))
            assert len(rendered.text) > 1_500_000
            del rendered
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    stats = cache.stats
    assert cache.ids() == ["1"] and stats.evictions == 1
    assert 16 * MiB < stats.bytes <= stats.max_bytes
    assert held <= stats.bytes + MiB
