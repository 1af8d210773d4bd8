"""D_end round trip: will the committed generated tokens be a token prefix of the next request?

``verify_round_trip`` renders the request, reads the generated ids back into the assistant
message a frontend appends, and compares ``prompt + generated`` with the next request: the
one given, or, without it, the continuations that matter (a tool result when the turn calls
tools, a new user message). A probed continuation the template rejects (Mistral lets a user
message follow tool results only after an assistant answer) is listed in ``skipped`` with
the reason, and the final answer stands in for it. For each continuation it reports the
logical D_end, whether it round-trips, the first divergent token and its cause, and the
deepest reusable checkpoint among P_end, U_end and D_end materialized for a
``prefix_match_unit``.

D_end counts committed generated tokens only; a trailing run of stop/control tokens is kept
exactly as far as the next rendering reproduces it (gpt-oss writes ``<|end|>`` where the model
wrote ``<|return|>``: that token is excluded). Comparing against a concrete next request
measures agreement; it is never used to guess where the history ends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from boundary.boundaries import Rendering
from boundary.checkpoints import Checkpoint, CheckpointKind
from boundary.errors import TemplateRenderError
from boundary.offsets import BoundaryStatus, CharOffset, TokenOffset
from boundary.outputs import GeneratedOutput, ParsedOutput, RegionKind, output_format, parse_output
from boundary.outputs.model import OutputStatus
from boundary.prefixes import common_prefix_length, common_prefix_packed, packed

if TYPE_CHECKING:
    from boundary.family import Family
    from boundary.outputs.codec import OutputFormat


class Cause(StrEnum):
    """Why the next request stops agreeing with ``prompt + generated``."""

    HIDDEN_REASONING_DROPPED = "hidden_reasoning_dropped"  # reasoning is not rendered in history
    EMPTY_THINK_BLOCK = "empty_think_block"  # an empty think block is dropped or added
    TOOL_CALL_RESERIALIZED = (
        "tool_call_reserialized"  # arguments re-written: JSON spacing, key order, value form
    )
    WHITESPACE = "whitespace"  # whitespace or newlines differ
    STOP_TOKEN = "stop_token"  # the stop token is rendered differently
    ROLE_HEADER = "role_header"  # the turn or message header is written differently
    SYSTEM_PROMPT = "system_prompt"  # a date or default system prompt changed the start
    BPE_REMERGE = "bpe_remerge"  # same text, different tokens: BPE merged across the boundary
    PARSE_FAILURE = "parse_failure"  # the output could not be read back (malformed or cut off)
    HISTORY_EDITED = "history_edited"  # the next request changes an earlier message
    OTHER = "other"


class Tail(StrEnum):
    """What became of the trailing stop/control tokens of the generated ids."""

    NONE = "none"  # the ids end without one
    KEPT = "kept"  # the next rendering reproduces them: inside D_end
    REWRITTEN = "rewritten"  # the next rendering writes something else there: excluded from D_end
    NOT_REACHED = "not_reached"  # the turn diverged before them: excluded from D_end


Continuation = Literal["given", "tool_result", "new_user", "final_answer"]


@dataclass(frozen=True, slots=True)
class ClientHabits:
    """How the client builds the next request from the parsed turn.

    ``echo_reasoning``: it sends ``reasoning_content`` back (many OpenAI clients drop it).
    ``arguments``: tool-call arguments reach the template as objects (what vLLM passes) or as
    the JSON text the model wrote; None keeps the family's default.
    """

    echo_reasoning: bool = True
    arguments: Literal["object", "string"] | None = None


DEFAULT_HABITS = ClientHabits()


@dataclass(frozen=True, slots=True)
class ContinuationCheck:
    """``prompt + generated`` against one next request.

    ``reusable_length`` is the token longest common prefix with the next request;
    ``diverged_at`` is that index when the kept turn does not fit (else None).
    """

    continuation: Continuation
    d_end: int
    round_trips: bool
    diverged_at: int | None
    reusable_length: int
    cause: Cause | None
    detail: str | None
    best_checkpoint: Checkpoint | None
    tail: Tail
    next_rendering: Rendering = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """The verdict for one generated turn.

    The top-level fields describe ``continuation``: the given next request, or without one
    the expected continuation (a tool result when the turn calls tools, else a new user
    message). ``probes`` holds every continuation checked. ``checkpoints`` are P_end, U_end
    (when found) and D_end, materialized for ``unit``.
    """

    d_end: int
    round_trips: bool
    diverged_at: int | None
    cause: Cause | None
    detail: str | None
    best_checkpoint: Checkpoint | None
    reusable_length: int
    continuation: Continuation
    tail: Tail
    checkpoints: tuple[Checkpoint, ...]
    probes: tuple[ContinuationCheck, ...]
    parsed: ParsedOutput
    prompt: Rendering = field(repr=False, compare=False)
    generated: list[int] = field(repr=False, compare=False)
    # probed continuations the template rejects (Mistral's role rule), each with its reason;
    # the verdict above comes from the probes that remain
    skipped: tuple[tuple[Continuation, str], ...] = ()

    def probe(self, continuation: Continuation) -> ContinuationCheck | None:
        return next((p for p in self.probes if p.continuation == continuation), None)


# -- the comparison --------------------------------------------------------------------------


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two id sequences."""
    return common_prefix_packed(packed(a), packed(b))


