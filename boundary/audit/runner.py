"""Audit a multi-turn trace: per turn, which of P_end / U_end / D_end the next request reuses,
why D_end does not round-trip, the deepest earlier checkpoint each request can resume from,
and whether the predicted stability horizon held.

Where it sits: after render, boundaries, outputs, round trip and horizon, which it runs per
turn; the CLI and ``whatif`` call it.

Each request is rendered once; its rendering is both its own prompt and the next request
that the previous turn is checked against (``boundary.verify.roundtrip.check_continuation``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from boundary.audit.production import audit_production_session, stop_ids
from boundary.audit.records import (
    KINDS,
    CheckpointRecord,
    HorizonRecord,
    HorizonSummary,
    Kind,
    KindSummary,
    OutputSource,
    RecordedHits,
    ReuseRecord,
    Summary,
    TurnRecord,
)
from boundary.checkpoints.kinds import Checkpoint
from boundary.errors import BoundaryError, RequestError
from boundary.family.facade import Family
from boundary.outputs import ParsedOutput, format_output, parse_output
from boundary.prefixes import common_prefix_packed, packed
from boundary.tokenize.rendering import Rendering
from boundary.trace.records import UNKNOWN_HIT, MessageOutput, TextOutput, TokenOutput, TraceRequest, sessions
from boundary.verify.divergence import head_change
from boundary.verify.horizon import stability_horizon
from boundary.verify.roundtrip import (
    ClientHabits,
    Tail,
    check_continuation,
    checkpoints,
)


@dataclass(frozen=True, slots=True)
class AuditSettings:
    unit: int = 1
    variant: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    habits: ClientHabits = field(default_factory=ClientHabits)
    now: datetime | None = None


@dataclass(slots=True)
class _Turn:
    """What the audit keeps of a turn while later requests of its session are checked."""

    record: TurnRecord
    prompt: Rendering
    generated: list[int] | None
    parsed: ParsedOutput | None
    seq: bytes  # prompt + kept generated ids, packed (``boundary.prefixes.packed``)
    made: tuple[Checkpoint, ...]
    horizon: int | None
    kept_by_later: int | None = None  # min token LCP with the later requests


@dataclass(frozen=True, slots=True)
class AuditRun:
    records: list[TurnRecord]
    summary: Summary
    parsed: dict[tuple[str, int], dict[str, Any]]  # (session, turn) -> the parsed assistant message
    production: bool = False  # every request a production record: replayed as recorded, nothing rendered


def audit_requests(
    family: Family,
    requests: Sequence[TraceRequest],
    settings: AuditSettings | None = None,
    *,
    advance: Callable[[int], None] | None = None,
) -> AuditRun:
    """Audit every session of ``requests``; ``advance(n)`` is called as requests are done."""
    settings = settings or AuditSettings()
    records: list[TurnRecord] = []
    parsed: dict[tuple[str, int], dict[str, Any]] = {}
    stops = stop_ids(family)
    for name, session in sessions(requests).items():
        if any(r.is_production for r in session):
            if not all(r.is_production for r in session):
                raise RequestError("mixes production records and chat requests", location=f"session {name!r}")
            records += audit_production_session(name, session, settings.unit, stops)
            if advance is not None:
                advance(len(session))
            continue
        turns = _audit_session(family, name, session, settings)
        for t in turns:
            records.append(t.record)
            if t.parsed is not None:
                parsed[(name, t.record.turn)] = t.parsed.message
        if advance is not None:
            advance(len(session))
    production = bool(requests) and all(r.is_production for r in requests)
    return AuditRun(records, summarize(records), parsed, production)


def _audit_session(family: Family, name: str, session: list[TraceRequest], s: AuditSettings) -> list[_Turn]:
    done: list[_Turn] = []
    kwargs = dict(s.template_kwargs)
    renderer = family.session()  # renders each request as family.render does, re-tokenizing only what changed
    for k, request in enumerate(session):
        try:
            prompt = renderer.render(
                chat_messages(request),
                request.tools,
                True,
                variant=s.variant,
                arguments=s.habits.arguments,
                now=s.now,
                **kwargs,
            )
            if done:
                _check_previous(family, done, prompt, session[k - 1], request, s)
            reuses = _reuse_and_keep(done, prompt, k)
            following = session[k + 1] if k + 1 < len(session) else None
            source, generated = _generated(family, prompt, request, following, s)
            turn = _new_turn(family, name, k, request, prompt, source, generated, s)
        except BoundaryError as exc:
            where = (request.where or f"session {name!r} request {k}") + (
                f": {exc.location}" if exc.location else ""
            )
            raise type(exc)(exc.detail, location=where) from None
        turn.record.reuses = reuses
        done.append(turn)
    for t in done:
        if t.record.horizon is not None and t.kept_by_later is not None:
            t.record.horizon.held = t.kept_by_later >= t.record.horizon.position
            t.record.horizon.slack = t.kept_by_later - t.record.horizon.position
    return done


def _generated(
    family: Family, prompt: Rendering, request: TraceRequest, following: TraceRequest | None, s: AuditSettings
) -> tuple[OutputSource, list[int] | None]:
    out = request.output
    if isinstance(out, TokenOutput):
        return "token_ids", list(out.token_ids)
    if isinstance(out, TextOutput):
        return "text", family.tokenizer.encode_ids(out.text)
    if isinstance(out, MessageOutput):
        return "message", format_output(family, prompt, out.message, variant=s.variant).token_ids
    n = len(chat_messages(request))
    later = chat_messages(following) if following is not None else []
    if len(later) > n and later[n].get("role") == "assistant":
        return "next_request", format_output(family, prompt, later[n], variant=s.variant).token_ids
    return "none", None


def _new_turn(
    family: Family,
    name: str,
    k: int,
    request: TraceRequest,
    prompt: Rendering,
    source: OutputSource,
    generated: list[int] | None,
    s: AuditSettings,
) -> _Turn:
    parsed = None
    horizon = None
    record = TurnRecord(
        session=name, turn=k, messages=len(chat_messages(request)), output_source=source, checkpoints={}
    )
    if generated is not None:
        parsed = parse_output(family, generated, prompt, tools=request.tools, variant=s.variant)
        record.output_status = parsed.status.value
        record.output_problem = parsed.problem
        record.generated_tokens = len(generated)
        h = stability_horizon(
            family,
            prompt,
            generated,
            parsed,
            chat_messages(request),
            habits=s.habits,
            variant=s.variant,
            template_kwargs=s.template_kwargs,
        )
        horizon = h.position
        record.horizon = HorizonRecord(position=h.position, limit=h.limit.rewrite if h.limit else None)
    # D_end is settled against the next request; until then it is the whole generated turn
    made = checkpoints(prompt, len(generated) if generated is not None else 0, s.unit)
    if generated is None:
        made = tuple(c for c in made if c.kind.value != "decode_end")
    for c in made:
        record.checkpoints[_kind(c)] = CheckpointRecord(logical=c.logical, position=c.position)
    seq = packed(prompt.token_ids + (generated or []))
    return _Turn(record, prompt, generated, parsed, seq, made, horizon)


def _check_previous(
    family: Family,
    done: list[_Turn],
    prompt: Rendering,
    previous: TraceRequest,
    request: TraceRequest,
    s: AuditSettings,
) -> None:
    """Settle the previous turn against this request: D_end, round trip, cause, reuse per kind."""
    prev = done[-1]
    rec = prev.record
    if prev.generated is not None and prev.parsed is not None:
        before = chat_messages(previous)
        same = chat_messages(request)[: len(before)] == before and (request.tools or None) == (
            previous.tools or None
        )
        check = check_continuation(
            family,
            prev.prompt,
            prev.generated,
            prev.parsed,
            prompt,
            continuation="given",
            unit=s.unit,
            history_same=same,
            variant=s.variant,
            roles=[str(m.get("role")) for m in before],
            head=head_change(before, chat_messages(request)),
        )
        rec.d_end = check.d_end
        rec.round_trips = check.round_trips
        rec.diverged_at = check.diverged_at
        rec.cause = check.cause.value if check.cause else None
        rec.detail = check.detail
        rec.tail = check.tail.value if check.tail is not Tail.NONE else None
        prev.made = checkpoints(prev.prompt, check.d_end, s.unit)
        d = next(c for c in prev.made if c.kind.value == "decode_end")
        rec.checkpoints["decode_end"] = CheckpointRecord(logical=d.logical, position=d.position)
        prev.seq = packed(prev.prompt.token_ids + prev.generated[: check.d_end])
        if rec.horizon is not None:
            rec.horizon.position = min(rec.horizon.position, len(prev.seq) // 8)
            prev.horizon = rec.horizon.position
    lcp = common_prefix_packed(prev.seq, packed(prompt.token_ids))
    rec.next_common_prefix = lcp
    for c in prev.made:
        rec.checkpoints[_kind(c)].reused_by_next = c.position <= lcp


def _reuse_and_keep(done: list[_Turn], prompt: Rendering, k: int) -> ReuseRecord | None:
    """The deepest checkpoint of any earlier turn this request can resume from; and, for
    every earlier turn, how much of it this request keeps (checked against its horizon)."""
    best: ReuseRecord | None = None
    ids = packed(prompt.token_ids)
    for t in done:
        kept = common_prefix_packed(t.seq, ids)
        t.kept_by_later = kept if t.kept_by_later is None else min(t.kept_by_later, kept)
        for c in t.made:
            if 0 < c.position <= kept and (best is None or c.position > best.position):
                best = ReuseRecord(
                    kind=_kind(c),
                    position=c.position,
                    producer_turn=t.record.turn,
                    producer_age=k - t.record.turn,
                )
    return best


def summarize(records: Sequence[TurnRecord]) -> Summary:
    """Rates, reused tokens, causes, producer ages and horizon accuracy over turn records."""
    with_next = [r for r in records if r.next_common_prefix is not None]
    kinds: dict[Kind, KindSummary] = {}
    for kind in KINDS:
        eligible = [r for r in with_next if kind in r.checkpoints]
        reached = [r for r in eligible if r.checkpoints[kind].reused_by_next]
        kinds[kind] = KindSummary(
            eligible=len(eligible),
            reached=len(reached),
            rate=_rate(len(reached), len(eligible)),
            mean_reused_tokens=_mean(
                [r.checkpoints[kind].position if r.checkpoints[kind].reused_by_next else 0 for r in eligible]
            ),
        )
    best_of_turn = [
        max((c.position for c in r.checkpoints.values() if c.reused_by_next), default=0) for r in with_next
    ]
    followers = [r for r in records if r.turn > 0]
    ages = Counter(str(r.reuses.producer_age) if r.reuses else "none" for r in followers)
    causes = Counter(r.cause for r in with_next if r.round_trips is False and r.cause)
    checked = [(r, r.horizon) for r in records if r.horizon is not None and r.horizon.held is not None]
    shares = [h.position / max(1, r.checkpoints["prompt_end"].logical + (r.d_end or 0)) for r, h in checked]
    return Summary(
        sessions=len({r.session for r in records}),
        turns=len(records),
        turns_with_next=len(with_next),
        mean_prompt_tokens=_mean([r.checkpoints["prompt_end"].logical for r in records]),
        kinds=kinds,
        mean_best_of_turn_tokens=_mean(best_of_turn),
        mean_reused_tokens=_mean([r.reuses.position if r.reuses else 0 for r in followers]),
        producer_age=dict(
            sorted(ages.items(), key=lambda kv: (kv[0] == "none", int(kv[0]) if kv[0] != "none" else 0))
        ),
        causes=dict(causes.most_common()),
        stop_token_rewritten=sum(1 for r in with_next if r.tail == Tail.REWRITTEN.value),
        output_problems=sum(1 for r in records if r.output_status not in (None, "complete")),
        horizon=HorizonSummary(
            predicted=sum(1 for r in records if r.horizon is not None),
            checked=len(checked),
            held=sum(1 for _, h in checked if h.held),
            rate=_rate(sum(1 for _, h in checked if h.held), len(checked)),
            mean_position_share=_mean(shares),
            mean_slack=_mean([h.slack for _, h in checked if h.slack is not None]),
        ),
        recorded_hits=recorded_hits(records),
    )


def recorded_hits(records: Sequence[TurnRecord]) -> RecordedHits | None:
    """What the production records among ``records`` say about their hits (None: no record
    carries one): an ``unknown`` hit is counted apart, never as a miss."""
    carried = [r for r in records if r.recorded_served_by is not None or r.recorded_hit_tokens is not None]
    if not carried:
        return None
    production = [r for r in records if r.messages == 0]  # a production record renders no messages
    reported = [r for r in production if r.recorded_hit_tokens is not None]
    unknown = sum(1 for r in production if r.recorded_served_by == UNKNOWN_HIT)
    return RecordedHits(
        records=len(production),
        reported=len(reported),
        misses=sum(1 for r in reported if r.recorded_hit_tokens == 0),
        unknown=unknown,
        absent=len(production) - len(reported) - unknown,
        hit_tokens=sum(r.recorded_hit_tokens or 0 for r in reported),
        prompt_tokens=sum(r.checkpoints["prompt_end"].logical for r in reported),
    )


def chat_messages(request: TraceRequest) -> list[dict[str, Any]]:
    """A chat request's messages; only chat requests are rendered (a session of production
    records goes to ``audit_production_session``)."""
    if request.messages is None:
        raise RequestError(
            "a production record has no messages to render", location=f"session {request.session!r}"
        )
    return request.messages


def _kind(c: Checkpoint) -> Kind:
    """The record key of a turn's checkpoint (a turn makes P_end, U_end and D_end only)."""
    return cast(Kind, c.kind.value)


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 3) if values else 0.0


def _rate(n: int, d: int) -> float:
    return round(n / d, 4) if d else 0.0
