"""Production traces: each finished request written as a production record of the audit's
JSONL (``boundary.trace.records``), so ``boundary audit`` and ``boundary experiment`` replay what a
deployment really saw.

Where it sits: the engine end feeding the report end: ``scheduler`` (engine side) and ``client``
(frontend side) record finished requests with it into ``boundary.trace.records``'s format, which ``boundary
audit`` and ``boundary experiment`` read.

A record holds the session id (``chat_request(..., session=...)`` puts it in ``vllm_xargs``;
without one, the request id, marked ``"session_from": "request_id"`` so that readers group such
records by prefix-chaining of their prompts, ``boundary.trace.chain``), the prompt ids as the
engine ran them, the committed output ids, U_end / P_end / D_end, the arrival time
(``arrival_s``: the engine's ``Request.arrival_time``, Unix seconds, or the time the frontend sent
the request), the joint hit at admission
(``hit_tokens``), the checkpoint kind that served it (``served_by``: null for a miss,
``untracked`` for a state of unknown origin, ``unattributed`` in a frontend's record,
``unknown`` with no ``hit_tokens`` where the server did not report its cached tokens) and the
policy. ``RecorderStats.unknown_hits`` counts the records written with an unknown hit.
Records are written as requests finish, so a session whose requests overlap in time can be
written out of arrival order, which the reader refuses. ``boundary.trace.records.production_record``
builds it and ``boundary.trace.writer.TraceWriter`` writes it.

With a ``header`` (``boundary.trace.header.RecordingHeader``: the engine's geometry and what the
records hold, ``boundary_vllm.recorded_engine.recording_header`` reads it from the engine's
config) the file starts with it, and ``boundary experiment`` replays at that geometry.

Opt-in and bounded: on only with a path (``additional_config["boundary"]["record_path"]`` or
the ``BOUNDARY_RECORD_PATH`` environment variable); at most ``max_records`` lines and
``max_bytes`` bytes are written, the rest counted as dropped. Off the scheduler's hot path:
``submit`` appends the finished request (or a callable that builds it from references to the
request's values) to a deque — no copy, no serialization, no lock, no wake-up of another
thread — and never blocks; a full backlog drops the record and counts it. A background thread
owns the one ``TraceWriter`` (it is not thread-safe): it wakes every ``poll_s`` (or on
``flush`` / ``close``), then builds, validates, serializes and writes the backlog, yielding the
GIL between records. Waking it per request instead (a ``queue.Queue``) made the scheduler
thread wait for the writer's GIL turns: a median of about 92 µs per finished request in a
running engine, by a review's measurement. ``flush`` waits for the backlog, ``close`` also
stops the thread.

This module never imports vLLM (the frontend records with it too).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from boundary.trace.chain import REQUEST_ID
from boundary.trace.header import RecordingHeader
from boundary.trace.reader import MAX_TRACE_BYTES
from boundary.trace.records import UNKNOWN_HIT, TraceRequest, production_record
from boundary.trace.writer import TraceWriter

RECORD_ENV = "BOUNDARY_RECORD_PATH"
MISS = "miss"  # no hit: recorded as ``served_by: null``
UNATTRIBUTED = "unattributed"  # a hit the server reported without the kind that served it
UNKNOWN = UNKNOWN_HIT  # the server did not report a hit at all: never counted as a miss


@dataclass(frozen=True, slots=True)
class RecordLimits:
    max_records: int = 100_000
    max_bytes: int = MAX_TRACE_BYTES  # what ``boundary audit`` reads whole
    queue_size: int = 4096  # finished requests waiting for the writer; beyond it they are dropped
    poll_s: float = 0.25  # how often the writer thread wakes to write the backlog


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """One finished request as the scheduler hands it over: references, serialized later.
    ``d_end``: the committed end (trailing stop tokens excluded); ``served``: the kind that
    served the hit, ``miss``, ``untracked``, ``unattributed`` or ``unknown`` (then
    ``hit_tokens`` is None, and only then); ``arrival_s``: when the request arrived (Unix
    seconds; None: not known); ``session_named``: a client named ``session`` (else it is the
    request's id)."""

    session: str
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]
    u_end: int | None
    d_end: int | None
    hit_tokens: int | None
    served: str
    policy: str | None
    arrival_s: float | None = None
    session_named: bool = True


Submitted = FinishedRequest | Callable[[], FinishedRequest]  # what ``TraceRecorder.submit`` takes


def trace_record(finished: FinishedRequest) -> TraceRequest:
    """The production record of ``finished`` (validated as ``boundary.trace.reader`` reads it)."""
    return production_record(
        finished.session,
        finished.prompt_token_ids,
        finished.output_token_ids,
        u_end=finished.u_end,
        d_end=finished.d_end,
        served_by=None if finished.served == MISS else finished.served,
        hit_tokens=finished.hit_tokens,
        policy=finished.policy,
        arrival_s=finished.arrival_s,
        session_from=None if finished.session_named else REQUEST_ID,
    )