def trailing_controls(ids: Sequence[int], control_ids: frozenset[int]) -> int:
    """How many of the last ids are stop/control tokens."""
    n = 0
    while n < len(ids) and ids[len(ids) - 1 - n] in control_ids:
        n += 1
    return n


def control_ids(family: Family, fmt: OutputFormat) -> frozenset[int]:
    ids = (family.tokenizer.token_to_id(t) for t in (*fmt.stop_tokens, "<|end|>" if fmt.harmony else ""))
    return frozenset(i for i in ids if i is not None)


def check_continuation(
    family: Family,
    prompt: Rendering,
    generated: Sequence[int],
    parsed: ParsedOutput,
    next_rendering: Rendering,
    *,
    continuation: Continuation,
    unit: int = 1,
    history_same: bool = True,
    variant: str | None = None,
    roles: Sequence[str] = (),
) -> ContinuationCheck:
    """Compare ``prompt + generated`` with ``next_rendering`` (already rendered). ``roles`` are
    the request's message roles (they tell the system prompt from the conversation)."""
    fmt = output_format(family, variant)
    p = len(prompt.token_ids)
    seq = prompt.token_ids + list(generated)
    nxt = next_rendering.token_ids
    lcp = common_prefix(seq, nxt)
    trailing = trailing_controls(generated, control_ids(family, fmt))
    body = len(generated) - trailing
    if lcp >= p + body:
        d_end = min(len(generated), lcp - p)
        tail = Tail.NONE if not trailing else Tail.KEPT if d_end == len(generated) else Tail.REWRITTEN
    else:
        d_end = body
        tail = Tail.NOT_REACHED if trailing else Tail.NONE
    round_trips = lcp >= p + d_end
    cause = detail = None
    if not round_trips:
        cause, detail = classify(
            family, fmt, prompt, generated, parsed, next_rendering, lcp, history_same, roles
        )
    best = best_checkpoint(prompt, d_end, lcp, unit)
    return ContinuationCheck(
        continuation,
        d_end,
        round_trips,
        None if round_trips else lcp,
        lcp,
        cause,
        detail,
        best,
        tail,
        next_rendering,
    )


def checkpoints(prompt: Rendering, d_end: int, unit: int) -> tuple[Checkpoint, ...]:
    """P_end, U_end (when found) and D_end of one turn, materialized for ``unit``."""
    out = [Checkpoint.at(CheckpointKind.PROMPT_END, prompt.p_end, unit)]
    if prompt.u_end is not None:
        out.append(Checkpoint.at(CheckpointKind.INPUT_END, prompt.u_end, unit))
    out.append(Checkpoint.at(CheckpointKind.DECODE_END, TokenOffset(prompt.p_end + d_end), unit))
    return tuple(out)


_PREFERENCE = {CheckpointKind.DECODE_END: 0, CheckpointKind.PROMPT_END: 1, CheckpointKind.INPUT_END: 2}


def best_checkpoint(prompt: Rendering, d_end: int, reusable: int, unit: int) -> Checkpoint | None:
    """The deepest checkpoint whose materialized state is a prefix of the next request
    (a state at ``n`` represents exactly ``tokens[0:n]``); None when none is past token 0."""
    usable = [c for c in checkpoints(prompt, d_end, unit) if 0 < c.position <= reusable]
    if not usable:
        return None
    return min(usable, key=lambda c: (-c.position, _PREFERENCE[c.kind]))


# -- causes -----------------------------------------------------------------------------------

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2} \w+ \d{4}|\w+ \d{1,2}, \d{4}")
_WS = re.compile(r"\s+")


