"""Checkpoint hints as they travel in a chat request's ``vllm_xargs``.

Where it sits: between boundaries and the engine: the wire format of the positions ``client`` sends
and ``scheduler`` (also ``replay`` and ``engine_run``, which send them by hand) reads back; it
imports nothing of boundary's.

The frontend renders with boundary and sends the logical positions it found; vLLM copies
``vllm_xargs`` into ``SamplingParams.extra_args``, where the scheduler reads them back. The
engine materializes the positions itself (only it knows its block size). Hints never affect
correctness: a state is keyed by the chained hash of the exact tokens before it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

INPUT_END_KEY = "boundary_input_end"
PROMPT_END_KEY = "boundary_prompt_end"
POLICY_KEY = "boundary_policy"  # optional; honoured only where the engine allows per-request policies
ROUND_TRIP_KEY = "boundary_round_trip"  # optional: probability (0..1) that the output round-trips
HORIZON_KEY = "boundary_horizon"  # optional: the stability horizon (the engine caps it at D_end)
SESSION_KEY = "boundary_session"  # optional: the conversation's id, for recorded traces


class HintStatus(StrEnum):
    ABSENT = "absent"  # the request carries no boundary hints: it is scheduled exactly as upstream
    ACCEPTED = "accepted"
    REJECTED = "rejected"  # present but unusable; ``reason`` says why


@dataclass(frozen=True, slots=True)
class CheckpointHints:
    """What one request asked for. ``input_end`` is set only when ``status`` is ACCEPTED;
    ``policy`` is a policy name the request asked for and the engine allows, if any;
    ``round_trip`` and ``horizon`` are the inputs of ``chat_aware`` and ``horizon`` (None: not
    sent); ``reason``: why hints were rejected, or, for accepted ones, what was ignored (a
    per-request policy the engine does not allow); ``reason_key``: its kind without its values
    (what the engine logs once)."""

    status: HintStatus
    input_end: int | None = None
    reason: str | None = None
    policy: str | None = None
    round_trip: float | None = None
    horizon: int | None = None
    reason_key: str | None = None


def encode_hints(
    input_end: int | None,
    prompt_end: int,
    *,
    policy: str | None = None,
    round_trip: float | None = None,
    horizon: int | None = None,
) -> dict[str, int | float | str]:
    """The ``vllm_xargs`` entries for a rendered prompt (none when U_end is unavailable)."""
    if input_end is None:
        return {}
    hints: dict[str, int | float | str] = {INPUT_END_KEY: int(input_end), PROMPT_END_KEY: int(prompt_end)}
    if policy is not None:
        hints[POLICY_KEY] = policy
    if round_trip is not None:
        hints[ROUND_TRIP_KEY] = float(round_trip)
    if horizon is not None:
        hints[HORIZON_KEY] = int(horizon)
    return hints


def decode_hints(
    extra_args: Mapping[str, Any] | None, num_prompt_tokens: int, *, policies: Collection[str] = ()
) -> CheckpointHints:
    """Read the hints back on the engine side; malformed hints are rejected, never raised.
    ``policies`` are the names a request may ask for: none (per-request policies off) ignores
    a requested policy, with the boundaries still accepted (noted in ``reason``); a name
    outside non-empty ``policies`` is rejected."""
    if not extra_args or INPUT_END_KEY not in extra_args:
        return CheckpointHints(HintStatus.ABSENT)
    policy = extra_args.get(POLICY_KEY)
    ignored: str | None = None
    if policy is not None and not policies:
        off = "this engine's policy applies (request_policy is off)"
        ignored = f"vllm_xargs.{POLICY_KEY}: {policy!r} ignored: {off}"
        policy = None
    if policy is not None and policy not in policies:
        return _rejected(POLICY_KEY, f"{policy!r} is not one of {sorted(policies)}", "not allowed")
    input_end = extra_args[INPUT_END_KEY]
    prompt_end = extra_args.get(PROMPT_END_KEY, num_prompt_tokens)
    for key, value in ((INPUT_END_KEY, input_end), (PROMPT_END_KEY, prompt_end)):
        if type(value) is not int:
            return _rejected(key, f"expected int, got {type(value).__name__}", "not an int")
    if prompt_end != num_prompt_tokens:
        return _rejected(
            PROMPT_END_KEY,
            f"the hints were computed for {prompt_end} prompt tokens but the engine received "
            f"{num_prompt_tokens} (truncated or re-rendered prompt)",
            "prompt length differs",
        )
    if not 0 < input_end <= num_prompt_tokens:
        return _rejected(
            INPUT_END_KEY, f"{input_end} is outside the prompt (1..{num_prompt_tokens})", "outside the prompt"
        )
    round_trip = extra_args.get(ROUND_TRIP_KEY)
    if round_trip is not None and (type(round_trip) not in (int, float) or not 0 <= round_trip <= 1):
        return _rejected(
            ROUND_TRIP_KEY, f"expected a probability in [0, 1], got {round_trip!r}", "not a probability"
        )
    horizon = extra_args.get(HORIZON_KEY)
    if horizon is not None and (type(horizon) is not int or horizon < 0):
        return _rejected(HORIZON_KEY, f"expected a non-negative int, got {horizon!r}", "not a position")
    return CheckpointHints(
        HintStatus.ACCEPTED,
        input_end=input_end,
        policy=policy,
        round_trip=None if round_trip is None else float(round_trip),
        horizon=horizon,
        reason=ignored,
        reason_key=None if ignored is None else f"{POLICY_KEY}: ignored",
    )


def _rejected(key: str, detail: str, kind: str) -> CheckpointHints:
    """A rejection of ``vllm_xargs.<key>``: ``detail`` with the values, ``kind`` without."""
    return CheckpointHints(
        HintStatus.REJECTED, reason=f"vllm_xargs.{key}: {detail}", reason_key=f"{key}: {kind}"
    )
