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

Where it sits: after render, boundaries, checkpoints and outputs (it renders, reads the turn
back and materializes checkpoints); the audit, the horizon and the experiment build on it.
Why a turn does not round-trip is ``boundary.verify.divergence``.

D_end counts committed generated tokens only; a trailing run of stop/control tokens is kept
exactly as far as the next rendering reproduces it (gpt-oss writes ``<|end|>`` where the model
wrote ``<|return|>``: that token is excluded). Comparing against a concrete next request
measures agreement; it is never used to guess where the history ends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from boundary.checkpoints.kinds import Checkpoint, CheckpointKind
from boundary.errors import TemplateRenderError
from boundary.offsets import TokenOffset
from boundary.outputs import (
    GeneratedOutput,
    OutputFormat,
    ParsedOutput,
    output_format,
    parse_output,
)
from boundary.prefixes import common_prefix_length
from boundary.render.options import RenderOptions
from boundary.renderer import HoldsRenderer, Renderer, renderer_of
from boundary.tokenize.rendering import Rendering
from boundary.verify.divergence import Cause, classify, head_change


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


def trailing_controls(ids: Sequence[int], control_ids: frozenset[int]) -> int:
    """How many of the last ids are stop/control tokens."""
    n = 0
    while n < len(ids) and ids[len(ids) - 1 - n] in control_ids:
        n += 1
    return n


def control_ids(family: Renderer, fmt: OutputFormat) -> frozenset[int]:
    """The ids of the format's stop tokens (a rewritten stop token is one of them)."""
    ids = (family.tokenizer.token_to_id(t) for t in fmt.stop_tokens)
    return frozenset(i for i in ids if i is not None)


def check_continuation(
    family: Renderer | HoldsRenderer,
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
    head: str | None = None,
) -> ContinuationCheck:
    """Compare ``prompt + generated`` with ``next_rendering`` (already rendered). ``roles`` are
    the request's message roles (they tell the system prompt from the conversation); ``head``
    where the client changed the prompt's head (``divergence.head_change``)."""
    family = renderer_of(family)
    fmt = output_format(family, variant)
    p = len(prompt.token_ids)
    seq = prompt.token_ids + list(generated)
    nxt = next_rendering.token_ids
    lcp = common_prefix_length(seq, nxt)
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
            family, fmt, prompt, generated, parsed, next_rendering, lcp, history_same, roles, head
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
    out = [Checkpoint.at(CheckpointKind.PROMPT_END, prompt.p_end, unit, p_end=prompt.p_end)]
    if prompt.u_end is not None:
        out.append(Checkpoint.at(CheckpointKind.INPUT_END, prompt.u_end, unit, p_end=prompt.p_end))
    out.append(
        Checkpoint.at(CheckpointKind.DECODE_END, TokenOffset(prompt.p_end + d_end), unit, p_end=prompt.p_end)
    )
    return tuple(out)


_PREFERENCE = {CheckpointKind.DECODE_END: 0, CheckpointKind.PROMPT_END: 1, CheckpointKind.INPUT_END: 2}


def best_checkpoint(prompt: Rendering, d_end: int, reusable: int, unit: int) -> Checkpoint | None:
    """The deepest checkpoint whose materialized state is a prefix of the next request
    (a state at ``n`` represents exactly ``tokens[0:n]``); None when none is past token 0."""
    usable = [c for c in checkpoints(prompt, d_end, unit) if 0 < c.position <= reusable]
    if not usable:
        return None
    return min(usable, key=lambda c: (-c.position, _PREFERENCE[c.kind]))


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
    family: Renderer | HoldsRenderer,
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
    family = renderer_of(family)
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
            head=head_change(messages, probe_messages) if continuation == "given" else None,
        )

    if next_messages is not None:
        checks = [probe("given", next_messages, next_tools if next_tools is not None else tools)]
        skipped: list[tuple[Continuation, str]] = []
    else:
        checks, skipped = _probe_continuations(messages, parsed, habits, tools, probe)
    return _round_trip(checks, skipped, prompt, parsed, ids, unit)


def _round_trip(
    checks: list[ContinuationCheck],
    skipped: list[tuple[Continuation, str]],
    prompt: Rendering,
    parsed: ParsedOutput,
    ids: list[int],
    unit: int,
) -> RoundTrip:
    """The verdict: the first probe's fields on top, every probe kept."""
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


def _probe_continuations(
    messages: Sequence[Any],
    parsed: ParsedOutput,
    habits: ClientHabits,
    tools: Sequence[Any] | None,
    probe: Callable[..., ContinuationCheck],
) -> tuple[list[ContinuationCheck], list[tuple[Continuation, str]]]:
    """Probe the continuations that matter (a tool result when the turn calls tools, a new
    user message; the final answer only when the template rejects the new user message), and
    the ones the template rejects, each with its reason."""
    wanted: list[Continuation] = (
        ["tool_result", "new_user", "final_answer"] if parsed.tool_calls else ["new_user"]
    )
    appended = _appended(parsed, habits)
    checks: list[ContinuationCheck] = []
    skipped: list[tuple[Continuation, str]] = []
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
    return checks, skipped


def _history_same(
    family: Renderer, messages: Sequence[Any], next_messages: Sequence[Any], habits: ClientHabits
) -> bool:
    if len(next_messages) < len(messages):
        return False
    ours, _ = family.prepare(messages, options=RenderOptions(arguments=habits.arguments))
    theirs, _ = family.prepare(
        list(next_messages)[: len(messages)], options=RenderOptions(arguments=habits.arguments)
    )
    return ours == theirs
