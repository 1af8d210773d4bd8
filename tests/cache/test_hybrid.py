"""Cache semantics on small hand-made token sequences (block 8 unless said otherwise)."""

from __future__ import annotations

import pytest

from boundary.cache import CacheRequest, PrefixHasher
from boundary.cache.hybrid import CacheConfig
from boundary.checkpoints.kinds import CheckpointKind
from boundary.checkpoints.policies import decide
from boundary.checkpoints.retention import Decision, DecodeStates, EngineGeometry, RequestBoundaries
from tests.cache.conftest import geometry

P_END, U_END, D_END = CheckpointKind.PROMPT_END, CheckpointKind.INPUT_END, CheckpointKind.DECODE_END
TWIN = CheckpointKind.PROMPT_END_BLOCK

SYSTEM = list(range(1000, 1016))  # 16 tokens: two whole blocks


def seq(start: int, length: int) -> list[int]:
    return list(range(start, start + length))


class Replay:
    """Admit and finish requests one after another, checking invariants at every step."""

    def __init__(self, cache, unit: int | None = None) -> None:
        self.cache = cache
        self.hasher = PrefixHasher(unit or cache.geometry.unit)
        self.clock = 0.0
        self.rid = 0

    def run(
        self,
        prompt: list[int],
        output: list[int],
        variant: str | None = None,
        *,
        u_end: int | None = None,
        d_end: int | None = None,
        round_trip: float | None = None,
        decode_states: DecodeStates = DecodeStates.BLOCK,
        twin: bool = True,
    ):
        """One request; ``variant`` None keeps nothing (not even the twin)."""
        request = CacheRequest.from_tokens(self.rid, prompt + output, len(prompt), self.hasher)
        g = self.cache.geometry
        engine = EngineGeometry(g.block_size, g.unit, decode_states, twin)
        n = len(prompt)
        d_end = max(n + len(output) - 1 if d_end is None else d_end, n)  # the stop token is not D_end
        if variant is None:
            at_admission = at_finish = Decision(())
        else:
            at_admission = decide(variant, RequestBoundaries(n, u_end, None, round_trip), engine)
            at_finish = decide(variant, RequestBoundaries(n, u_end, d_end, round_trip), engine)
        admission = self.cache.admit(request, at_admission, now=self.clock)
        self.cache.check_invariants()
        self.cache.finish(self.rid, now=self.clock + 1, decision=at_finish)
        self.cache.check_invariants()
        self.rid += 1
        self.clock += 2
        return admission


def test_a_prompt_end_state_serves_the_next_request_that_extends_prompt_and_output(make_cache):
    replay = Replay(make_cache())
    prompt, output = SYSTEM + seq(1, 4), seq(100, 4)  # n = 20: P_end materializes at floor(19 / 8) * 8 = 16
    first = replay.run(prompt, output, "main_sparse")
    assert [s.position for s in first.created] == [16]
    second = replay.run(prompt + output + seq(200, 6), [7])
    assert (second.hit.attention, second.hit.recurrent, second.hit.joint) == (16, 16, 16)
    assert second.hit.state.labels == ("prompt_end", "prompt_end_block")  # at unit == block, one state


def test_a_hit_never_covers_the_last_prompt_token(make_cache):
    replay = Replay(make_cache())
    prompt = SYSTEM + seq(1, 8)  # n = 24, a whole number of blocks
    replay.run(prompt, [7], "main_sparse")
    resend = replay.run(prompt, [7])
    assert resend.hit.attention == 16  # the block ending at 24 would cover the last token
    assert resend.hit.joint == 16  # P_end's replay boundary is 23, floored to 16


def test_the_joint_hit_is_the_deepest_state_within_the_attention_match(make_cache):
    replay = Replay(make_cache())
    long_prompt = SYSTEM + seq(1, 16)  # 32 tokens; P_end state at 24
    replay.run(long_prompt, [7], "main_sparse")
    diverging = SYSTEM + seq(1, 4) + seq(500, 20)  # shares 20 tokens: attention matches blocks up to 16
    admission = replay.run(diverging, [7])
    assert admission.hit.attention == 16
    assert admission.hit.recurrent == 0  # no state at 16 or below; the one at 24 does not match
    assert admission.hit.joint == 0
    assert admission.hit.junction == 16


