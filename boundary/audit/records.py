"""The audit's report, as it is written to JSON: per-turn records, the summary, what-if runs.

Where it sits: the audit's output schema, read by ``markdown``, ``plot`` and the CLI; it
imports nothing of the data flow.

Checkpoint kinds are named ``prompt_end`` (P_end), ``input_end`` (U_end), ``decode_end`` (D_end).
Positions are token offsets; ``position`` is where a checkpoint materializes for the unit.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Kind = Literal["prompt_end", "input_end", "decode_end"]
KINDS: tuple[Kind, ...] = ("prompt_end", "input_end", "decode_end")
OutputSource = Literal["text", "token_ids", "message", "next_request", "none"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckpointRecord(_Record):
    """One checkpoint a turn produces; ``reused_by_next`` is None when no request follows."""

    logical: int
    position: int
    reused_by_next: bool | None = None


class ReuseRecord(_Record):
    """The deepest earlier checkpoint a request can resume from, and which turn made it."""

    kind: Kind
    position: int
    producer_turn: int
    producer_age: int  # 1: the previous request


class HorizonRecord(_Record):
    """The predicted stability horizon and, once the session is over, whether it held."""

    position: int
    limit: str | None
    held: bool | None = None  # None: no later request to check against
    slack: int | None = None  # how many tokens beyond it the later requests actually kept (min over them)


class TurnRecord(_Record):
    session: str
    turn: int
    messages: int
    output_source: OutputSource
    output_status: str | None = None
    output_problem: str | None = None
    generated_tokens: int | None = None
    d_end: int | None = None
    checkpoints: dict[Kind, CheckpointRecord]
    next_common_prefix: int | None = None  # token LCP of prompt + generated with the next request
    round_trips: bool | None = None
    diverged_at: int | None = None
    cause: str | None = None
    detail: str | None = None
    tail: str | None = None
    reuses: ReuseRecord | None = (
        None  # what this request resumes from (any earlier checkpoint of the session)
    )
    horizon: HorizonRecord | None = None
    recorded_hit_tokens: int | None = None  # a production record's hit, as the server reported it
    recorded_served_by: str | None = None  # as recorded; "miss" for a recorded miss, "unknown": not reported


class KindSummary(_Record):
    """For turns with a next request: how often this kind's checkpoint is a prefix of it."""

    eligible: int
    reached: int
    rate: float
    mean_reused_tokens: float  # materialized position when reached, else 0; over eligible turns


class HorizonSummary(_Record):
    predicted: int
    checked: int  # turns with a later request
    held: int
    rate: float
    mean_position_share: float  # horizon / (prompt + kept generated), over checked turns
    mean_slack: float


class RecordedHits(_Record):
    """The hits a production trace recorded. Invariant: ``reported + unknown + absent ==
    records``; ``unknown`` hits (the server did not report cached tokens) are never misses."""

    records: int
    reported: int  # a hit length recorded (0 for a miss)
    misses: int  # reported as 0
    unknown: (
        int  # ``served_by: unknown``: the server did not say (vLLM without --enable-prompt-tokens-details)
    )
    absent: int  # no hit recorded at all
    hit_tokens: int  # over the reported ones
    prompt_tokens: int  # over the reported ones


class Summary(_Record):
    sessions: int
    turns: int
    turns_with_next: int
    mean_prompt_tokens: float
    kinds: dict[Kind, KindSummary]
    mean_best_of_turn_tokens: float  # the best of the previous turn's three checkpoints
    mean_reused_tokens: float  # the best over every earlier checkpoint of the session
    producer_age: dict[str, int]  # "1", "2", ..., "none"
    causes: dict[str, int]  # why D_end did not round-trip
    stop_token_rewritten: int  # turns whose trailing stop token the next request writes differently
    output_problems: int
    horizon: HorizonSummary
    recorded_hits: RecordedHits | None = None  # production records only


class WhatIf(_Record):
    """A re-run with a template option or a client habit that could make D_end round-trip."""

    name: str
    kind: Literal["template_option", "client_habit"]
    setting: dict[str, Any]
    doc: str
    applicable: bool
    reason: str | None = None
    summary: Summary | None = None
    decode_end_rate_gain: float | None = None  # in rate points (0..1)
    reused_tokens_gain: float | None = None  # mean reused tokens per turn with a next request


class AuditReport(_Record):
    family: str
    variant: str
    tokenizer: str
    stand_in_tokenizer: bool
    unit: int
    template_kwargs: dict[str, Any]
    habits: dict[str, Any]
    trace: str
    summary: Summary
    what_if: list[WhatIf] = []
    turns: list[TurnRecord] = []
