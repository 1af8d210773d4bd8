"""Audit a production trace (``boundary.trace.records`` production records) as it was recorded.

Where it sits: the report end, after checkpoints: ``boundary.audit.runner`` calls it for a trace
of production records, read by ``boundary.trace.reader``.

A production record carries the token ids the engine saw, not messages: nothing is rendered,
parsed or verified. Per turn the checkpoints are the recorded P_end (the prompt length), U_end
(when the engine recorded one) and D_end (the recorded ``d_end``; without one, the committed
output with its trailing stop token excluded); each is checked against the session's next
prompt by token prefix, exactly as for a rendered trace: a checkpoint at ``n`` is reused when
``tokens[:n]`` is a prefix of the next prompt. ``round_trips`` says whether D_end was. The hit
the server recorded is carried as it is (``recorded_hit_tokens``, ``recorded_served_by``): an
``unknown`` hit (the server did not report cached tokens) stays unknown, never a miss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from boundary.audit.records import CheckpointRecord, Kind, ReuseRecord, TurnRecord
from boundary.checkpoints.kinds import Checkpoint, CheckpointKind
from boundary.family.facade import Family
from boundary.offsets import TokenOffset
from boundary.prefixes import common_prefix_packed, packed
from boundary.trace.records import TokenOutput, TraceRequest


def stop_ids(family: Family) -> set[int]:
    """The ids of the family's stop tokens in its vocabulary (the audit's and the experiment's)."""
    out = set()
    for token in family.spec.stop_tokens:
        tid = family.tokenizer.token_to_id(token)
        if tid is not None:
            out.add(tid)
    return out


def audit_production_session(
    name: str, session: Sequence[TraceRequest], unit: int, stops: set[int]
) -> list[TurnRecord]:
    """Every turn of one session of production records."""
    records: list[TurnRecord] = []
    made: list[tuple[bytes, list[Checkpoint]]] = []
    for k, request in enumerate(session):
        prompt = list(request.prompt_token_ids or ())
        ids = list(request.output.token_ids) if isinstance(request.output, TokenOutput) else None
        here = packed(prompt)
        if records:
            _settle(records[-1], made[-1], here)
        record = TurnRecord(
            session=name,
            turn=k,
            messages=0,
            output_source="token_ids" if ids is not None else "none",
            generated_tokens=None if ids is None else len(ids),
            checkpoints={},
            reuses=_best(made, here, k),
            recorded_hit_tokens=request.hit_tokens,
            recorded_served_by=_recorded_served(request),
        )
        kept = _committed(ids, len(prompt), request.d_end, stops)
        p_end = TokenOffset(len(prompt))
        points = [Checkpoint.at(CheckpointKind.PROMPT_END, p_end, unit, p_end=p_end)]
        if request.u_end is not None:
            points.append(
                Checkpoint.at(CheckpointKind.INPUT_END, TokenOffset(request.u_end), unit, p_end=p_end)
            )
        if kept is not None:
            record.d_end = len(kept)
            points.append(
                Checkpoint.at(
                    CheckpointKind.DECODE_END, TokenOffset(len(prompt) + len(kept)), unit, p_end=p_end
                )
            )
        for c in points:
            record.checkpoints[_kind(c)] = CheckpointRecord(logical=c.logical, position=c.position)
        records.append(record)
        made.append((packed(prompt + (kept or [])), points))
    return records


def _recorded_served(request: TraceRequest) -> str | None:
    """What served the recorded hit: its kind, ``unknown``, ``miss`` (a recorded 0), or None
    where the record holds no hit."""
    if request.served_by is not None:
        return request.served_by
    return "miss" if request.hit_tokens is not None else None


def _committed(ids: list[int] | None, prompt: int, d_end: int | None, stops: set[int]) -> list[int] | None:
    """The committed output: up to the recorded D_end, else without a trailing stop token."""
    if ids is None:
        return None
    if d_end is not None:
        return ids[: d_end - prompt]
    return ids[:-1] if ids and ids[-1] in stops else ids


def _kind(c: Checkpoint) -> Kind:
    return cast(Kind, c.kind.value)  # the audit's kinds: P_end, U_end, D_end only


def _settle(record: TurnRecord, made: tuple[bytes, list[Checkpoint]], prompt: bytes) -> None:
    seq, points = made
    lcp = common_prefix_packed(seq, prompt)
    record.next_common_prefix = lcp
    for c in points:
        record.checkpoints[_kind(c)].reused_by_next = c.position <= lcp
    d = record.checkpoints.get("decode_end")
    if d is not None:
        record.round_trips = d.logical <= lcp
        record.diverged_at = None if record.round_trips else lcp


def _best(made: list[tuple[bytes, list[Checkpoint]]], prompt: bytes, k: int) -> ReuseRecord | None:
    best: ReuseRecord | None = None
    for turn, (seq, points) in enumerate(made):
        kept = common_prefix_packed(seq, prompt)
        for c in points:
            if 0 < c.position <= kept and (best is None or c.position > best.position):
                best = ReuseRecord(
                    kind=_kind(c), position=c.position, producer_turn=turn, producer_age=k - turn
                )
    return best