def test_a_junction_is_learned_on_the_second_request_and_hit_on_the_third(make_cache):
    replay = Replay(make_cache())
    first = replay.run(SYSTEM + seq(1, 12), [7], "main_sparse")
    second = replay.run(SYSTEM + seq(300, 12), [7], "main_sparse")
    third = replay.run(SYSTEM + seq(600, 12), [7], "main_sparse")
    assert first.hit.joint == 0 and first.hit.junction == 0
    assert second.hit.attention == 16 and second.hit.joint == 0 and second.hit.junction == 16
    assert 16 in [s.position for s in second.created]  # the junction's state, kept reactively
    assert third.hit.joint == 16
    assert third.hit.state.labels == ("reactive",) and third.hit.state.creator == 1


def test_sub_block_hits_need_an_attention_alias_and_a_state_at_the_same_unit(make_cache):
    replay = Replay(make_cache(geometry(block=8, unit=2)))
    prompt = SYSTEM + seq(1, 6)  # n = 22: P_end -> unit position 20, block twin 16
    first = replay.run(prompt, [7], "main_sparse")
    assert [s.position for s in first.created] == [16, 20]
    extension = replay.run([*prompt, 7, *seq(50, 9)], [8])
    assert (extension.hit.attention, extension.hit.joint) == (20, 20)
    other = replay.run(
        SYSTEM + seq(1, 2) + seq(900, 10), [8]
    )  # diverges at 18: the alias at 20 does not match
    assert (other.hit.attention, other.hit.joint) == (16, 16)  # the block twin serves it


def test_prompt_end_loses_its_unit_state_to_dropped_reasoning_but_input_end_keeps_it(make_cache):
    # The generation prompt ends with "<think>\n"; the next request renders the turn without it.
    header, think, newline, stop = [9001, 9002], [9003], [9004], [9999]
    user1, answer, user2 = seq(10, 9), seq(60, 5), seq(80, 8)
    prompt1 = SYSTEM + user1 + header + think + newline  # n = 29, U_end = 25
    output1 = [*seq(40, 10), 9005, *answer, *stop]
    prompt2 = SYSTEM + user1 + header + answer + stop + newline + user2 + header + think + newline
    expected = {  # (unit, variant) -> (joint hit, the serving state's labels)
        # the unit state at 28 holds "<think>": only P_end's block twin at 24 survives
        (1, "main_sparse"): (24, ("prompt_end_block",)),
        (1, "input_end"): (25, ("input_end",)),
        # floored to the block, P_end is its own twin and lands before the generation prompt
        (8, "main_sparse"): (24, ("prompt_end", "prompt_end_block")),
        (8, "input_end"): (24, ("input_end", "prompt_end_block")),
    }
    for (unit, variant), (joint, labels) in expected.items():
        replay = Replay(make_cache(geometry(block=8, unit=unit)))
        replay.run(prompt1, output1, variant, u_end=25)
        hit = replay.run(prompt2, [1, 2]).hit
        assert (hit.joint, hit.state.labels) == (joint, labels), (unit, variant)
    replay = Replay(make_cache(geometry(block=8, unit=1)))
    replay.run(prompt1, output1, "main_sparse", twin=False)  # an engine without the upstream twin
    assert replay.run(prompt2, [1, 2]).hit.joint == 0


def test_decode_end_is_rejected_when_reasoning_is_dropped_and_input_end_is_taken_instead(make_cache):
    header, think, newline, stop = [9001, 9002], [9003], [9004], [9999]
    user1, answer, user2 = seq(10, 8), seq(60, 5), seq(80, 8)
    prompt1 = SYSTEM + user1 + header + think + newline  # n = 28
    output1 = [*seq(40, 10), 9005, *answer, *stop]
    d_end = len(prompt1) + len(output1) - 1  # 44
    kept = (
        prompt1 + output1[:-1] + stop + newline + user2 + header + think + newline
    )  # reasoning kept in history
    dropped = SYSTEM + user1 + header + answer + stop + newline + user2 + header + think + newline

    replay = Replay(make_cache(geometry(block=8, unit=1)))
    replay.run(prompt1, output1, "both", u_end=24)
    hit = replay.run(dropped, [1, 2]).hit
    assert hit.joint == 24 and hit.state.labels == ("input_end", "prompt_end_block")

    # output states: the last block boundary the decode crossed (vLLM), or every unit
    for states, joint in ((DecodeStates.BLOCK, 40), (DecodeStates.UNIT, d_end)):
        replay = Replay(make_cache(geometry(block=8, unit=1)))
        replay.run(prompt1, output1, "both", u_end=24, decode_states=states)
        hit = replay.run(kept, [1, 2]).hit
        assert hit.joint == joint and hit.state.labels == ("decode_end",)


