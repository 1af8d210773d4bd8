"""The page-by-page pool is the cache model: worked by hand, and the byte-LRU what-if agrees
with it wherever nothing is evicted."""

from __future__ import annotations

import pytest

from boundary.cache import CacheRequest, EntryKind, PrefixHasher
from boundary.checkpoints.policies import decide, may_keep_decode
from boundary.checkpoints.retention import DecodeStates, EngineGeometry, RequestBoundaries
from tests.cache.conftest import geometry

SYSTEM = list(range(1000, 1016))  # two whole blocks of 8


def _run(
    cache, hasher: PrefixHasher, rid: int, prompt: list[int], output: list[int], variant: str, now: float
):
    """Admit and finish one request under ``variant`` (D_end: the token before the stop);
    ``hasher``: the one every request of ``cache`` is hashed with (it interns prefix ids)."""
    g = cache.geometry
    engine = EngineGeometry(g.block_size, g.unit, DecodeStates.BLOCK, True)
    request = CacheRequest.from_tokens(rid, prompt + output, len(prompt), hasher)
    n = len(prompt)
    before = RequestBoundaries(n, None, None, 1.0)
    after = RequestBoundaries(n, None, n + len(output) - 1, 1.0)
    tentative = may_keep_decode(variant, before, engine)
    admission = cache.admit(request, decide(variant, before, engine), now, tentative_decode=tentative)
    cache.check_invariants()
    cache.finish(rid, now + 1, decide(variant, after, engine))
    cache.check_invariants()
    return admission


@pytest.mark.parametrize("engine_steps", [True, False], ids=["page_by_page", "byte_lru"])
def test_a_decode_state_in_the_block_the_prompt_tail_aliased_is_served_with_that_block(
    make_cache, engine_steps
):
    """Block 8, unit 2. Request 0: 21 prompt tokens, 10 output tokens (31 in all, 30 computed).
    Its prompt tail (20) keys block 2 (tokens 16-23) as an alias while it is partly filled;
    the decode fills it, so it is cached under its full prefix id (24) too, as vLLM caches every
    full block of generated tokens. ``decode_end`` keeps P_end's twin (16) and D_end's block
    state (floor(30 / 8) * 8 = 24). Request 1 continues the whole output: attention matches
    blocks 0-2 (24 tokens) and the D_end state at 24, so it resumes at 24 (before: block 2
    answered only for 20, and the hit fell back to the twin at 16)."""
    cache = make_cache(geometry(block=8, unit=2, state_pages=1), 100_000.0, engine_steps=engine_steps)
    prompt, output = [*SYSTEM, *range(1, 6)], list(range(100, 110))
    hasher = PrefixHasher(2)
    first = _run(cache, hasher, 0, prompt, output, "decode_end", 0.0)
    assert [s.position for s in first.created] == [16]
    hit = _run(cache, hasher, 1, prompt + output[:-1] + list(range(200, 205)), [7], "decode_end", 2.0).hit
    assert (hit.attention, hit.recurrent, hit.joint) == (24, 24, 24)
    assert hit.state is not None and hit.state.labels == ("decode_end",)


@pytest.mark.parametrize("recurrent_first", [True, False], ids=["recurrent_groups_first", "attention_first"])
def test_a_partial_hits_copy_sources_go_back_to_the_free_queue_in_the_engines_group_order(
    make_cache, recurrent_first
):
    """Block 8, unit 2. Request 0 (13 prompt tokens) keeps its prompt tail at 12: a state, and
    an alias on attention block 1. Request 1 shares those 12 tokens and resumes at 12, inside
    block 1: the block and the state are copy-on-write sources, held through its scheduling
    step. vLLM lets a step's copy endpoints go manager by manager in its KV-cache group order
    (``take_kv_cache_block_copies``; the recurrent groups come first in the CPU engine's
    hybrid models, attention first in the hand-driven replay's), so the source of the group
    that comes first is evicted first. Found on the engine: BFCL, block 1056, a 99-page pool,
    where freeing them in the request's order kept one state one page too long."""
    cache = make_cache(
        geometry(block=8, unit=2, state_pages=1),
        100_000.0,
        engine_steps=True,
        recurrent_groups_first=recurrent_first,
    )
    hasher = PrefixHasher(2)
    prompt = list(range(1, 14))
    _run(cache, hasher, 0, prompt, [50], "main_sparse", 0.0)
    g = cache.geometry
    engine = EngineGeometry(g.block_size, g.unit, DecodeStates.BLOCK, True)
    second = [*prompt[:12], 60, 61, 62]
    request = CacheRequest.from_tokens(1, [*second, 70], len(second), hasher)
    boundaries = RequestBoundaries(len(second), None, None, 1.0)
    hit = cache.admit(request, decide("main_sparse", boundaries, engine), 2.0).hit
    assert (hit.attention, hit.joint) == (12, 12)
    order = cache.working.policy.evictable()
    state, block = order.index(hit.state), order.index(hit.blocks[1])
    assert (state < block) == recurrent_first
    cache.finish(1, 3.0)


