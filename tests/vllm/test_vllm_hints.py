"""Checkpoint hints in ``vllm_xargs``: what the frontend writes is what the engine reads back."""

from __future__ import annotations

from boundary_vllm.hints import (
    INPUT_END_KEY,
    POLICY_KEY,
    PROMPT_END_KEY,
    HintStatus,
    decode_hints,
    encode_hints,
)


def test_hints_round_trip_through_extra_args():
    hints = decode_hints(encode_hints(1324, 1329), 1329)
    assert hints.status is HintStatus.ACCEPTED and hints.input_end == 1324


def test_a_request_without_hints_is_absent_not_rejected():
    assert decode_hints(None, 10).status is HintStatus.ABSENT
    assert decode_hints({"kv_transfer_params": {}}, 10).status is HintStatus.ABSENT
    assert encode_hints(None, 10) == {}


def test_hints_for_a_different_prompt_length_are_rejected_with_the_reason():
    hints = decode_hints(encode_hints(1324, 1329), 1200)
    assert hints.status is HintStatus.REJECTED
    assert hints.reason.startswith(f"vllm_xargs.{PROMPT_END_KEY}: ")
    assert "1329" in hints.reason and "1200" in hints.reason


def test_malformed_positions_are_rejected_never_raised():
    for bad in ("1324", 13.5, True, [1324]):
        hints = decode_hints({INPUT_END_KEY: bad, PROMPT_END_KEY: 1329}, 1329)
        assert hints.status is HintStatus.REJECTED
        assert hints.reason.startswith(f"vllm_xargs.{INPUT_END_KEY}: expected int")
    for outside in (0, -3, 1330):
        hints = decode_hints({INPUT_END_KEY: outside, PROMPT_END_KEY: 1329}, 1329)
        assert hints.status is HintStatus.REJECTED and "outside the prompt" in hints.reason


def test_a_requested_policy_is_accepted_only_among_the_allowed_names():
    extra = encode_hints(1324, 1329, policy="input_end")
    assert decode_hints(extra, 1329, policies=["input_end", "both"]).policy == "input_end"
    refused = decode_hints(extra, 1329, policies=["both"])
    assert refused.status is HintStatus.REJECTED
    assert refused.reason == f"vllm_xargs.{POLICY_KEY}: 'input_end' is not one of ['both']"


def test_a_requested_policy_an_engine_does_not_allow_is_ignored_not_the_boundaries():
    extra = encode_hints(1324, 1329, policy="horizon", horizon=1324)
    hints = decode_hints(extra, 1329)  # per-request policies off
    assert hints.status is HintStatus.ACCEPTED and hints.policy is None
    assert (hints.input_end, hints.horizon) == (1324, 1324)
    assert hints.reason == (
        f"vllm_xargs.{POLICY_KEY}: 'horizon' ignored: this engine's policy applies (request_policy is off)"
    )
