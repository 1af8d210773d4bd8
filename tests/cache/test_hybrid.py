"""Cache semantics on small hand-made token sequences (block 8 unless said otherwise)."""

from __future__ import annotations

from boundary.cache import CacheRequest, PrefixHasher, Retain
from boundary.checkpoints import CheckpointKind
from tests.cache.conftest import geometry

P_END, U_END, D_END = CheckpointKind.PROMPT_END, CheckpointKind.INPUT_END, CheckpointKind.DECODE_END

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

    def run(self, prompt: list[int], output: list[int], retain=()):
        request = CacheRequest.from_tokens(self.rid, prompt + output, len(prompt), self.hasher)
        admission = self.cache.admit(request, list(retain), now=self.clock)
        self.cache.check_invariants()
        self.cache.finish(self.rid, now=self.clock + 1)
        self.cache.check_invariants()
        self.rid += 1
        self.clock += 2
        return admission


def test_a_prompt_end_state_serves_the_next_request_that_extends_prompt_and_output(make_cache):
    replay = Replay(make_cache())
    prompt, output = SYSTEM + seq(1, 4), seq(100, 4)  # n = 20: P_end materializes at floor(19 / 8) * 8 = 16
    first = replay.run(prompt, output, [Retain(P_END, len(prompt))])
    assert [s.position for s in first.created] == [16]
    second = replay.run(prompt + output + seq(200, 6), [7])
    assert (second.hit.attention, second.hit.recurrent, second.hit.joint) == (16, 16, 16)
    assert second.hit.state.labels == ("prompt_end",)


def test_a_hit_never_covers_the_last_prompt_token(make_cache):
    replay = Replay(make_cache())
    prompt = SYSTEM + seq(1, 8)  # n = 24, a whole number of blocks
    replay.run(prompt, [7], [Retain(P_END, len(prompt))])
    resend = replay.run(prompt, [7])
    assert resend.hit.attention == 16  # the block ending at 24 would cover the last token
    assert resend.hit.joint == 16  # P_end's replay boundary is 23, floored to 16


def test_the_joint_hit_is_the_deepest_state_within_the_attention_match(make_cache):
    replay = Replay(make_cache())
    long_prompt = SYSTEM + seq(1, 16)  # 32 tokens; P_end state at 24
    replay.run(long_prompt, [7], [Retain(P_END, len(long_prompt))])
    diverging = SYSTEM + seq(1, 4) + seq(500, 20)  # shares 20 tokens: attention matches blocks up to 16
    admission = replay.run(diverging, [7])
    assert admission.hit.attention == 16
    assert admission.hit.recurrent == 0  # no state at 16 or below; the one at 24 does not match
    assert admission.hit.joint == 0
    assert admission.hit.junction == 16


def test_a_junction_is_learned_on_the_second_request_and_hit_on_the_third(make_cache):
    replay = Replay(make_cache())
    first = replay.run(SYSTEM + seq(1, 12), [7], [Retain(P_END, 28)])
    second = replay.run(SYSTEM + seq(300, 12), [7], [Retain(P_END, 28)])
    third = replay.run(SYSTEM + seq(600, 12), [7], [Retain(P_END, 28)])
    assert first.hit.joint == 0 and first.hit.junction == 0
    assert second.hit.attention == 16 and second.hit.joint == 0 and second.hit.junction == 16
    assert 16 in [s.position for s in second.created]  # the junction's state, kept reactively
    assert third.hit.joint == 16
    assert third.hit.state.labels == ("reactive",) and third.hit.state.creator == 1


def test_sub_block_hits_need_an_attention_alias_and_a_state_at_the_same_unit(make_cache):
    replay = Replay(make_cache(geometry(block=8, unit=2)))
    prompt = SYSTEM + seq(1, 6)  # n = 22: P_end -> unit position 20, block twin 16
    first = replay.run(prompt, [7], [Retain(P_END, len(prompt))])
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
    expected = {  # (unit, kept endpoint) -> (joint hit, the state's position label)
        (1, P_END): 24,  # the unit state at 28 holds "<think>": only its block twin at 24 survives
        (1, U_END): 25,
        (8, P_END): 24,  # floored to the block, P_end lands before the generation prompt
        (8, U_END): 24,
    }
    for (unit, kind), joint in expected.items():
        replay = Replay(make_cache(geometry(block=8, unit=unit)))
        logical = len(prompt1) if kind is P_END else 25
        replay.run(prompt1, output1, [Retain(kind, logical)])
        hit = replay.run(prompt2, [1, 2]).hit
        assert hit.joint == joint, (unit, kind)
        assert hit.state.labels == (kind.value,)


