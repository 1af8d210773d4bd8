"""Scripts -> requests: render each model call with the real template and tokenizer.

Where it sits: between the experiment's request stage and its stream: it calls render and
boundaries (``boundary.family.facade``) per model call; ``workloads`` and ``workloads.trace`` call it.

For the assistant message at index ``i`` of a script, the request's prompt is the history
``messages[:i]`` as the client sends it, rendered with the generation prompt (U_end and
P_end come from that one rendering); its output is what the model generated for message
``i`` in the family's native format, ending with the stop token (D_end is the position
before that stop token).

Outputs come from ``boundary.outputs.format_output``: the message written the way the
model emits it (reasoning, content, tool calls in the family's native syntax, stop token),
tokenized as generated text. Each request also carries the round-trip verifier's prediction,
made without the next request (``Family.verify_round_trip`` with the client's habit of
echoing reasoning or not): the input ``chat_aware`` decides on, and the stability horizon
(``boundary.verify.horizon.stability_horizon`` over the parsed output, same habits): the input
``horizon`` decides on.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from boundary.audit.production import stop_ids
from boundary.errors import BoundaryError, RequestError
from boundary.experiment.stream import Continuation, StreamRequest
from boundary.experiment.workloads.script import (
    ClientBehaviour,
    Message,
    SessionScript,
    client_history,
    with_head_note,
)
from boundary.family.facade import Family
from boundary.outputs import format_output, parse_output
from boundary.tokenize.rendering import Rendering
from boundary.verify.horizon import active_rewrites, stability_horizon, trigger_of
from boundary.verify.roundtrip import ClientHabits


@dataclass(frozen=True, slots=True)
class GeneratedTokens:
    """What the model committed for one turn; ``stopped``: the last id is a stop token."""

    token_ids: list[int]
    stopped: bool


class OutputUnavailable(BoundaryError):
    """The generated tokens of a turn cannot be derived."""


OutputFormatter = Callable[
    [Family, Rendering, Sequence[Message], Message, Any, dict[str, Any]], GeneratedTokens
]


def native_output(
    fam: Family,
    prompt: Rendering,
    history: Sequence[Message],
    message: Message,
    tools: Any,
    render: dict[str, Any],
) -> GeneratedTokens:
    try:
        generated = format_output(fam, prompt, message, variant=render.get("variant"))
    except RequestError as exc:
        raise OutputUnavailable(exc.detail, location=exc.location) from None
    ids = list(generated.token_ids)
    return GeneratedTokens(ids, bool(ids) and ids[-1] in stop_ids(fam))


def predicted_round_trip(
    fam: Family,
    history: Sequence[Message],
    generated: Sequence[int],
    tools: Any,
    client: ClientBehaviour,
    render: dict[str, Any],
) -> bool | None:
    """Whether the verifier expects this output to re-render into the next request (a tool
    result after a tool call, else a new user message); None when it cannot tell."""
    kwargs = {k: v for k, v in render.items() if k != "variant"}
    try:
        verdict = fam.verify_round_trip(
            history,
            generated,
            None,
            tools=tools,
            variant=render.get("variant"),
            habits=ClientHabits(echo_reasoning=client == "kept"),
            **kwargs,
        )
    except BoundaryError:
        return None
    return verdict.round_trips


def predicted_horizon(
    fam: Family,
    prompt: Rendering,
    history: Sequence[Message],
    generated: Sequence[int],
    tools: Any,
    client: ClientBehaviour,
    render: dict[str, Any],
) -> int | None:
    """The stability horizon of this turn for the *next* request: ``boundary.verify.horizon`` predicts
    what every later request keeps; a tool-call output is continued by tool results, before any
    new user message, so the rewrites a new user message triggers do not limit the next request.
    None when it cannot be predicted."""
    kwargs = {k: v for k, v in render.items() if k != "variant"}
    try:
        parsed = parse_output(fam, list(generated), prompt, tools=tools, variant=render.get("variant"))
        horizon = stability_horizon(
            fam,
            prompt,
            list(generated),
            parsed,
            history,
            habits=ClientHabits(echo_reasoning=client == "kept"),
            variant=render.get("variant"),
            template_kwargs=kwargs,
        )
    except BoundaryError:
        return None
    if not parsed.tool_calls:
        return horizon.position
    triggers: dict[str, str] = {r.kind: trigger_of(r) for r in active_rewrites(fam, kwargs)}
    limits = [lim.position for lim in horizon.limits if triggers.get(lim.rewrite) != "new_user_message"]
    return min(limits, default=len(prompt.token_ids) + len(generated))


@dataclass(frozen=True, slots=True)
class RenderedSession:
    requests: list[StreamRequest]
    skipped: int  # model calls whose output could not be derived (their request is dropped)


def render_session(
    fam: Family,
    script: SessionScript,
    *,
    client: ClientBehaviour,
    render: dict[str, Any],
    formatter: OutputFormatter,
    rewrite_head: bool = False,
) -> RenderedSession:
    """One request per assistant message, ``rid`` set to -1 (arrival order assigns it);
    ``rewrite_head``: each request's system block carries a note for that request
    (``script.with_head_note``)."""
    requests: list[StreamRequest] = []
    skipped = 0
    messages = script.messages
    renderer = fam.session()  # each request renders as fam.render does; only new text is tokenized
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        if i == 0:
            skipped += 1
            continue
        history = client_history(messages[:i], client)
        if rewrite_head:
            history = with_head_note(history, len(requests))
        prompt = renderer.render(history, tools=script.tools, add_generation_prompt=True, **render)
        try:
            out = formatter(fam, prompt, history, message, script.tools, render)
        except OutputUnavailable:
            skipped += 1
            continue
        n = len(prompt.token_ids)
        round_trip = predicted_round_trip(fam, history, out.token_ids, script.tools, client, render)
        horizon = predicted_horizon(fam, prompt, history, out.token_ids, script.tools, client, render)
        tokens = array("I", prompt.token_ids)
        tokens.extend(out.token_ids)
        turn = len(requests)
        if turn == 0:
            continuation = Continuation.FIRST
        else:
            continuation = Continuation.TOOL if messages[i - 1]["role"] == "tool" else Continuation.USER
        requests.append(
            StreamRequest(
                rid=-1,
                session=script.name,
                turn=turn,
                tokens=tokens,
                num_prompt_tokens=n,
                u_end=prompt.u_end,
                d_end=len(tokens) - 1 if out.stopped else len(tokens),
                continuation=continuation,
                tool_call=bool(message.get("tool_calls")),
                round_trip=round_trip,
                horizon=horizon,
            )
        )
    return RenderedSession(requests, skipped)