def test_a_decode_end_state_is_never_created_inside_the_prompt(make_cache):
    cache = make_cache(geometry(block=8, unit=1))
    replay = Replay(cache)
    prompt = SYSTEM + seq(1, 10)  # n = 26; D_end = 30, its block floor 24 lies in the prompt
    admission = replay.run(prompt, seq(70, 5), "decode_end", decode_states=DecodeStates.UNIT)
    assert [(s.position, s.labels) for s in admission.created] == [(24, ("prompt_end_block",))]
    assert cache.stats.created["decode_end"] == 1  # at 30, at finish
    assert sorted(s.position for s in cache.live_states()) == [24, 30]


def test_candidates_that_floor_to_one_position_make_one_state(make_cache):
    replay = Replay(make_cache())
    prompt = SYSTEM + seq(1, 12)  # n = 28: U_end 26 and P_end's twin (27 -> 24) both floor to 24
    admission = replay.run(prompt, [7], "input_end", u_end=26)
    # U_end on the twin is counted apart from the policy's own candidates sharing a state
    plan = admission.plan
    assert (plan.candidates, plan.collapsed, plan.on_twin, plan.junction_on_kept) == (2, 0, 1, 0)
    assert [(s.position, s.labels) for s in admission.created] == [(24, ("input_end", "prompt_end_block"))]


def test_a_junction_on_a_state_the_policy_keeps_is_counted_as_a_collision(make_cache):
    """Block 8, unit 8. The first request (28 tokens) caches blocks [0, 8) and [8, 16) and keeps
    P_end at floor(27 / 8) * 8 = 24. The second shares the 16 system tokens, then diverges:
    n = 20, attention matches 16, no state at or below 16, so joint 0 and the junction is 16.
    Its own P_end anchor 19 floors to 16, the twin too: one keep at 16 (prompt_end + twin), and
    the junction lands on it. Candidates: P_end, twin, junction = 3; P_end on the twin = 1;
    the junction on a kept state = 1; nothing else collapses."""
    replay = Replay(make_cache())
    replay.run(SYSTEM + seq(1, 12), [7], "main_sparse")
    second = replay.run(SYSTEM + seq(300, 4), [7], "main_sparse")
    assert (second.hit.joint, second.hit.junction) == (0, 16)
    plan = second.plan
    assert (plan.candidates, plan.collapsed, plan.on_twin, plan.junction_on_kept) == (3, 0, 1, 1)
    assert [(s.position, s.labels) for s in second.created] == [
        (16, ("prompt_end", "prompt_end_block", "reactive"))
    ]


def test_a_policy_state_inside_a_block_forces_a_scheduler_split(make_cache):
    cache = make_cache(geometry(block=8, unit=1))
    replay = Replay(cache)
    prompt = SYSTEM + seq(1, 12)  # n = 28, native stops at 24 (last block) and 27 (tail)
    assert replay.run(prompt, [7], "main_sparse").forced_splits == 0
    assert (
        replay.run(seq(500, 28), [7], "input_end", u_end=26).forced_splits == 1
    )  # 26; the twin 24 is native
    assert replay.run(seq(900, 28), [7], "input_end", u_end=21).forced_splits == 1  # 21 (no twin of its own)
    assert replay.run(seq(1300, 28), [7], "input_end", u_end=24).forced_splits == 0  # at the last block


def test_states_are_never_found_beyond_the_prefix_they_represent(make_cache):
    replay = Replay(make_cache(geometry(block=8, unit=1)))
    prompt = SYSTEM + seq(1, 12)
    replay.run(prompt, [7], "input_end", u_end=22)
    changed = SYSTEM + seq(1, 5) + [4242] + seq(7, 6)  # differs at 21, one token before the state
    hit = replay.run(changed, [7]).hit
    assert hit.attention == 16  # the alias at 22 names a prefix this request does not have
    assert hit.joint == 0 and hit.junction == 16  # no state at or below 16: U_end keeps no block twin


