"""A trace file (``boundary.trace.records``, the audit's format) as a request stream.

Where it sits: the experiment's request stage: a ``boundary.trace.records`` file as a stream (rendered
through ``rendering``); ``workloads.build_stream`` calls it.

A chat request is rendered with the family's template (U_end and P_end from that rendering),
and carries the round-trip verdict and the stability horizon predicted for its output, as a
shipped workload's request does (what ``chat_aware`` and ``horizon`` decide on);
its output is, in order of preference: ``output.token_ids``; ``output.text`` tokenized;
``output.message`` written the way the model emits it; the assistant message the session's
next request carries right after this request's messages; otherwise none (D_end = P_end).
A production record (``prompt_token_ids``) is replayed as it is: its prompt and output ids,
its ``u_end`` (None when the engine did not record one) and ``d_end`` (when recorded); nothing
is rendered. A line's ``arrival_s`` is kept as the request's ``recorded_arrival`` (the replay's
schedule, ``arrivals.recorded``, honours it).
"""

from __future__ import annotations

from array import array
from typing import Any

from boundary.audit.production import stop_ids
from boundary.errors import BoundaryError
from boundary.experiment.stream import Continuation, StreamRequest
from boundary.experiment.workloads.rendering import (
    OutputFormatter,
    OutputUnavailable,
    predicted_horizon,
    predicted_round_trip,
)
from boundary.experiment.workloads.script import ClientBehaviour
from boundary.family.facade import Family
from boundary.trace.records import MessageOutput, TextOutput, TokenOutput, TraceRequest, sessions


def render_trace(
    fam: Family, requests: list[TraceRequest], render: dict[str, Any], formatter: OutputFormatter
) -> dict[str, list[StreamRequest]]:
    """Every session of ``requests`` as stream requests (``rid`` -1, no times)."""
    stops = stop_ids(fam)
    out: dict[str, list[StreamRequest]] = {}
    for session, lines in sessions(requests).items():
        renderer = fam.session()  # each request renders as fam.render does; only new text is tokenized
        rendered = []
        for k, line in enumerate(lines):
            following = lines[k + 1] if k + 1 < len(lines) else None
            if line.is_production:
                rendered.append(_production(line, k, following, stops))
                continue
            try:
                rendered.append(_chat(fam, renderer, line, k, following, render, formatter, stops))
            except BoundaryError as exc:  # named by the trace line, as the audit names it
                where = (line.where or f"session {session!r} request {k}") + (
                    f": {exc.location}" if exc.location else ""
                )
                raise type(exc)(exc.detail, location=where) from None
        out[session] = rendered
    return out


def _continuation(k: int, line: TraceRequest) -> Continuation:
    if k == 0:
        return Continuation.FIRST
    previous = line.messages[-1]["role"] if line.messages else "user"
    return Continuation.TOOL if previous == "tool" else Continuation.USER


def _next_assistant(line: TraceRequest, following: TraceRequest | None) -> dict[str, Any] | None:
    if following is None or following.messages is None or line.messages is None:
        return None
    n = len(line.messages)
    if len(following.messages) > n and following.messages[n].get("role") == "assistant":
        return following.messages[n]
    return None


def _output_ids(
    fam: Family,
    prompt: Any,
    line: TraceRequest,
    following: TraceRequest | None,
    render: dict[str, Any],
    formatter: OutputFormatter,
) -> list[int]:
    out = line.output
    if isinstance(out, TokenOutput):
        return list(out.token_ids)
    if isinstance(out, TextOutput):
        return fam.tokenizer.encode_ids(out.text)
    message = out.message if isinstance(out, MessageOutput) else _next_assistant(line, following)
    if message is None:
        return []
    try:
        return formatter(fam, prompt, line.messages or [], message, line.tools, render).token_ids
    except OutputUnavailable:
        return []


def _chat(
    fam: Family,
    renderer: Any,
    line: TraceRequest,
    k: int,
    following: TraceRequest | None,
    render: dict[str, Any],
    formatter: OutputFormatter,
    stops: set[int],
) -> StreamRequest:
    messages = line.messages or []
    prompt = renderer.render(messages, tools=line.tools, add_generation_prompt=True, **render)
    ids = _output_ids(fam, prompt, line, following, render, formatter)
    tokens = array("I", prompt.token_ids)
    tokens.extend(ids)
    nxt = _next_assistant(line, following)
    echoes = any(m.get("reasoning_content") for m in messages if m.get("role") == "assistant")
    habit: ClientBehaviour = "kept" if echoes else "dropped"
    return StreamRequest(
        rid=-1,
        session=line.session,
        turn=k,
        tokens=tokens,
        num_prompt_tokens=len(prompt.token_ids),
        u_end=prompt.u_end,
        d_end=_committed_end(tokens, ids, stops),
        continuation=_continuation(k, line),
        tool_call=bool(nxt and nxt.get("tool_calls")),
        round_trip=predicted_round_trip(fam, messages, ids, line.tools, habit, render) if ids else None,
        recorded_arrival=line.arrival_s,
        horizon=predicted_horizon(fam, prompt, messages, ids, line.tools, habit, render) if ids else None,
    )


def _committed_end(tokens: array[int], ids: list[int], stops: set[int]) -> int:
    return len(tokens) - 1 if ids and ids[-1] in stops else len(tokens)


def _production(line: TraceRequest, k: int, following: TraceRequest | None, stops: set[int]) -> StreamRequest:
    """A production record as recorded. Continuation kind and tool call are unknown from ids
    alone: turn 0 is the first request, every later one counts as a user continuation."""
    prompt = list(line.prompt_token_ids or ())
    ids = list(line.output.token_ids) if isinstance(line.output, TokenOutput) else []
    tokens = array("I", prompt)
    tokens.extend(ids)
    return StreamRequest(
        rid=-1,
        session=line.session,
        turn=k,
        tokens=tokens,
        num_prompt_tokens=len(prompt),
        u_end=line.u_end,
        d_end=line.d_end if line.d_end is not None else _committed_end(tokens, ids, stops),
        continuation=Continuation.FIRST if k == 0 else Continuation.USER,
        recorded_arrival=line.arrival_s,
    )
