"""The retention policies (``boundary.checkpoints.policies``) and their use on stream requests.

Positions are computed by hand: block 64, unit 16 unless a test says otherwise; P_end = 95
(P_end's anchor 94 -> unit 80, block twin 64), U_end = 90 (-> 80), D_end = 149 (-> block 128,
unit 144).
"""

from __future__ import annotations

from array import array
from dataclasses import replace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from boundary.checkpoints.policies import RULES, decide, may_keep_decode, rule_for
from boundary.checkpoints.retention import (
    Decision,
    DecodeStates,
    EngineGeometry,
    Phase,
    RequestBoundaries,
    SessionVariant,
    Variant,
    capped_d_end,
)
from boundary.experiment import policies
from boundary.experiment.policies import boundaries, keeps_decode, policy
from boundary.experiment.stream import Continuation, StreamRequest

G = EngineGeometry(block_size=64, unit=16)


def kept(variant: str, b: RequestBoundaries, g: EngineGeometry = G) -> list[tuple[int, tuple[str, ...]]]:
    return [(k.position, tuple(x.value for x in k.kinds)) for k in decide(variant, b, g).keeps]


def check_phases(admission: Decision, finish: Decision) -> None:
    """The two-phase invariant: every prefill keep at finish was a prefill keep at admission."""
    missing = set(finish.prefill_positions) - set(admission.prefill_positions)
    if missing:
        raise AssertionError(f"prefill states decided only at finish: {sorted(missing)}")


FULL = RequestBoundaries(p_end=95, u_end=90, d_end=149)


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("main_sparse", [(64, ("prompt_end_block",)), (80, ("prompt_end",))]),
        ("input_end", [(64, ("prompt_end_block",)), (80, ("input_end",))]),
        ("decode_end", [(64, ("prompt_end_block",)), (128, ("decode_end",))]),
        ("both", [(64, ("prompt_end_block",)), (80, ("input_end",)), (128, ("decode_end",))]),
    ],
)
def test_the_seed_variants_keep_exactly_their_endpoints_and_the_labelled_twin(variant, expected):
    assert kept(variant, FULL) == expected


def test_without_the_upstream_twin_a_variant_keeps_only_its_endpoints():
    bare = EngineGeometry(64, 16, upstream_twin=False)
    assert kept("input_end", FULL, bare) == [(80, ("input_end",))]
    assert kept("decode_end", RequestBoundaries(95, 90, 120), bare) == []  # 120 -> 64, inside the prompt


def test_at_unit_equal_block_p_end_is_its_own_twin():
    g = EngineGeometry(64, 64)
    assert kept("main_sparse", FULL, g) == [(64, ("prompt_end", "prompt_end_block"))]
    assert kept("input_end", FULL, g) == [(64, ("input_end", "prompt_end_block"))]


def test_with_exported_prompt_checkpoints_the_twin_is_p_ends_unit_tail():
    # GDN on FlashInfer exports the prompt checkpoint at the unit: upstream keeps P_end's tail
    exported = EngineGeometry(64, 16, exported_twin=True)
    assert kept("decode_end", FULL, exported) == [(80, ("prompt_end_block",)), (128, ("decode_end",))]
    assert kept("main_sparse", FULL, exported) == [(80, ("prompt_end", "prompt_end_block"))]


def test_decode_states_decide_where_d_end_exists():
    unit = EngineGeometry(64, 16, DecodeStates.UNIT)
    none = EngineGeometry(64, 16, DecodeStates.NONE)
    assert kept("decode_end", FULL, unit)[-1] == (144, ("decode_end",))
    assert kept("decode_end", FULL, none) == [(64, ("prompt_end_block",))]
    short = RequestBoundaries(95, 90, 110)  # no block boundary crossed while decoding
    assert kept("decode_end", short) == [(64, ("prompt_end_block",))]
    assert kept("decode_end", short, unit)[-1] == (96, ("decode_end",))  # after P_end: an output state


def test_input_end_falls_back_to_prompt_end_when_the_template_cannot_expose_it():
    assert kept("input_end", RequestBoundaries(95, None, 149)) == [
        (64, ("prompt_end_block",)),
        (80, ("prompt_end",)),
    ]