def test_two_partial_hits_in_one_step_free_their_copy_sources_group_by_group(make_cache):
    """Block 8, unit 2, states of three recurrent groups. Requests 0 and 1 (13 distinct prompt
    tokens each) keep their prompt tails at 12. Requests 2 and 3, admitted and scheduled in one
    step, each resume at 12 inside block 1: the two states are copy-on-write sources held
    through the step. When it ends vLLM lets them go manager by manager, so their pages sit in
    the free queue interleaved by group ([A.g0, B.g0, A.g1, B.g1, A.g2, B.g2], A asked first)
    and one allocation of two pages at the head would end both."""
    cache = make_cache(geometry(block=8, unit=2, state_pages=3), 100_000.0, engine_steps=True)
    hasher = PrefixHasher(2)
    g = cache.geometry
    engine = EngineGeometry(g.block_size, g.unit, DecodeStates.BLOCK, True)
    prompts = [list(range(1, 14)), list(range(101, 114))]
    for rid, prompt in enumerate(prompts):
        _run(cache, hasher, rid, prompt, [50], "main_sparse", float(rid))
    hits = []
    for rid, prompt in enumerate(prompts, start=2):
        second = [*prompt[:12], 60, 61, 62]
        request = CacheRequest.from_tokens(rid, [*second, 70], len(second), hasher)
        decision = decide("main_sparse", RequestBoundaries(len(second), None, None, 1.0), engine)
        hits.append(cache.admit(request, decision, 5.0, run_prefill=False).hit)
    for rid in (2, 3):
        cache.step(rid, 15, 5.0)
    assert [(h.joint, h.state is not None) for h in hits] == [(12, True), (12, True)]
    cache.finish(2, 6.0)  # the step ended: its copy sources go first
    a, b = (h.state for h in hits)
    owners = [e for e in cache.working.policy.page_owners() if e is a or e is b]
    assert owners == [a, b, a, b, a, b]
    cache.finish(3, 6.0)


@pytest.mark.parametrize("recurrent_first", [True, False], ids=["recurrent_groups_first", "attention_first"])
def test_a_finishing_request_frees_its_pages_manager_by_manager_in_the_engines_group_order(
    make_cache, recurrent_first
):
    """Block 8, unit 2, states of three recurrent groups. A request of 17 prompt tokens and one
    output token keeps a state at 16 (block-aligned: the page its chunk ended in), which it still
    holds when it finishes. vLLM's ``KVCacheCoordinator.free`` frees the request manager by
    manager in its KV-cache group order, each tail first: on the CPU engine the state's three
    group pages join the free queue's tail before blocks 1 and 0, so the state is evicted first;
    attention first, after them."""
    cache = make_cache(
        geometry(block=8, unit=2, state_pages=3),
        100_000.0,
        engine_steps=True,
        recurrent_groups_first=recurrent_first,
    )
    admission = _run(cache, PrefixHasher(2), 0, list(range(1, 18)), [50], "main_sparse", 0.0)
    (state,) = admission.created
    owners = [e for e in cache.working.policy.page_owners() if e is not None]
    blocks = [e for e in owners if e.kind is EntryKind.BLOCK]
    assert state.position == 16 and [b.position for b in blocks] == [16, 8]  # tail first
    assert owners == ([state] * 3 + blocks if recurrent_first else blocks + [state] * 3)