def test_decode_end_is_rejected_when_reasoning_is_dropped_and_input_end_is_taken_instead(make_cache):
    header, think, newline, stop = [9001, 9002], [9003], [9004], [9999]
    user1, answer, user2 = seq(10, 8), seq(60, 5), seq(80, 8)
    prompt1 = SYSTEM + user1 + header + think + newline
    output1 = [*seq(40, 10), 9005, *answer, *stop]
    d_end = len(prompt1) + len(output1) - 1
    kept = (
        prompt1 + output1[:-1] + stop + newline + user2 + header + think + newline
    )  # reasoning kept in history
    dropped = SYSTEM + user1 + header + answer + stop + newline + user2 + header + think + newline
    both = [Retain(U_END, 24), Retain(D_END, d_end)]

    replay = Replay(make_cache(geometry(block=8, unit=1)))
    replay.run(prompt1, output1, both)
    hit = replay.run(dropped, [1, 2]).hit
    assert hit.joint == 24 and hit.state.labels == ("input_end",)

    for output_at_unit, joint in ((False, 40), (True, d_end)):  # output states: last block boundary, or unit
        replay = Replay(make_cache(geometry(block=8, unit=1), output_at_unit=output_at_unit))
        replay.run(prompt1, output1, both)
        hit = replay.run(kept, [1, 2]).hit
        assert hit.joint == joint and hit.state.labels == ("decode_end",)


def test_candidates_that_floor_to_one_position_make_one_state(make_cache):
    replay = Replay(make_cache())
    prompt = SYSTEM + seq(1, 12)  # n = 28: U_end 26 and P_end 27 both floor to 24
    admission = replay.run(prompt, [7], [Retain(U_END, 26), Retain(P_END, 28)])
    assert admission.plan.candidates == 2 and admission.plan.collapsed == 1
    assert [(s.position, s.labels) for s in admission.created] == [(24, ("input_end", "prompt_end"))]


def test_a_policy_state_inside_a_block_forces_a_scheduler_split(make_cache):
    cache = make_cache(geometry(block=8, unit=1))
    replay = Replay(cache)
    prompt = SYSTEM + seq(1, 12)  # n = 28, native stops at 24 (last block) and 27 (tail)
    assert replay.run(prompt, [7], [Retain(P_END, 28)]).forced_splits == 0
    assert replay.run(seq(500, 28), [7], [Retain(U_END, 26)]).forced_splits == 1  # 26; its twin 24 is native
    assert replay.run(seq(900, 28), [7], [Retain(U_END, 21)]).forced_splits == 2  # 21 and its twin 16


def test_states_are_never_found_beyond_the_prefix_they_represent(make_cache):
    replay = Replay(make_cache(geometry(block=8, unit=1)))
    prompt = SYSTEM + seq(1, 12)
    replay.run(prompt, [7], [Retain(U_END, 22)])
    changed = SYSTEM + seq(1, 5) + [4242] + seq(7, 6)  # differs at 21, one token before the state
    hit = replay.run(changed, [7]).hit
    assert hit.attention == 16  # the alias at 22 names a prefix this request does not have
    assert hit.joint == 16 and hit.state.position == 16  # the block twin of U_end


def test_under_equal_capacity_states_and_blocks_evict_each_other_in_lru_order(make_cache):
    cache = make_cache(capacity=1000)  # a block costs 100 bytes, a state or running state 200
    replay = Replay(cache)
    replay.run(SYSTEM + seq(1, 12), [7], [Retain(P_END, 28)])
    # cached now, oldest first: the P_end state (freed first), then blocks 24, 16, 8 (tail first)
    assert cache.working.used == 500
    replay.run(seq(300, 28), [7], [Retain(P_END, 28)])
    assert dict(cache.stats.evictions) == {("state", "scratch"): 1, ("block", "state"): 1}
    assert [e.position for e in cache.stats.evicted_states] == [24]
    assert cache.stats.evicted_states[0].hits == 0  # displaced without ever serving a hit
    assert cache.lookup(CacheRequest.from_tokens(9, SYSTEM + seq(1, 12), 28, replay.hasher)).attention == 16


def test_under_an_equal_checkpoint_budget_states_only_displace_states(make_cache):
    cache = make_cache(capacity=1000, checkpoint_budget_bytes=400)  # two states' worth
    replay = Replay(cache)
    for start in (1, 300, 600):
        replay.run(SYSTEM + seq(start, 12), [7], [Retain(P_END, 28)])
        assert cache.checkpoints.used <= 400
    victims = {victim for victim, _ in cache.stats.evictions}
    causes = {(victim, cause) for victim, cause in cache.stats.evictions}
    assert ("state", "state") in causes
    assert all(cause != "state" for victim, cause in causes if victim == "block")
    assert victims <= {"state", "block"}
    survivors = sorted(s.creator for s in cache.live_states())
    assert survivors == [1, 2]  # the oldest state went first


def test_an_entry_held_by_a_request_in_flight_is_never_evicted(make_cache):
    cache = make_cache(capacity=700)
    hasher = PrefixHasher(8)
    first = CacheRequest.from_tokens(0, SYSTEM + seq(1, 12) + [7], 28, hasher)
    cache.admit(first, [Retain(P_END, 28)], now=0.0)  # 4 blocks + running state + P_end state = 800 bytes
    assert cache.working.overcommits == 1  # nothing was evictable: a real scheduler would have waited
    cache.check_invariants()
    cache.finish(0, now=1.0)


def test_an_output_that_crosses_no_block_boundary_leaves_no_block_aligned_decode_state(make_cache):
    replay = Replay(make_cache(geometry(block=8, unit=1)))
    prompt = SYSTEM + seq(1, 10)  # n = 26; output ends at 30, before the next block boundary (32)
    admission = replay.run(prompt, seq(70, 5), [Retain(D_END, 30)])
    assert admission.plan.states == ()
    assert replay.run(prompt + seq(70, 5) + seq(90, 4), [1]).hit.joint == 0