def test_chat_aware_replaces_its_prompt_side_stand_in_by_a_deeper_decode_state_at_finish(make_cache):
    cache = make_cache(geometry(block=8, unit=1))
    replay = Replay(cache)
    prompt = SYSTEM + seq(1, 10)  # n = 26: P_end at 25, twin 24; D_end 41 -> block 40
    output = seq(70, 16)
    admission = replay.run(prompt, output, "chat_aware", u_end=22, round_trip=1.0)
    assert [s.position for s in admission.created] == [24, 25]  # twin, and P_end standing in for D_end
    assert cache.stats.dropped_states == 1
    assert sorted((s.position, s.labels) for s in cache.live_states()) == [
        (24, ("prompt_end_block",)),
        (40, ("decode_end",)),
    ]
    assert replay.run(prompt + output[:-1] + seq(200, 5), [1]).hit.joint == 40


def test_under_equal_capacity_states_and_blocks_evict_each_other_in_lru_order(make_cache):
    cache = make_cache(capacity=1000)  # a block costs 100 bytes, a state or running state 200
    replay = Replay(cache)
    replay.run(SYSTEM + seq(1, 12), [7], "main_sparse")
    # cached now, oldest first: the P_end state (freed first), then blocks 24, 16, 8 (tail first)
    assert cache.working.used == 500
    replay.run(seq(300, 28), [7], "main_sparse")
    assert dict(cache.stats.evictions) == {("state", "scratch"): 1, ("block", "state"): 1}
    assert [e.position for e in cache.stats.evicted_states] == [24]
    assert cache.stats.evicted_states[0].hits == 0  # displaced without ever serving a hit
    assert cache.lookup(CacheRequest.from_tokens(9, SYSTEM + seq(1, 12), 28, replay.hasher)).attention == 16


def test_under_an_equal_checkpoint_budget_states_only_displace_states(make_cache):
    cache = make_cache(capacity=1000, checkpoint_budget_bytes=400)  # two states' worth
    replay = Replay(cache)
    for start in (1, 300, 600):
        replay.run(SYSTEM + seq(start, 12), [7], "main_sparse")
        assert cache.checkpoints.used <= 400
    victims = {victim for victim, _ in cache.stats.evictions}
    causes = {(victim, cause) for victim, cause in cache.stats.evictions}
    assert ("state", "state") in causes
    assert all(cause != "state" for victim, cause in causes if victim == "block")
    assert victims <= {"state", "block"}
    survivors = sorted(s.creator for s in cache.live_states())
    assert survivors == [1, 2]  # the oldest state went first


def test_a_checkpoint_budget_refuses_a_state_when_held_states_fill_it_and_is_never_exceeded(make_cache):
    """Budget 400 bytes = two states of 200. Three 28-token prompts (each keeps main_sparse's
    P_end at floor(27 / 8) * 8 = 24, which is also its twin: one state each) are admitted and
    stay in flight, so each holds its state: the first two fill the budget (400), the third
    finds held 400 + 200 > 400 and is refused (1 refusal, under its first kind prompt_end),
    nothing is evicted and the budget is never exceeded (0 overcommits). Once the first two
    finish their states are unheld: a fourth request's state evicts the least recently used
    one (request 0's, released first) and is admitted."""
    cache = make_cache(capacity=3000, checkpoint_budget_bytes=400)
    hasher, engine = PrefixHasher(8), EngineGeometry(8, 8)
    keep = decide("main_sparse", RequestBoundaries(28), engine)
    requests = [CacheRequest.from_tokens(i, [*seq(100 * (i + 1), 28), 7], 28, hasher) for i in range(4)]
    made = [cache.admit(r, keep, now=float(i)) for i, r in enumerate(requests[:3])]
    assert [len(a.created) for a in made] == [1, 1, 0]
    assert cache.stats.budget_refusals == {"prompt_end": 1}
    assert cache.checkpoints.used == 400 and cache.checkpoints.overcommits == 0
    for rid in (0, 1, 2):
        cache.finish(rid, now=3.0 + rid)
    fourth = cache.admit(requests[3], keep, now=7.0)
    assert len(fourth.created) == 1 and [e.creator for e in cache.stats.evicted_states] == [0]
    assert cache.checkpoints.peak <= 400 and cache.checkpoints.overcommits == 0
    cache.finish(3, now=8.0)


