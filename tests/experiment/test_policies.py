"""Retention policies: one decision each."""

from __future__ import annotations

from array import array

import pytest

from boundary.checkpoints import CheckpointKind as K
from boundary.experiment.policies import ChatAware, policy
from boundary.experiment.stream import Continuation, StreamRequest


def request(
    *, u_end: int | None = 90, tool_call: bool = False, round_trip: bool | None = None
) -> StreamRequest:
    return StreamRequest(
        rid=0,
        session="s",
        turn=0,
        tokens=array("I", range(150)),
        num_prompt_tokens=95,
        u_end=u_end,
        d_end=149,
        continuation=Continuation.FIRST,
        tool_call=tool_call,
        round_trip=round_trip,
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("main_sparse", [(K.PROMPT_END, 95)]),
        ("input_end", [(K.INPUT_END, 90)]),
        ("decode_end", [(K.DECODE_END, 149)]),
        ("both", [(K.INPUT_END, 90), (K.DECODE_END, 149)]),
        ("chat_aware", [(K.INPUT_END, 90)]),
    ],
)
def test_each_policy_names_its_endpoints(name, expected):
    assert [(r.kind, r.logical) for r in policy(name).retain(request())] == expected


def test_input_end_falls_back_to_prompt_end_when_the_template_cannot_expose_it():
    assert [(r.kind, r.logical) for r in policy("input_end").retain(request(u_end=None))] == [
        (K.PROMPT_END, 95)
    ]


def test_chat_aware_follows_the_verifier_and_otherwise_the_tool_call_rule():
    aware = policy("chat_aware")
    assert aware.retain(request(tool_call=True))[0].kind is K.DECODE_END
    assert aware.retain(request(tool_call=True, round_trip=False))[0].kind is K.INPUT_END
    assert aware.retain(request(tool_call=False, round_trip=True))[0].kind is K.DECODE_END
    assert ChatAware(predictor=lambda r: False).retain(request(tool_call=True))[0].kind is K.INPUT_END


def test_an_unknown_policy_is_named_in_the_error():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        policy("nope")
