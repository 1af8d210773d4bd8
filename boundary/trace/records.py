"""The trace's line format: a chat request or a production record per line, and its validation.

Where it sits: the format of the report end's one JSONL trace (``boundary audit`` and ``boundary
experiment`` read it): ``boundary.trace.reader`` parses each line here (``parse_line``,
``parse_header``), ``boundary.trace.writer`` and ``boundary_vllm.recording`` (engine) write the
``TraceRequest`` it defines, ``boundary.audit`` and ``boundary.experiment.workloads`` read its
fields; it imports the request stage (``boundary.request``: chat requests are validated as a
render's are), ``boundary.trace.header`` and ``errors``.

One request per line, a session's requests in order. A line is either an OpenAI chat request
plus, optionally, what the model generated for it::

    {"session": "s1", "messages": [...], "tools": [...],
     "output": {"text": "..."} | {"token_ids": [...]} | {"message": {...}}}

or a *production record*: what a serving deployment saw, token ids as the engine had them
(``production_record`` builds it, ``boundary.trace.writer.TraceWriter`` writes it; the vLLM
plugin and its frontend record finished requests so, ``boundary_vllm.recording``)::

    {"session": "s1", "prompt_token_ids": [...], "output": {"token_ids": [...]},
     "u_end": 812, "p_end": 830, "d_end": 871, "served_by": "input_end", "hit_tokens": 800,
     "policy": "both"}

``output.message`` is an assistant message, written the way the family's model emits it
(``boundary.outputs.format_output``). Without ``output`` a chat request's output is the
assistant message the session's next request appends after this request's messages; a
production record without ``output`` ends at its prompt. In a production record ``p_end``
(when given) must equal the prompt length, ``u_end`` lie in ``[0, p_end]`` and ``d_end`` (the
committed end, trailing stop tokens excluded, as the engine computed it) in ``[p_end, p_end +
len(output)]``; without ``d_end`` the readers take the output minus a trailing stop token.
A production record whose session no client named carries ``"session_from": "request_id"``
(its session is the request's id): the reader groups such records into sessions by
prefix-chaining of their prompt ids (``boundary.trace.chain``). A trace may start with a header
line, ``{"recording": {...}}`` (``boundary.trace.header``): what the records hold and the
geometry of the engine that recorded them; ``parse_header`` reads it, and ``parse_line``
refuses it (it belongs on the first line only).
``arrival_s`` (optional, either kind) is when the request arrived, in seconds on one clock (the
vLLM recorder writes Unix time), checked by ``boundary.trace.times``. ``served_by`` is the
checkpoint kind that served the request's hit (``prompt_end``, ``input_end``, ``decode_end``,
``reactive``, ``prompt_end_block``), ``untracked`` (the engine
served a state whose origin it had not recorded), ``unattributed`` (a hit the server reported
without its kind: a frontend's record), ``unknown`` (the server did not report its cached
tokens: vLLM without ``--enable-prompt-tokens-details``; never a miss, and then without
``hit_tokens``) or null for no hit; ``hit_tokens`` is the hit's length and ``policy`` the
engine's checkpoint policy, both as recorded.

Every error names the file and line, and the session when the line has one:
``trace.jsonl:12 (session 's1'): output: ...``. A line is refused here when no later stage may
meet it, so that ``boundary audit`` and ``boundary experiment`` refuse the same lines with the
same message: JSON nested too deeply to parse, token ids outside ``[0, 2**32)`` (as ints, not
floats or strings), and chat requests whose ``messages`` / ``tools`` / ``output.message`` fail
boundary's request validation (``boundary.request``: shapes, nesting, lone surrogates); bytes
that are not UTF-8 are the reader's to refuse.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from boundary.errors import RequestError
from boundary.request.limits import check_message_limits
from boundary.request.validation import parse_messages, parse_tools
from boundary.trace.header import HEADER_KEY, RecordingHeader

TokenId = Annotated[int, Field(ge=0, lt=2**32, strict=True)]
"""A token id as engines store them (an unsigned 32-bit int)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextOutput(_Model):
    """The generated text, stop token included."""

    text: str


class TokenOutput(_Model):
    """The committed generated token ids."""

    token_ids: list[TokenId]


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


ServedBy = Literal[
    "prompt_end",
    "input_end",
    "decode_end",
    "reactive",
    "prompt_end_block",
    "untracked",
    "unattributed",
    "unknown",
]
UNKNOWN_HIT = "unknown"
"""``served_by`` of a request whose hit the server did not report (no ``hit_tokens``)."""


_PRODUCTION_ONLY = ("u_end", "p_end", "d_end", "served_by", "hit_tokens", "policy", "session_from")