def test_an_entry_held_by_a_request_in_flight_is_never_evicted(make_cache):
    cache = make_cache(capacity=700)
    hasher = PrefixHasher(8)
    first = CacheRequest.from_tokens(0, SYSTEM + seq(1, 12) + [7], 28, hasher)
    engine = EngineGeometry(8, 8)
    cache.admit(
        first, decide("main_sparse", RequestBoundaries(28), engine), now=0.0
    )  # 4 blocks + running state + P_end state = 800 bytes
    assert cache.working.overcommits == 1  # nothing was evictable: a real scheduler would have waited
    cache.check_invariants()
    cache.finish(0, now=1.0)


def test_an_output_that_crosses_no_block_boundary_leaves_no_block_aligned_decode_state(make_cache):
    replay = Replay(make_cache(geometry(block=8, unit=1)))
    prompt = SYSTEM + seq(1, 10)  # n = 26; output ends at 30, before the next block boundary (32)
    admission = replay.run(prompt, seq(70, 5), "decode_end", twin=False)
    assert admission.plan.states == ()
    assert replay.run(prompt + seq(70, 5) + seq(90, 4), [1]).hit.joint == 0


def test_engine_steps_needs_a_finite_pool():
    # a block pool has a fixed number of pages; an unlimited one cannot be laid out
    with pytest.raises(ValueError, match="capacity must be finite"):
        CacheConfig(geometry(state_pages=1), float("inf"), engine_steps=True)
    CacheConfig(geometry(state_pages=1), 1000.0, engine_steps=True)


def test_a_pinned_state_is_never_evicted_and_becomes_evictable_when_unpinned(make_cache):
    """Capacity 900: request 0 (28 tokens + 1 output) leaves its P_end state (200 bytes) and 3
    cached blocks (300): 500. Pinned, the state is held; request 1 (a disjoint 28-token prompt)
    needs 4 blocks + a running state + its own state = 800, so 400 must go: the 3 blocks go
    (LRU) and then nothing is evictable: one overcommit, the pinned state survives. Unpinned,
    it is evictable again (in the LRU queue)."""
    cache = make_cache(capacity=900)
    replay = Replay(cache)
    replay.run(SYSTEM + seq(1, 12), [7], "main_sparse")
    (state,) = cache.live_states()
    cache.pin(state, now=10.0)
    assert state not in cache.working.policy
    replay.clock = 11.0
    replay.run(seq(300, 28), [7], "main_sparse")
    assert state.live and cache.working.overcommits == 1
    assert sum(n for (victim, _), n in cache.stats.evictions.items() if victim == "block") == 3
    assert not cache.stats.evicted_states
    cache.unpin(state, now=20.0)
    assert state in cache.working.policy


def test_engine_steps_runs_a_state_of_two_pages_beside_one_page_blocks(make_cache):
    """A state is two pages (two recurrent groups), a block one; a pool of 10 pages of 100
    bytes. Request 0 (28 prompt tokens, 1 output) keeps P_end at 24: afterwards its 3 full
    blocks (3 pages) and the state (2 pages) are cached. Request 1 extends it and resumes at
    24. Request 2, a disjoint 28-token prompt, needs 4 blocks and a running state page by page
    (the pool's 10 pages minus what request 1 left cached): the LRU head goes first and the
    pool's invariants hold throughout (checked after every admission and finish)."""
    cache = make_cache(geometry(state_pages=2), capacity=1000, engine_steps=True)
    replay = Replay(cache)
    replay.run(SYSTEM + seq(1, 12), [7], "main_sparse")
    assert cache.working.policy.pages(cache.geometry.state_bytes) == 2
    assert replay.run([*SYSTEM, *seq(1, 12), 7, *seq(50, 3)], [8], "main_sparse").hit.joint == 24
    replay.run(seq(300, 28), [7], "main_sparse")
    assert sum(cache.stats.evictions.values()) > 0 and cache.working.overcommits == 0
