"""Producer age and the chain fallback (``SessionVariant.CHAIN_FALLBACK``), worked by hand on
one session: a user turn, a tool continuation that keeps the reasoning, then a user turn
that strips it."""

from __future__ import annotations

from array import array

from boundary.cache import CacheConfig
from boundary.cache.retention import engine_geometry
from boundary.checkpoints.kinds import CheckpointKind
from boundary.checkpoints.policies import decide
from boundary.checkpoints.retention import DecodeStates, EngineGeometry, Phase, RequestBoundaries, Variant
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.plan import producer_age_by_kind
from boundary.experiment.policies import ALL_NAMES, policy
from boundary.experiment.presets import QWEN3_5_35B_A3B
from boundary.experiment.replay import BudgetMode, event_order, replay, replay_oracle
from boundary.experiment.stream import Continuation, Stream, StreamRequest, cache_requests
from tests.cache.conftest import geometry

S, U1, GEN = list(range(1, 11)), list(range(11, 16)), [99]
R0, C0, STOP = list(range(20, 25)), list(range(30, 33)), [2]
T0, R1, A1, U2 = list(range(40, 45)), list(range(50, 55)), list(range(60, 63)), list(range(70, 75))


def _request(rid: int, turn: int, prompt: list[int], output: list[int], u_end: int, kind: Continuation):
    tokens = prompt + output
    return StreamRequest(
        rid=rid,
        session="s",
        turn=turn,
        tokens=array("I", tokens),
        num_prompt_tokens=len(prompt),
        u_end=u_end,
        d_end=len(tokens) - 1,
        continuation=kind,
        tool_call=turn == 0,
        arrival=2.0 * rid,
        finish=2.0 * rid + 1,
    )


def chain() -> list[StreamRequest]:
    """r0: S U1 GEN | R0 C0 STOP (U_end 15, P_end 16, D_end 24).
    r1 (tool result, reasoning kept): r0's tokens up to D_end, T0, GEN | R1 A1 STOP
    (U_end 29, P_end 30, D_end 38).
    r2 (next user turn, reasoning stripped): S U1 GEN C0 T0 A1 U2 GEN: shares only
    S U1 GEN (16 tokens) with r0 and nothing past r0's prompt with r1."""
    r0 = _request(0, 0, S + U1 + GEN, R0 + C0 + STOP, 15, Continuation.FIRST)
    p1 = S + U1 + GEN + R0 + C0 + T0 + GEN
    r1 = _request(1, 1, p1, R1 + A1 + STOP, 29, Continuation.TOOL)
    p2 = S + U1 + GEN + C0 + T0 + A1 + U2 + GEN
    r2 = _request(2, 2, p2, [80, *STOP], 33, Continuation.USER)
    return [r0, r1, r2]


def _replay(name: str, **config):
    """Unit 1, a 64-token block (no block twin below 64, no whole block), decode states at
    every unit, unlimited memory unless ``config`` says otherwise."""
    g = geometry(block=64, unit=1)
    stream = Stream("chain", {}, chain())
    requests = cache_requests(stream, 1)
    events = event_order(requests)
    oracle = replay_oracle(requests, 1, events)
    return replay(
        stream,
        requests,
        policy(name),
        CacheConfig(g, **{"capacity_bytes": float("inf"), **config}),
        PrefillCostModel(QWEN3_5_35B_A3B),
        oracle,
        budget=BudgetMode.EQUAL_CAPACITY,
        events=events,
        geometry=engine_geometry(g, DecodeStates.UNIT),
        check_every=1,
    )


def test_chain_fallback_keeps_u_end_only_on_a_user_turn_held_until_the_next_one():
    """On a user-ended request: decode_end's D_end plus U_end at 15, held; on a tool
    continuation: decode_end's decision alone."""
    g = EngineGeometry(64, 1, DecodeStates.UNIT)
    user = decide("chain_fallback", RequestBoundaries(16, 15, 24, 1.0, user_turn=True), g)
    assert [(k.position, k.kinds, k.phase, k.until_next_user_turn) for k in user.keeps] == [
        (15, (CheckpointKind.INPUT_END,), Phase.PREFILL, True),
        (24, (CheckpointKind.DECODE_END,), Phase.DECODE, False),
    ]
    tool = RequestBoundaries(30, 29, 38, 1.0, user_turn=False)
    assert decide("chain_fallback", tool, g) == decide(Variant.DECODE_END, tool, g)
    assert "chain_fallback" in ALL_NAMES and "chain_fallback" not in tuple(Variant)


def test_the_chains_first_u_end_serves_the_next_user_turn_two_requests_later():
    """decode_end: r1 resumes from r0's D_end (24 tokens, producer the previous request); r2
    finds no D_end that is a prefix (the reasoning R0 is gone): 0. chain_fallback: r1 the same
    24; r2 resumes from r0's held U_end, 15 tokens, produced two requests earlier."""
    decode_end, fallback = _replay("decode_end"), _replay("chain_fallback")
    assert [r.joint for r in decode_end.records] == [0, 24, 0]
    assert [r.joint for r in fallback.records] == [0, 24, 15]
    r2 = fallback.records[2]
    assert (r2.served_by, r2.producer_age) == ("input_end", "two_back")
    assert producer_age_by_kind(fallback.records) == {
        "decode_end": {"previous": 1, "two_back": 0, "older": 0, "other_session": 0},
        "input_end": {"previous": 0, "two_back": 1, "older": 0, "other_session": 0},
    }


def test_the_held_u_end_is_executed_by_the_page_by_page_pool_too():
    """Under engine_steps (a 100-page pool, a state two pages) the pin holds and releases
    through the same free queue; the pool's invariants hold after every event and r2 still
    resumes from r0's held U_end, two requests old. The pool keeps decode states only at block
    boundaries (vLLM's), so r0's D_end at 24 inside the 64-token block is not kept and r1 too
    resumes from r0's U_end at 15, the previous request."""
    run = _replay("chain_fallback", capacity_bytes=10_000.0, engine_steps=True)
    assert [(r.joint, r.served_by, r.producer_age) for r in run.records] == [
        (0, None, None),
        (15, "input_end", "previous"),
        (15, "input_end", "two_back"),
    ]
