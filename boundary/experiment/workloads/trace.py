"""A trace file in the audit's JSONL format: one request per line.

    {"session": "s1", "messages": [...], "tools": [...]?, "output": {"text": "..."} | {"token_ids": [...]}?}

Lines of a session are its requests in order. A request's output is, in order of
preference: its ``token_ids``; its ``text`` tokenized; the assistant message the session's
next request carries right after this request's messages, formatted as the model's output;
otherwise none (the request ends at its prompt: D_end = P_end).
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from boundary.errors import RequestError
from boundary.experiment.stream import Continuation, StreamRequest
from boundary.experiment.workloads.rendering import (
    OutputFormatter,
    OutputUnavailable,
    predicted_round_trip,
    stop_token_ids,
)
from boundary.family import Family


class TraceOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    token_ids: list[int] | None = None

    @model_validator(mode="after")
    def _one(self) -> TraceOutput:
        if (self.text is None) == (self.token_ids is None):
            raise ValueError("give exactly one of text or token_ids")
        return self


class TraceLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    output: TraceOutput | None = None


def read_trace(path: Path) -> list[TraceLine]:
    lines = []
    with path.open(encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                lines.append(TraceLine.model_validate(json.loads(raw)))
            except json.JSONDecodeError as exc:
                raise RequestError(f"not JSON ({exc.msg})", location=f"{path.name}:{number}") from None
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in err["loc"])
                raise RequestError(err["msg"], location=f"{path.name}:{number}: {where}") from None
    if not lines:
        raise RequestError("no requests", location=path.name)
    return lines


def render_trace(
    fam: Family, lines: list[TraceLine], render: dict[str, Any], formatter: OutputFormatter
) -> dict[str, list[StreamRequest]]:
    by_session: dict[str, list[TraceLine]] = {}
    for line in lines:
        by_session.setdefault(line.session, []).append(line)
    stops = stop_token_ids(fam)
    out: dict[str, list[StreamRequest]] = {}
    for session, requests in by_session.items():
        rendered = []
        renderer = fam.session()  # each request renders as fam.render does; only new text is tokenized
        for k, line in enumerate(requests):
            prompt = renderer.render(line.messages, tools=line.tools, add_generation_prompt=True, **render)
            ids: list[int] = []
            if line.output is not None and line.output.token_ids is not None:
                ids = list(line.output.token_ids)
            elif line.output is not None:
                ids = fam.tokenizer.encode(line.output.text or "").ids
            elif k + 1 < len(requests):
                following = requests[k + 1].messages
                if (
                    len(following) > len(line.messages)
                    and following[len(line.messages)]["role"] == "assistant"
                ):
                    try:
                        ids = formatter(
                            fam, prompt, line.messages, following[len(line.messages)], line.tools, render
                        ).token_ids
                    except OutputUnavailable:
                        ids = []
            tokens = array("I", prompt.token_ids)
            tokens.extend(ids)
            n = len(prompt.token_ids)
            previous = line.messages[-1]["role"] if line.messages else "user"
            continuation = (
                Continuation.FIRST
                if k == 0
                else Continuation.TOOL
                if previous == "tool"
                else Continuation.USER
            )
            following_call = False
            if k + 1 < len(requests):
                following = requests[k + 1].messages
                if len(following) > len(line.messages):
                    following_call = bool(following[len(line.messages)].get("tool_calls"))
            echoes = any(m.get("reasoning_content") for m in line.messages if m.get("role") == "assistant")
            habit: Literal["kept", "dropped"] = "kept" if echoes else "dropped"
            round_trip = (
                predicted_round_trip(fam, line.messages, ids, line.tools, habit, render) if ids else None
            )
            rendered.append(
                StreamRequest(
                    rid=-1,
                    session=session,
                    turn=k,
                    tokens=tokens,
                    num_prompt_tokens=n,
                    u_end=prompt.u_end,
                    d_end=len(tokens) - 1 if ids and ids[-1] in stops else len(tokens),
                    continuation=continuation,
                    tool_call=following_call,
                    round_trip=round_trip,
                )
            )
        out[session] = rendered
    return out