def test_chat_aware_takes_u_end_when_the_output_will_not_round_trip():
    b = RequestBoundaries(95, 90, 149, round_trip=0.0)
    assert kept("chat_aware", b) == [(64, ("prompt_end_block",)), (80, ("input_end",))]


def test_chat_aware_keeps_nothing_beyond_the_twin_where_nothing_predicts_it_pays():
    b = RequestBoundaries(95, 70, 149, round_trip=0.0)  # U_end 70 -> 64 = the twin
    # U_end adds nothing over the twin; P_end (80) and D_end (128) are predicted not to reach the
    # next request: no state is spent on them (the twin is kept anyway)
    assert kept("chat_aware", b) == [(64, ("prompt_end_block",))]
    assert kept("chat_aware", RequestBoundaries(95, 70, None, round_trip=0.0)) == [
        (64, ("prompt_end_block",))
    ]
    assert kept("chat_aware", RequestBoundaries(95, 70, 110, round_trip=0.0)) == [(64, ("prompt_end_block",))]


def test_chat_aware_counts_a_twin_at_the_stability_horizon_as_certainly_reused():
    """P_end 95 (twin 64), U_end 90 (-> 80), D_end 149 (-> 128), round trip 0.3, and a horizon
    at 64: the twin sits exactly at the horizon, so it is reused for certain (base 64); U_end's
    state lies beyond the horizon, so the next request does not reach it (64). Expected tokens:
    U_end 64; P_end 0.3 x 80 + 0.7 x 64 = 68.8; D_end 0.3 x 128 + 0.7 x 64 = 83.2: D_end."""
    b = RequestBoundaries(95, 90, 149, round_trip=0.3, horizon=64)
    assert kept("chat_aware", b) == [(64, ("prompt_end_block",)), (128, ("decode_end",))]


G1 = EngineGeometry(block_size=64, unit=1)  # P_end 95 -> 94, U_end 90 -> 90, twin 64


def test_chat_aware_keeps_u_end_not_p_end_on_a_request_that_opens_a_tool_loop():
    """At unit 1 P_end's state (94) lies past U_end's (90) and the output round-trips: P_end is
    worth 94 tokens to the next request, U_end 90. On a request whose prompt ends in a user
    message and whose output calls a tool, the loop keeps reasoning the next user turn strips,
    so P_end is no candidate there: U_end, the state that user turn still finds."""
    opens = RequestBoundaries(95, 90, None, round_trip=1.0, user_turn=True, tool_call=True)
    assert kept("chat_aware", opens, G1) == [(64, ("prompt_end_block",)), (90, ("input_end",))]
    unknown = RequestBoundaries(95, 90, None, round_trip=1.0, user_turn=True)  # tool call unknown
    assert kept("chat_aware", unknown, G1)[-1] == (90, ("input_end",))
    chat = RequestBoundaries(95, 90, None, round_trip=1.0, user_turn=True, tool_call=False)
    assert kept("chat_aware", chat, G1)[-1] == (94, ("prompt_end",))
    in_loop = RequestBoundaries(95, 90, None, round_trip=1.0, user_turn=False, tool_call=True)
    assert kept("chat_aware", in_loop, G1)[-1] == (94, ("prompt_end",))


def test_chat_aware_reads_the_horizon_for_each_candidates_reach():
    """Unit 16: twin 64, U_end 80, P_end 80, D_end 149 -> 128; round trip 0."""
    # U_end's state (80) beyond a horizon at 70: not reached; the twin (64 <= 70) is: nothing pays
    assert kept("chat_aware", RequestBoundaries(95, 90, 149, round_trip=0.0, horizon=70)) == [
        (64, ("prompt_end_block",))
    ]
    # without a horizon U_end is a prefix of the next request
    assert kept("chat_aware", RequestBoundaries(95, 90, 149, round_trip=0.0))[-1] == (80, ("input_end",))
    # D_end's state (128) at or before a horizon at 140: the next request keeps it, verdict or not
    assert kept("chat_aware", RequestBoundaries(95, 90, 149, round_trip=0.0, horizon=140))[-1] == (
        128,
        ("decode_end",),
    )
    # a horizon at 127 stops one token short of it: U_end (80 <= 127) is the best certain state
    assert kept("chat_aware", RequestBoundaries(95, 90, 149, round_trip=0.0, horizon=127))[-1] == (
        80,
        ("input_end",),
    )


