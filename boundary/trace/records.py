"""Multi-turn traces: one JSONL format for ``boundary audit`` and ``boundary experiment``.

Where it sits: input and output of the report end: ``boundary.audit`` and
``boundary.experiment.workloads`` read it, ``boundary_vllm.recording`` (engine) writes it; it
imports the request stage (``boundary.request``: chat requests are validated as a render's
are), ``trace_times``, ``datasets`` and ``errors``.

One request per line, a session's requests in order. A line is either an OpenAI chat request
plus, optionally, what the model generated for it::

    {"session": "s1", "messages": [...], "tools": [...],
     "output": {"text": "..."} | {"token_ids": [...]} | {"message": {...}}}

or a *production record*: what a serving deployment saw, token ids as the engine had them
(``TraceWriter`` / ``production_record`` write it; the vLLM plugin and its frontend record
finished requests so, ``boundary_vllm.recording``)::

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
geometry of the engine that recorded them; ``read_recording`` returns it, ``read_trace`` skips
it, and it is refused on any other line.
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
``trace.jsonl:12 (session 's1'): output: ...``. The reader refuses what no later stage may
meet, so that ``boundary audit`` and ``boundary experiment`` refuse the same lines with the same
message: bytes that are not UTF-8, JSON nested too deeply to parse, token ids outside
``[0, 2**32)`` (as ints, not floats or strings), and chat requests whose ``messages`` /
``tools`` / ``output.message`` fail boundary's request validation (``boundary.request``:
shapes, nesting, lone surrogates).

The reader holds one line of text at a time (peak memory follows the parsed requests, not the
file). It reads a regular file or, for ``-``, stdin; anything else (a directory, a device, a
FIFO) is refused before it is opened. A line longer than ``MAX_LINE_BYTES`` (64 MiB) and a
trace past ``MAX_TRACE_BYTES`` (1 GiB, the vLLM recorder's cap) are refused at that line. A last
line with no newline that is not JSON as it stands is what a writer has not finished (a
recording read while it is written): it is skipped with an ``InputWarning`` naming it. Any
other bad line is an error.

``tau_bench_trace`` turns the shipped tau-bench airline trajectories into such a trace, with
optional seeded synthetic reasoning (the data carries no model reasoning).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import stat
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

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

from boundary.errors import InputWarning, RequestError
from boundary.request.limits import check_message_limits
from boundary.request.validation import parse_messages, parse_tools
from boundary.trace.chain import chained_sessions
from boundary.trace.header import HEADER_KEY, RecordingHeader
from boundary.trace.times import check_arrivals

TokenId = Annotated[int, Field(ge=0, lt=2**32, strict=True)]
"""A token id as engines store them (an unsigned 32-bit int)."""

STDIN = "-"
"""The trace path that reads standard input."""

MAX_LINE_BYTES = 64 << 20
"""The longest line of a trace, in bytes, its newline not counted: room for a production record of
some ten million token ids. Read when a trace is read, so a test may lower it."""

MAX_TRACE_BYTES = 1 << 30
"""The largest trace read, in bytes: the vLLM recorder's own cap on what it writes
(``boundary_vllm.recording.RecordLimits.max_bytes``), so every trace it writes reads back."""


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


def _decoded(line: bytes, where: str) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = line[exc.start]
        raise RequestError(f"not UTF-8 (byte 0x{byte:02x} at byte {exc.start + 1})", location=where) from None


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


@contextmanager
def open_trace(path: str | Path) -> Iterator[BinaryIO]:
    """The trace's bytes: stdin for ``-`` (left open), else a regular file, checked before it is
    opened (opening a FIFO blocks, a device may never end); ``RequestError`` naming ``path``."""
    if str(path) == STDIN:
        yield sys.stdin.buffer
        return
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a file")
            raise RequestError(
                f"not a regular file ({kind}); give a trace file, or - for stdin", location=str(path)
            )
        with Path(path).open("rb") as file:
            yield file
    except OSError as exc:  # opening or reading it
        raise RequestError(f"cannot read the trace ({exc.strerror})", location=str(path)) from None


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def _lines(file: BinaryIO, name: str) -> Iterator[tuple[str, bytes]]:
    """``(name:line, bytes)`` for each line of ``file``, its newline kept (only the last line
    can lack one), one line in memory at a time; ``RequestError`` at the first line longer
    than ``MAX_LINE_BYTES`` or the first that takes the trace past ``MAX_TRACE_BYTES``."""
    line_bound, trace_bound = MAX_LINE_BYTES, MAX_TRACE_BYTES
    total = 0
    for n in itertools.count(1):
        raw = file.readline(line_bound + 1)  # one byte more than the bound: the newline
        if not raw:
            return
        where = f"{name}:{n}"
        if len(raw) - raw.endswith(b"\n") > line_bound:
            raise RequestError(
                f"the line is longer than {_size(line_bound)}, the bound on one line", location=where
            )
        total += len(raw)
        if total > trace_bound:
            raise RequestError(
                f"the trace goes on past {_size(trace_bound)}, the bound on a trace", location=where
            )
        yield where, raw


def _cut_off(raw: bytes) -> bool:
    """A last line its writer has not finished: no newline, and not UTF-8 or not JSON as it stands."""
    if raw.endswith(b"\n"):
        return False
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return True
    except RecursionError:
        return False
    return False


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


def read_header(path: str | Path) -> RecordingHeader | None:
    """The header on a trace file's first non-blank line (None: none; stdin is never read here,
    so a header arriving on stdin is only skipped by ``read_trace``)."""
    if str(path) == STDIN:
        return None
    with open_trace(path) as file:
        for where, raw in _lines(file, str(path)):
            try:
                line = _decoded(raw, where)
                if not line.strip():
                    continue  # blank lines are skipped, as ``read_recording`` skips them
                return parse_header(line, where)
            except RequestError:
                if _cut_off(raw):
                    return None
                raise
    return None


def read_trace(path: str | Path) -> list[TraceRequest]:
    """All requests of a JSONL trace (``-``: stdin), its header skipped (``read_recording``)."""
    return read_recording(path)[1]


def read_recording(path: str | Path) -> tuple[RecordingHeader | None, list[TraceRequest]]:
    """The header and all requests of a JSONL trace (``-``: stdin), read line by line, blank
    lines skipped; lines end at ``\n`` (and ``\r\n``) only, so a JSON string may hold U+2028
    and the like. Unnamed production records take the session their prompt chains to
    (``boundary.trace.chain``). A cut-off last line is skipped with an ``InputWarning``; see the
    module docstring for what is refused."""
    name = "<stdin>" if str(path) == STDIN else str(path)
    requests = []
    header: RecordingHeader | None = None
    first = True
    with open_trace(path) as file:
        for where, raw in _lines(file, name):
            try:
                line = _decoded(raw, where)
                if not line.strip():
                    continue
                if first:
                    first = False
                    header = parse_header(line, where)
                    if header is not None:
                        continue
                requests.append(parse_line(line, where))
            except RequestError:
                if not _cut_off(raw):
                    raise
                warnings.warn(
                    f"{where}: the last line is cut off (a recording still being written?); skipped",
                    InputWarning,
                    stacklevel=2,
                )
    if not requests:
        raise RequestError("the trace has no requests", location=name)
    requests = _chained(requests)
    check_arrivals(requests)
    return header, requests


def _chained(requests: list[TraceRequest]) -> list[TraceRequest]:
    """``requests`` with each unnamed production record in the session it chains to."""
    names = chained_sessions(requests)
    out = []
    for request, name in zip(requests, names, strict=True):
        if name != request.session:
            where = request.where
            request = request.model_copy(update={"session": name})
            request._where = where
        out.append(request)
    return out


def write_trace(path: str | Path, requests: Iterable[TraceRequest]) -> None:
    with Path(path).open("w", encoding="utf-8") as f:
        for request in requests:
            f.write(request.model_dump_json(exclude_none=True) + "\n")


class TraceWriter:
    """Appends records to a JSONL trace, at most ``max_records`` of them and, with
    ``max_bytes``, at most that many bytes (later ones are counted in ``dropped``, not
    written); lines are buffered and flushed every ``flush_every`` records, on ``flush`` and on
    ``close``. With ``header``, an empty file starts with it (its bytes count), and a file that
    already holds records is appended to only under an equal header (``ValueError`` otherwise:
    one file, one engine). Not thread-safe: a recorder that writes from another thread hands
    records to one writer through a queue. Usable as a context manager."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_records: int = 100_000,
        flush_every: int = 64,
        max_bytes: int | None = None,
        header: RecordingHeader | None = None,
    ) -> None:
        self.path = Path(path)
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.flush_every = max(1, flush_every)
        self.written = 0
        self.bytes = 0
        self.dropped = 0
        if header is not None and self.path.is_file() and self.path.stat().st_size:
            found = read_header(self.path)
            if found != header:
                said = "no header" if found is None else f"the header of another engine ({found.line()})"
                raise ValueError(f"{self.path}: holds a recording with {said}; record to a new file")
            header = None  # already there
        self._file = self.path.open("a", encoding="utf-8")
        if header is not None:
            line = header.line() + "\n"
            self._file.write(line)
            self._file.flush()
            self.bytes += len(line.encode("utf-8"))

    def write(self, record: TraceRequest) -> bool:
        """Append ``record``; False when a bound is reached and it was dropped."""
        if self.written >= self.max_records:
            self.dropped += 1
            return False
        line = record.model_dump_json(exclude_none=True) + "\n"
        size = len(line.encode("utf-8"))
        if self.max_bytes is not None and self.bytes + size > self.max_bytes:
            self.dropped += 1
            return False
        self._file.write(line)
        self.written += 1
        self.bytes += size
        if self.written % self.flush_every == 0:
            self._file.flush()
        return True

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    from boundary.shipped.datasets import _tau_bench_airline

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