class TraceRequest(_Model):
    """One request of a session: a chat request (``messages``) or a production record
    (``prompt_token_ids`` with the engine's ``u_end`` / ``p_end`` / ``d_end`` / ``served_by``)."""

    session: str = Field(min_length=1)
    messages: list[dict[str, Any]] | None = Field(None, min_length=1)
    tools: list[dict[str, Any]] | None = None
    output: Output | None = None
    prompt_token_ids: list[TokenId] | None = Field(None, min_length=1)
    u_end: int | None = Field(None, ge=0)
    p_end: int | None = Field(None, gt=0)
    d_end: int | None = Field(None, ge=0)
    served_by: ServedBy | None = None
    hit_tokens: int | None = Field(None, ge=0)
    policy: str | None = Field(None, min_length=1)
    arrival_s: float | None = Field(None, ge=0, allow_inf_nan=False, strict=True)
    session_from: Literal["request_id"] | None = None  # the session is the request's id: chained by prefix
    _where: str | None = PrivateAttr(None)  # ``path:line (session ...)`` when read from a file

    def __eq__(self, other: object) -> bool:
        """Equal fields; where a request was read from does not count."""
        if not isinstance(other, TraceRequest):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # lists inside: never hashable

    @property
    def where(self) -> str | None:
        """Where the request was read (``trace.jsonl:12 (session 's1')``), if from a file."""
        return self._where

    @model_validator(mode="after")
    def _one_kind(self) -> TraceRequest:
        if (self.messages is None) == (self.prompt_token_ids is None):
            raise ValueError("expected exactly one of messages, prompt_token_ids")
        if self.messages is not None:
            extra = [k for k in _PRODUCTION_ONLY if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{extra[0]} belongs to a production record (prompt_token_ids)")
            return self
        n = len(self.prompt_token_ids or ())
        if self.p_end is not None and self.p_end != n:
            raise ValueError(f"p_end {self.p_end} != prompt length {n}")
        if self.u_end is not None and self.u_end > n:
            raise ValueError(f"u_end {self.u_end} beyond the prompt ({n} tokens)")
        if self.output is not None and not isinstance(self.output, TokenOutput):
            raise ValueError('a production record\'s output is {"token_ids": [...]}')
        if self.served_by == UNKNOWN_HIT and self.hit_tokens is not None:
            raise ValueError(
                f"served_by {UNKNOWN_HIT!r} with hit_tokens {self.hit_tokens}: an unknown hit has none"
            )
        if self.d_end is not None:
            end = n + (len(self.output.token_ids) if isinstance(self.output, TokenOutput) else 0)
            if not n <= self.d_end <= end:
                raise ValueError(f"d_end {self.d_end} outside the output ([{n}, {end}])")
        return self

    @property
    def is_production(self) -> bool:
        """A production record: token ids as the engine saw them, nothing to render."""
        return self.prompt_token_ids is not None


def production_record(
    session: str,
    prompt_token_ids: Sequence[int],
    output_token_ids: Sequence[int] | None,
    *,
    u_end: int | None = None,
    d_end: int | None = None,
    served_by: str | None = None,
    hit_tokens: int | None = None,
    policy: str | None = None,
    arrival_s: float | None = None,
    session_from: str | None = None,
) -> TraceRequest:
    """One finished request as a production record (validated as the reader validates it);
    ``p_end`` is the prompt length; ``session_from="request_id"``: no client named the session."""
    return TraceRequest.model_validate(
        {
            "session": session,
            "prompt_token_ids": list(prompt_token_ids),
            "output": None if output_token_ids is None else {"token_ids": list(output_token_ids)},
            "u_end": u_end,
            "p_end": len(prompt_token_ids),
            "d_end": d_end,
            "served_by": served_by,
            "hit_tokens": hit_tokens,
            "policy": policy,
            "arrival_s": arrival_s,
            "session_from": session_from,
        }
    )


_REQUEST = TypeAdapter(TraceRequest)


def _error(where: str, exc: ValidationError) -> RequestError:
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p[0].isupper()))
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unexpected field"
    elif err["type"] == "value_error":
        message = message.removeprefix("Value error, ")
    return RequestError(message, location=f"{where}: {loc}" if loc else where)


def _check_chat(request: TraceRequest, where: str) -> None:
    """A chat request's messages, tools and output message as boundary's request stage
    validates them; errors located ``where: messages[2].content``."""
    try:
        if request.messages is not None:
            parse_messages(request.messages)
            parse_tools(request.tools)
        if isinstance(request.output, MessageOutput):
            check_message_limits(request.output.message, "output.message")
    except RequestError as exc:
        raise RequestError(
            exc.detail, location=f"{where}: {exc.location}" if exc.location else where
        ) from None


def parse_line(line: str, where: str) -> TraceRequest:
    """One JSONL line; ``RequestError`` with ``where`` (``path:line``, plus the session when
    the line names one) on bad input."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RequestError(f"not JSON ({exc.msg} at column {exc.colno})", location=where) from None
    except RecursionError:
        raise RequestError("not readable: JSON nested too deeply", location=where) from None
    if not isinstance(data, dict):
        raise RequestError(f"expected a JSON object, got {type(data).__name__}", location=where)
    if HEADER_KEY in data:
        raise RequestError("a recording header belongs on the trace's first line only", location=where)
    if isinstance(data.get("session"), str) and data["session"]:
        where = f"{where} (session {data['session']!r})"
    try:
        request = _REQUEST.validate_python(data)
    except ValidationError as exc:
        raise _error(where, exc) from None
    _check_chat(request, where)
    request._where = where
    return request


class _HeaderLine(_Model):
    """A header line: the one key ``recording``."""

    recording: RecordingHeader


def parse_header(line: str, where: str) -> RecordingHeader | None:
    """The recording header on ``line`` (None: the line is no header); ``RequestError`` naming
    the field of a malformed one."""
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None  # parse_line names the problem
    if not isinstance(data, dict) or HEADER_KEY not in data:
        return None
    try:
        return _HeaderLine.model_validate(data).recording
    except ValidationError as exc:
        raise _error(where, exc) from None


def sessions(requests: Iterable[TraceRequest]) -> dict[str, list[TraceRequest]]:
    """Requests grouped by session, each session in trace order."""
    out: dict[str, list[TraceRequest]] = {}
    for request in requests:
        out.setdefault(request.session, []).append(request)
    return out
