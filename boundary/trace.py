"""Multi-turn traces for the audit: JSONL, one request per line, sessions in order.

Each line is an OpenAI chat request plus, optionally, what the model generated for it::

    {"session": "s1", "messages": [...], "tools": [...],
     "output": {"text": "..."} | {"token_ids": [...]} | {"message": {...}}}

``output.message`` is an assistant message; the audit writes it the way the family's model
emits it (``boundary.outputs.format_output``). Without ``output`` the audit takes the
assistant message the session's next request appends after this request's messages.

A line recorded by a serving engine (``boundary_vllm``'s recorder) also carries ``engine``:
the prompt ids the engine ran, U_end / P_end / D_end in tokens, the joint prefix-cache hit at
admission and the kind of checkpoint that served it (``EngineRecord``); its ``output`` is the
committed token ids.

``tau_bench_trace`` turns the shipped tau-bench airline trajectories into such a trace, with
optional seeded synthetic reasoning (the data carries no model reasoning).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError

from boundary.errors import RequestError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextOutput(_Model):
    """The generated text, stop token included."""

    text: str


class TokenOutput(_Model):
    """The committed generated token ids."""

    token_ids: list[int]


class MessageOutput(_Model):
    """The assistant message the model produced, to be written in the family's own format."""

    message: dict[str, Any]


def _output_kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        return type(value).__name__
    if isinstance(value, dict) and len(value) == 1:
        return {"text": "TextOutput", "token_ids": "TokenOutput", "message": "MessageOutput"}.get(
            next(iter(value))
        )
    return None


Output = Annotated[
    Annotated[TextOutput, Tag("TextOutput")]
    | Annotated[TokenOutput, Tag("TokenOutput")]
    | Annotated[MessageOutput, Tag("MessageOutput")],
    Discriminator(
        _output_kind,
        custom_error_type="output_kind",
        custom_error_message="expected exactly one of text, token_ids, message",
    ),
]


class EngineRecord(_Model):
    """What a serving engine saw for one request: the prompt ids it ran, the boundaries in
    tokens (``u_end`` None when the request carried none), the joint hit at admission and the
    checkpoint kind that served it (``miss`` when none did), and the retention policy."""

    prompt_token_ids: list[int]
    p_end: int = Field(ge=1)
    u_end: int | None = Field(default=None, ge=1)
    d_end: int | None = Field(default=None, ge=1)
    hit_tokens: int = Field(default=0, ge=0)
    served: str = "miss"
    policy: str | None = None


class TraceRequest(_Model):
    """One request of a session."""

    session: str = Field(min_length=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    output: Output | None = None
    engine: EngineRecord | None = None


_REQUEST = TypeAdapter(TraceRequest)


def _error(where: str, exc: ValidationError) -> RequestError:
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p[0].isupper()))
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unexpected field"
    return RequestError(message, location=f"{where}: {loc}" if loc else where)


def parse_line(line: str, where: str) -> TraceRequest:
    """One JSONL line; ``RequestError`` with ``where`` (``path:line``) on bad input."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RequestError(f"not JSON ({exc.msg} at column {exc.colno})", location=where) from None
    if not isinstance(data, dict):
        raise RequestError(f"expected a JSON object, got {type(data).__name__}", location=where)
    try:
        return _REQUEST.validate_python(data)
    except ValidationError as exc:
        raise _error(where, exc) from None


def read_trace(path: str | Path) -> list[TraceRequest]:
    """All requests of a JSONL trace (blank lines skipped)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RequestError(f"cannot read the trace ({exc.strerror})", location=str(path)) from None
    requests = [parse_line(line, f"{path}:{n}") for n, line in enumerate(lines, 1) if line.strip()]
    if not requests:
        raise RequestError("the trace has no requests", location=str(path))
    return requests


def write_trace(path: str | Path, requests: Iterable[TraceRequest]) -> None:
    with Path(path).open("w", encoding="utf-8") as f:
        for request in requests:
            f.write(request.model_dump_json(exclude_none=True) + "\n")


def sessions(requests: Iterable[TraceRequest]) -> dict[str, list[TraceRequest]]:
    """Requests grouped by session, each session in trace order."""
    out: dict[str, list[TraceRequest]] = {}
    for request in requests:
        out.setdefault(request.session, []).append(request)
    return out


# -- tau-bench -------------------------------------------------------------------------------

Reasoning = Literal["none", "seeded"]

_OPENERS = (
    "The user {want}.",
    "Let me look at what the user {want}.",
    "The customer {want}.",
    "So the user {want}.",
)
_WANTS = (
    "wants help with a reservation",
    "is asking about a flight",
    "needs a change to a booking",
    "wants to know the options",
    "has given me new details",
)
_STEPS = (
    "I should check the policy before acting.",
    "I need the user's details first.",
    "The policy says I must confirm before any update.",
    "I should not make up information.",
    "Let me verify the reservation and the payment methods.",
    "Only one tool call at a time.",
    "I need to list the details and get an explicit yes.",
    "Compare the fare and the cabin class.",
)


def seeded_reasoning(rng: random.Random, message: dict[str, Any]) -> str:
    """Synthetic reasoning for one assistant turn (not model text): a few policy-style
    sentences, then what the turn does next. Deterministic for a seeded ``rng``."""
    sentences = [rng.choice(_OPENERS).format(want=rng.choice(_WANTS))]
    sentences += rng.sample(_STEPS, k=rng.randint(1, 4))
    calls = message.get("tool_calls") or []
    if calls:
        sentences.append(f"I will call {calls[0]['function']['name']} now.")
    else:
        sentences.append("I will answer the user directly.")
    return " ".join(sentences)


def tau_bench_trace(
    *,
    reasoning: Reasoning = "none",
    echo_reasoning: bool = False,
    seed: int = 0,
    trajectories: int | None = None,
) -> list[TraceRequest]:
    """The tau-bench airline trajectories as a trace: one request per assistant turn (the
    conversation before it), its output the assistant message that follows.

    ``reasoning="seeded"`` gives every assistant turn synthetic reasoning (``seeded_reasoning``);
    ``echo_reasoning`` makes later requests send it back as ``reasoning_content`` (by default
    they do not, as OpenAI-style clients do not).
    """
    from boundary.datasets import _tau_bench_airline

    out: list[TraceRequest] = []
    for record in _tau_bench_airline()[:trajectories]:
        session = f"tau-airline-{record['task_id']}-{record['trial']}"
        rng = random.Random(f"{seed}:{session}")
        history: list[dict[str, Any]] = []
        for message in record["traj"]:
            if message["role"] == "assistant":
                produced = dict(message)
                if reasoning == "seeded":
                    produced["reasoning_content"] = seeded_reasoning(rng, message)
                out.append(
                    TraceRequest(
                        session=session, messages=list(history), output=MessageOutput(message=produced)
                    )
                )
                history.append(produced if echo_reasoning else message)
            else:
                history.append(message)
    return out