@dataclass(slots=True)
class RecorderStats:
    """Counts since the recorder started; each field has one writer thread."""

    written: int = 0  # writer thread
    unknown_hits: int = 0  # writer thread: records written whose hit the server did not report
    bytes: int = 0  # writer thread
    dropped_by_writer: int = 0  # writer thread: a limit reached when the record came to be written
    invalid: int = 0  # writer thread: a record the trace schema refused, or a failed write
    last_error: str | None = None  # writer thread
    dropped_queue_full: int = 0  # submitting thread
    refused: int = 0  # submitting thread: closed, or a limit already reached

    @property
    def dropped_over_limit(self) -> int:
        return self.refused + self.dropped_by_writer


@dataclass(slots=True)
class TraceRecorder:
    """Appends finished requests to ``path`` as production records from a background thread.

    Invariant: ``submitted == written + dropped_by_writer + invalid + len(backlog)`` counts
    every accepted record; ``flush`` returns once the backlog it saw is written."""

    path: Path
    limits: RecordLimits = field(default_factory=RecordLimits)
    stats: RecorderStats = field(default_factory=RecorderStats)
    header: RecordingHeader | None = None  # the file's first line (see ``TraceWriter``)
    _backlog: deque[Submitted] = field(init=False, default_factory=deque)
    _submitted: int = 0  # submitting thread
    _done: int = 0  # writer thread: accepted records handled (written, dropped or invalid)
    _progress: threading.Condition = field(init=False, default_factory=threading.Condition)
    _wake: threading.Event = field(init=False, default_factory=threading.Event)
    _thread: threading.Thread = field(init=False)
    _closed: bool = False

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        writer = TraceWriter(
            self.path,
            max_records=self.limits.max_records,
            max_bytes=self.limits.max_bytes,
            flush_every=self.limits.queue_size,
            header=self.header,
        )
        self._thread = threading.Thread(
            target=self._write_loop, args=(writer,), name="boundary-trace-recorder", daemon=True
        )
        self._thread.start()

    @property
    def full(self) -> bool:
        """Every further record would be dropped (a limit was reached)."""
        s = self.stats
        return s.written >= self.limits.max_records or s.bytes >= self.limits.max_bytes

    def submit(self, finished: Submitted) -> bool:
        """Queue ``finished`` (or a callable the writer thread calls to build it); never blocks,
        never wakes the writer (False: dropped)."""
        if self._closed or self.full:
            self.stats.refused += 1
            return False
        if len(self._backlog) >= self.limits.queue_size:
            self.stats.dropped_queue_full += 1
            return False
        self._submitted += 1
        self._backlog.append(finished)  # atomic under the GIL; the writer pops from the left
        return True

    def flush(self) -> None:
        """Wait until every record submitted so far is written."""
        target = self._submitted
        with self._progress:
            while self._done < target and self._thread.is_alive():
                self._wake.set()
                self._progress.wait(0.05)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join()

    def _write_loop(self, writer: TraceWriter) -> None:
        """The writer thread: the only user of ``writer``; drains the backlog, then sleeps."""
        with writer:
            while True:
                self._wake.wait(self.limits.poll_s)
                self._wake.clear()
                closing = self._closed
                self._drain(writer)
                if closing:
                    return

    def _drain(self, writer: TraceWriter) -> None:
        """Write the backlog; the file is flushed before the last record counts as done."""
        while self._backlog:
            self._write(writer, self._backlog.popleft())
            if not self._backlog:
                writer.flush()
            with self._progress:
                self._done += 1
                self._progress.notify_all()
            time.sleep(0)  # let the scheduler thread take the GIL between records

    def _write(self, writer: TraceWriter, item: Submitted) -> None:
        s = self.stats
        try:
            finished = item if isinstance(item, FinishedRequest) else item()
        except Exception as exc:  # never stops the engine
            s.invalid += 1
            s.last_error = f"building a record: {type(exc).__name__}: {exc}"
            return
        try:
            kept = writer.write(trace_record(finished))
        except Exception as exc:  # a bad record (or a full disk) never stops the engine
            s.invalid += 1
            s.last_error = f"session {finished.session!r}: {type(exc).__name__}: {exc}"
            return
        if kept:
            s.written, s.bytes = writer.written, writer.bytes
            s.unknown_hits += finished.served == UNKNOWN
        else:
            s.dropped_by_writer += 1


def recorder_from(
    path: str | None,
    *,
    max_records: int,
    max_bytes: int,
    environ: Mapping[str, str] = os.environ,
    header: RecordingHeader | None = None,
) -> TraceRecorder | None:
    """The recorder a setting or ``BOUNDARY_RECORD_PATH`` asks for (None: recording off);
    ``header``: the engine's, written first (``recorded_engine.recording_header``)."""
    chosen = path or environ.get(RECORD_ENV)
    if not chosen:
        return None
    return TraceRecorder(
        Path(chosen), RecordLimits(max_records=max_records, max_bytes=max_bytes), header=header
    )