def test_chat_aware_takes_p_end_at_or_before_the_horizon_without_a_round_trip():
    """Unit 1, reasoning dropped (no round trip): the next request keeps the assistant header
    up to the horizon. P_end's state (94) at a horizon of 94 is certain and deeper than U_end's
    (90); at a horizon of 93 it is not reached."""
    b = RequestBoundaries(95, 90, None, round_trip=0.0, horizon=94, user_turn=True, tool_call=False)
    assert kept("chat_aware", b, G1)[-1] == (94, ("prompt_end",))
    short = RequestBoundaries(95, 90, None, round_trip=0.0, horizon=93, user_turn=True, tool_call=False)
    assert kept("chat_aware", short, G1)[-1] == (90, ("input_end",))


def test_chat_aware_takes_d_end_where_it_materializes_past_p_end_and_p_end_where_it_does_not():
    assert kept("chat_aware", RequestBoundaries(95, 90, 149, round_trip=1.0))[-1] == (128, ("decode_end",))
    # D_end 120 has no decode state (its block floor is in the prompt): P_end stands in, at 80
    assert kept("chat_aware", RequestBoundaries(95, 50, 120, round_trip=1.0))[-1] == (80, ("prompt_end",))


def test_chat_aware_decides_a_prompt_side_stand_in_at_admission():
    admission = decide("chat_aware", RequestBoundaries(95, 50, None, round_trip=1.0), G)
    assert [(k.position, k.phase) for k in admission.keeps] == [(64, Phase.PREFILL), (80, Phase.PREFILL)]


def test_input_end_at_the_prompt_end_lands_where_prompt_end_does():
    # no generation suffix (U_end == P_end = 33): the last prompt token is recomputed, so the
    # state is at 32 at unit 1 and 32 at unit 16, as P_end's would be.
    assert kept("input_end", RequestBoundaries(33, 33), EngineGeometry(64, 1))[0][0] == 32
    assert kept("input_end", RequestBoundaries(32, 32), EngineGeometry(64, 16))[0][0] == 16


def test_horizon_keeps_the_deepest_position_at_or_before_the_horizon():
    assert kept("horizon", RequestBoundaries(95, 70, 149, horizon=93))[-1] == (80, ("prompt_end",))
    assert kept("horizon", RequestBoundaries(95, 70, 149, horizon=75)) == [
        (64, ("input_end", "prompt_end_block"))
    ]
    assert kept("horizon", RequestBoundaries(95, 70, 149, horizon=140))[-1] == (128, ("decode_end",))
    unit = EngineGeometry(64, 16, DecodeStates.UNIT)
    assert kept("horizon", RequestBoundaries(95, 70, 149, horizon=140), unit)[-1] == (128, ("decode_end",))
    assert kept("horizon", RequestBoundaries(95, 70, 149, horizon=149), unit)[-1] == (144, ("decode_end",))