def _without_space(text: str, limit: int) -> str:
    return _WS.sub("", text[: limit * 4])[:limit]


def _whitespace_only(a: str, b: str) -> bool:
    """The two texts differ at their start only by whitespace (judged on what follows)."""
    n = min(64, len(_WS.sub("", a)), len(_WS.sub("", b)))
    return n > 0 and _without_space(a, n) == _without_space(b, n)


def _token_ends_by(rendering: Rendering, token: int, char: int) -> bool:
    """Token ``token`` of ``rendering`` ends at or before text position ``char``."""
    if token >= len(rendering.token_ids):
        return True
    return int(rendering.boundary_at(CharOffset(char)).token or 0) > token


def _token_ends_by_a(
    family: Family, prompt: Rendering, generated: Sequence[int], token: int, char: int
) -> bool:
    """The same for ``prompt + generated`` (generated tokens measured by decoding them)."""
    p = len(prompt.token_ids)
    if token < p:
        return char >= len(prompt.text) or int(prompt.boundary_at(CharOffset(char)).token or 0) > token
    return len(prompt.text) + len(family.tokenizer.decode(list(generated[: token - p + 1]))) <= char


def classify(
    family: Family,
    fmt: OutputFormat,
    prompt: Rendering,
    generated: Sequence[int],
    parsed: ParsedOutput,
    nxt: Rendering,
    lcp: int,
    history_same: bool = True,
    roles: Sequence[str] = (),
) -> tuple[Cause, str]:
    """Name the cause of the first divergence at token ``lcp``."""
    seq = prompt.token_ids + list(generated)
    a = prompt.text + parsed.text
    b = nxt.text
    c = common_prefix_length(a, b)
    agreed = c >= len(a)  # all of prompt + generated is text of the next request
    if agreed or (_token_ends_by(nxt, lcp, c) and _token_ends_by_a(family, prompt, generated, lcp, c)):
        tok = family.tokenizer
        return Cause.BPE_REMERGE, (
            f"the text agrees but token {lcp} differs: {tok.decode(seq[lcp : lcp + 1])!r} here, "
            f"{tok.decode(nxt.token_ids[lcp : lcp + 1])!r} in the next request"
        )
    if parsed.status is not OutputStatus.COMPLETE and c >= len(prompt.text):
        return Cause.PARSE_FAILURE, f"{parsed.status.value}: {parsed.problem}"
    c = _tag_start(a, c)
    here, there = a[c : c + 40], b[c : c + 40]
    shown = f"{here!r} here, {there!r} in the next request"
    think = fmt.think
    u_char = prompt.input_end.char if prompt.input_end.status is BoundaryStatus.FOUND else len(prompt.text)
    assert u_char is not None
    if think is not None:
        empty = re.compile(rf"\s*{re.escape(think.open_tag)}\s*{re.escape(think.close_tag)}")
        in_a, in_b = bool(empty.match(a, c)), bool(empty.match(b, c))
        if in_a != in_b:
            return (
                Cause.EMPTY_THINK_BLOCK,
                f"an empty think block is {'dropped' if in_a else 'added'}: {shown}",
            )
    if c < u_char:
        return _classify_history(prompt, fmt, a, b, c, history_same, shown, roles)
    if c < len(prompt.text):
        opened = prompt.text.find(think.open_tag, u_char) if think is not None else -1
        if 0 <= opened <= c:
            if parsed.reasoning:
                return (
                    Cause.HIDDEN_REASONING_DROPPED,
                    f"the turn's reasoning is not rendered in history: {shown}",
                )
            return Cause.EMPTY_THINK_BLOCK, f"the pre-filled think block is not rendered in history: {shown}"
        if _whitespace_only(a[c:], b[c:]):
            return Cause.WHITESPACE, shown
        return Cause.ROLE_HEADER, f"the assistant header is written differently in history: {shown}"
    g = c - len(prompt.text)
    kinds = [r.kind for r in parsed.regions_at(g)]
    if RegionKind.REASONING in kinds:
        if not parsed.reasoning:
            return (
                Cause.EMPTY_THINK_BLOCK,
                f"the empty think block is written differently in history: {shown}",
            )
        if _whitespace_only(a[c:], b[c:]):
            return Cause.WHITESPACE, f"around the reasoning: {shown}"
        return Cause.HIDDEN_REASONING_DROPPED, f"the turn's reasoning is not rendered in history: {shown}"
    if RegionKind.ARGUMENTS in kinds:
        return Cause.TOOL_CALL_RESERIALIZED, f"{_arguments_change(parsed, g, b, len(prompt.text))}: {shown}"
    if RegionKind.TOOL_CALL in kinds:
        if _whitespace_only(a[c:], b[c:]):
            return Cause.WHITESPACE, f"in a tool call's framing: {shown}"
        if fmt.harmony:
            return Cause.ROLE_HEADER, f"the tool call's header is written in another order: {shown}"
        return Cause.TOOL_CALL_RESERIALIZED, f"the tool call is written differently: {shown}"
    if RegionKind.STOP in kinds:
        return Cause.STOP_TOKEN, shown
    if _whitespace_only(a[c:], b[c:]):
        return Cause.WHITESPACE, shown
    if fmt.harmony and "<|channel|>" in here and "<|channel|>" in there:
        return Cause.ROLE_HEADER, f"the message header is written differently: {shown}"
    return Cause.OTHER, shown