@given(
    p_end=st.integers(1, 3000),
    u_back=st.integers(0, 3000),
    output=st.integers(0, 3000),
    round_trip=st.sampled_from([None, 0.0, 0.5, 1.0]),
    horizon=st.one_of(st.none(), st.integers(0, 7000)),
    block=st.sampled_from([64, 528, 1056]),
    units=st.sampled_from([1, 4, 16, None]),
    states=st.sampled_from(list(DecodeStates)),
    twin=st.booleans(),
    variant=st.sampled_from(list(Variant)),
)
@example(  # U_end == P_end at unit 1: the state lands on P_end's anchor, inside the prompt
    p_end=1,
    u_back=0,
    output=0,
    round_trip=None,
    horizon=None,
    block=64,
    units=1,
    states=DecodeStates.BLOCK,
    twin=True,
    variant=Variant.INPUT_END,
)
def test_every_decision_is_materializable_and_finish_adds_no_prefill_state(
    p_end, u_back, output, round_trip, horizon, block, units, states, twin, variant
):
    unit = units or block
    if block % unit:
        unit = block
    g = EngineGeometry(block, unit, states, twin)
    u_end = max(p_end - u_back, 0)
    admission = decide(variant, RequestBoundaries(p_end, u_end, None, round_trip, horizon), g)
    finish = decide(variant, RequestBoundaries(p_end, u_end, p_end + output, round_trip, horizon), g)
    check_phases(admission, finish)
    for keep in (*admission.keeps, *finish.keeps):
        assert keep.position > 0
        if keep.phase is Phase.PREFILL:
            assert keep.position < p_end and keep.position % unit == 0
        else:
            assert p_end <= keep.position <= p_end + output
            assert keep.position % (block if states is DecodeStates.BLOCK else unit) == 0
    if variant in (Variant.CHAT_AWARE, Variant.HORIZON, Variant.MAIN_SPARSE, Variant.INPUT_END):
        assert len([k for k in finish.keeps if set(k.kinds) != {"prompt_end_block"}]) <= 1
    if variant is Variant.HORIZON and horizon is not None:
        deepest = max((k.position for k in finish.keeps if "prompt_end_block" not in k.kinds), default=0)
        assert deepest <= max(horizon, 0) or deepest < p_end  # never beyond the horizon in the output


def stream_request(**kw) -> StreamRequest:
    fields = dict(
        rid=0,
        session="s",
        turn=0,
        tokens=array("I", range(150)),
        num_prompt_tokens=95,
        u_end=90,
        d_end=149,
        continuation=Continuation.FIRST,
    )
    return StreamRequest(**(fields | kw))


def test_a_stream_request_reaches_the_policy_with_its_verdict_and_horizon():
    r = stream_request(tool_call=True, horizon=120)
    assert boundaries(r, finished=False) == RequestBoundaries(
        95, 90, None, 1.0, 120, user_turn=True, tool_call=True
    )
    assert boundaries(r, finished=True).d_end == 149
    assert boundaries(stream_request(tool_call=True, round_trip=False), finished=True).round_trip == 0.0
    assert policy("chat_aware").finish(r, G) == decide("chat_aware", boundaries(r, finished=True), G)


def test_an_unknown_policy_is_named_in_the_error():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        policy("nope")


def test_d_end_is_capped_at_the_last_computed_token_and_never_before_p_end():
    assert capped_d_end(149, 150, 95) == 149  # a trailing stop token: the committed end itself
    assert capped_d_end(150, 150, 95) == 149  # length-capped: the last sampled token has no state
    assert capped_d_end(95, 96, 95) == 95
    assert capped_d_end(96, 96, 95) == 95  # one sampled token, never fed back: P_end


@given(
    p_end=st.integers(1, 3000),
    u_back=st.integers(0, 3000),
    outputs=st.tuples(st.integers(0, 3000), st.integers(0, 3000)),
    round_trip=st.sampled_from([None, 0.0, 0.5, 1.0]),
    horizon=st.one_of(st.none(), st.integers(0, 7000)),
    block=st.sampled_from([64, 528]),
    unit=st.sampled_from([1, 16]),
    states=st.sampled_from(list(DecodeStates)),
    twin=st.booleans(),
    variant=st.sampled_from([*Variant, *SessionVariant]),
)
# Found by a random draw: past the horizon (192) a D_end of 256 or more lost the decode state
# at 192 that a D_end of 193-255 kept, though its decode pass crossed 192 as well.
@example(
    p_end=140,
    u_back=0,
    outputs=(60, 200),
    round_trip=None,
    horizon=192,
    block=64,
    unit=1,
    states=DecodeStates.BLOCK,
    twin=True,
    variant=Variant.CHAT_AWARE,
)
def test_may_keep_decode_says_yes_whenever_some_d_end_keeps_a_decode_state(
    p_end, u_back, outputs, round_trip, horizon, block, unit, states, twin, variant
):
    """The admission-time answer holds for every D_end the finish decision may see: on each
    side of the stability horizon decisions keep a decode state monotonically in D_end, and
    ``may_keep_decode`` never says no to one."""
    g = EngineGeometry(block, unit, states, twin)
    b = RequestBoundaries(p_end, max(p_end - u_back, 0), None, round_trip, horizon, user_turn=True)

    def keeps_at(d_end: int) -> bool:
        return any(k.phase is Phase.DECODE for k in decide(variant, replace(b, d_end=d_end), g).keeps)

    lo, hi = sorted(outputs)
    shallow, deep = keeps_at(p_end + lo), keeps_at(p_end + hi)
    if horizon is None or p_end + hi <= horizon or p_end + lo > horizon:
        assert deep or not shallow  # a deeper D_end on the same side never loses the keep
    if shallow or deep:
        assert may_keep_decode(variant, b, g)
    if states is DecodeStates.NONE or variant in (Variant.MAIN_SPARSE, Variant.INPUT_END):
        assert not may_keep_decode(variant, b, g)