def _classify_history(
    prompt: Rendering,
    fmt: OutputFormat,
    a: str,
    b: str,
    c: int,
    history_same: bool,
    shown: str,
    roles: Sequence[str],
) -> tuple[Cause, str]:
    if not history_same:
        return Cause.HISTORY_EDITED, f"the next request changes an earlier message: {shown}"
    starts = prompt.message_starts
    first_turn = next(
        (
            s
            for s, role in zip(starts, roles, strict=False)
            if s is not None and role not in ("system", "developer")
        ),
        None,
    )
    window = a[max(0, c - 24) : c + 24]
    if first_turn is None or c < first_turn:
        if _DATE.search(window):
            return Cause.SYSTEM_PROMPT, f"the date in the system prompt changed: {shown}"
        if first_turn is not None:
            return Cause.SYSTEM_PROMPT, f"the system prompt changed: {shown}"
    think = fmt.think
    if think is not None:
        opened = a.rfind(think.open_tag, 0, c + len(think.open_tag))
        closed = a.find(think.close_tag, max(opened, 0))
        if opened >= 0 and closed >= c - len(think.close_tag):
            body = a[opened + len(think.open_tag) : closed]
            if body.strip():
                return Cause.HIDDEN_REASONING_DROPPED, f"an earlier turn's reasoning is dropped: {shown}"
            return Cause.EMPTY_THINK_BLOCK, f"an earlier turn's empty think block is dropped: {shown}"
    if c in starts and a[c : c + 32] in b[c : c + 8192]:
        at = starts.index(c)
        return Cause.OTHER, f"the template writes something new before messages[{at}]: {shown}"
    if fmt.harmony and "<|channel|>analysis" in a[max(0, c - 12) : c + 20]:
        return Cause.HIDDEN_REASONING_DROPPED, f"an earlier turn's analysis is dropped: {shown}"
    return Cause.OTHER, f"the template renders earlier history differently: {shown}"


def _arguments_change(parsed: ParsedOutput, g: int, b: str, offset: int) -> str:
    """How the re-rendered arguments differ from the written ones (both read from the
    arguments' start, where the two texts still agree)."""
    region = next(r for r in parsed.regions_at(g) if r.kind is RegionKind.ARGUMENTS)
    written = parsed.text[region.start : region.end]
    there = b[offset + region.start :]
    try:
        ours = json.loads(written)
        theirs, _ = json.JSONDecoder().raw_decode(there)
    except (json.JSONDecodeError, ValueError):
        compact = _WS.sub("", written)
        same = _WS.sub("", there[: len(written) * 2]).startswith(compact)
        return "spacing" if same else "value form (a value is written differently)"
    if ours == theirs and isinstance(ours, dict) and isinstance(theirs, dict):
        return "JSON spacing" if list(ours) == list(theirs) else "JSON key order"
    return "value form (the arguments are written as another value)"


def _tag_start(text: str, c: int) -> int:
    """Move ``c`` back to the start of a control tag (``<...>`` or ``[...]``) it falls inside."""
    for open_, close in (("<", ">"), ("[", "]")):
        at = text.rfind(open_, max(0, c - 32), c)
        if at >= 0 and close not in text[at:c]:
            return at
    return c


# -- the entry point --------------------------------------------------------------------------


def _appended(parsed: ParsedOutput, habits: ClientHabits) -> dict[str, Any]:
    message = dict(parsed.message)
    if not habits.echo_reasoning:
        message.pop("reasoning_content", None)
    return message


def continuation_messages(
    messages: Sequence[Mapping[str, Any] | Any],
    appended: Mapping[str, Any],
    continuation: Continuation,
) -> list[Any]:
    """A plausible next request: the request, the appended turn, and what follows it."""
    calls = appended.get("tool_calls") or []
    out = [*messages, dict(appended)]
    results = [{"role": "tool", "tool_call_id": c["id"], "content": "{}"} for c in calls]
    if continuation == "tool_result":
        return out + results
    if continuation == "new_user":
        return out + results + [{"role": "user", "content": "Thanks."}]
    if continuation == "final_answer":
        return (
            out
            + results
            + [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks."}]
        )
    raise ValueError(f"no messages for continuation {continuation!r}")


def verify_round_trip(
    family: Family,
    messages: Sequence[Mapping[str, Any] | Any],
    generated: Sequence[int] | GeneratedOutput,
    next_messages: Sequence[Mapping[str, Any] | Any] | None = None,
    *,
    tools: Sequence[Mapping[str, Any] | Any] | None = None,
    next_tools: Sequence[Mapping[str, Any] | Any] | None = None,
    unit: int = 1,
    variant: str | None = None,
    habits: ClientHabits = DEFAULT_HABITS,
    now: datetime | None = None,
    next_now: datetime | None = None,
    **template_kwargs: Any,
) -> RoundTrip:
    """Verify that the committed ``generated`` ids of the turn answering ``messages`` are a
    token prefix of the next request (``next_messages``, or the probed continuations)."""
    ids = list(generated.token_ids if isinstance(generated, GeneratedOutput) else generated)
    render_kwargs: dict[str, Any] = {"variant": variant, "arguments": habits.arguments, **template_kwargs}
    prompt = family.render(messages, tools, True, now=now, **render_kwargs)
    parsed = parse_output(family, ids, prompt, tools=tools, variant=variant, template_kwargs=template_kwargs)
    roles = [str(m.get("role") if isinstance(m, Mapping) else getattr(m, "role", None)) for m in messages]

    def probe(
        continuation: Continuation, probe_messages: Sequence[Any], probe_tools: Sequence[Any] | None
    ) -> ContinuationCheck:
        nxt = family.render(probe_messages, probe_tools, True, now=next_now or now, **render_kwargs)
        # probed continuations extend this request's own messages: only a given one can differ
        same = continuation != "given" or _history_same(family, messages, probe_messages, habits)
        return check_continuation(
            family,
            prompt,
            ids,
            parsed,
            nxt,
            continuation=continuation,
            unit=unit,
            history_same=same,
            variant=variant,
            roles=roles,
        )

    skipped: list[tuple[Continuation, str]] = []
    if next_messages is not None:
        checks = [probe("given", next_messages, next_tools if next_tools is not None else tools)]
    else:
        wanted: list[Continuation] = (
            ["tool_result", "new_user", "final_answer"] if parsed.tool_calls else ["new_user"]
        )
        appended = _appended(parsed, habits)
        checks = []
        for c in wanted:
            try:
                checks.append(probe(c, continuation_messages(messages, appended, c), tools))
            except TemplateRenderError as exc:  # the template's own rule rejects this continuation
                skipped.append((c, f"the template rejects it: {exc}"))
                continue
            if c == "new_user":
                break  # the final answer only stands in for a rejected new user message
        if not checks:
            raise TemplateRenderError(
                "the template rejects every probed continuation: "
                + "; ".join(f"{c}: {why}" for c, why in skipped)
            )
    main = checks[0]
    return RoundTrip(
        d_end=main.d_end,
        round_trips=main.round_trips,
        diverged_at=main.diverged_at,
        cause=main.cause,
        detail=main.detail,
        best_checkpoint=main.best_checkpoint,
        reusable_length=main.reusable_length,
        continuation=main.continuation,
        tail=main.tail,
        checkpoints=checkpoints(prompt, main.d_end, unit),
        probes=tuple(checks),
        parsed=parsed,
        prompt=prompt,
        generated=ids,
        skipped=tuple(skipped),
    )


def _history_same(
    family: Family, messages: Sequence[Any], next_messages: Sequence[Any], habits: ClientHabits
) -> bool:
    if len(next_messages) < len(messages):
        return False
    ours, _ = family.prepare(messages, arguments=habits.arguments)
    theirs, _ = family.prepare(list(next_messages)[: len(messages)], arguments=habits.arguments)
    return ours == theirs