def test_a_d_end_past_the_horizon_keeps_the_decode_state_at_the_horizon():
    """chat_aware counts a D_end at or before the horizon as certainly reused and one past it
    by the verdict (none here); past it, the decode state the pass left at the horizon is still
    certainly reused, so a deeper D_end keeps that one instead of falling back to U_end."""
    g = EngineGeometry(64, 1, DecodeStates.BLOCK, True)
    b = RequestBoundaries(140, 140, None, None, 192, user_turn=True)
    assert kept("chat_aware", replace(b, d_end=200), g)[-1] == (192, ("decode_end",))
    assert kept("chat_aware", replace(b, d_end=300), g)[-1] == (192, ("decode_end",))
    assert kept("chat_aware", replace(b, d_end=300, round_trip=1.0), g)[-1] == (256, ("decode_end",))
    assert kept("chat_aware", replace(b, d_end=150), g)[-1] == (139, ("input_end",))  # no decode state yet
    assert may_keep_decode("chat_aware", b, g)


def test_chat_aware_without_a_prediction_holds_no_decode_state():
    """U_end = 70 lands on the twin (64, certainly reused) and nothing predicts that D_end pays
    (verdict 0, no horizon past P_end): the one state stays the twin and no decode block is
    held; a verdict > 0 (or a horizon past P_end) holds them."""
    b = RequestBoundaries(p_end=95, u_end=70, round_trip=0.0)
    assert kept("chat_aware", replace(b, d_end=149)) == [(64, ("prompt_end_block",))]
    assert not may_keep_decode("chat_aware", b, G)
    assert may_keep_decode("chat_aware", replace(b, round_trip=1.0), G)
    assert kept("chat_aware", replace(b, d_end=149, round_trip=1.0))[-1] == (128, ("decode_end",))
    assert not may_keep_decode("horizon", replace(b, horizon=94), G)
    assert may_keep_decode("horizon", replace(b, horizon=200), G)


def test_the_experiment_holds_decode_states_by_the_admission_time_rule():
    for round_trip in (False, True):
        r = stream_request(u_end=70, round_trip=round_trip)
        assert keeps_decode(policy("chat_aware"), r, G) is may_keep_decode(
            "chat_aware", boundaries(r, finished=False), G
        )
        assert keeps_decode(policy("chat_aware"), r, G) is round_trip
    assert not keeps_decode(policy("input_end"), stream_request(u_end=70, round_trip=True), G)


def test_every_public_policy_name_has_one_rule_going_by_it():
    names = [*(v.value for v in Variant), *(v.value for v in SessionVariant)]
    assert list(RULES) == names
    assert all(rule_for(name).variant == name for name in names)
    assert rule_for(Variant.BOTH) is RULES["both"]
    with pytest.raises(ValueError, match="unknown retention policy 'oracle'"):
        decide("oracle", FULL, G)


def test_the_experiments_policy_names_are_the_variants_values():
    assert tuple(v.value for v in Variant) == policies.POLICIES
    assert policies.PHASE_ONE == ("main_sparse", "input_end", "decode_end", "both")
    assert all(policy(name).variant is Variant(name) for name in policies.POLICIES)
