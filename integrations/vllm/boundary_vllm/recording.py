"""Production traces: each finished request written as a line of the audit's JSONL
(``boundary.trace``), so ``boundary audit`` and ``boundary experiment`` replay what a
deployment really saw.

A line holds the session id and the conversation the frontend sent (``chat_request(...,
session=..., record=True)`` puts them in ``vllm_xargs``: the engine sees token ids only), the
committed output ids, and what the engine saw (``boundary.trace.EngineRecord``): the prompt
ids, U_end / P_end / D_end, the joint hit at admission and the checkpoint kind that served it.

Opt-in and bounded: on only with a path (``additional_config["boundary"]["record_path"]`` or
the ``BOUNDARY_RECORD_PATH`` environment variable); at most ``max_records`` lines and
``max_bytes`` bytes are written, the rest counted as dropped. Off the scheduler's hot path:
``submit`` only queues references to the finished request's values (no copy, no
serialization) and never blocks — a full queue drops the record and counts it; a background
thread serializes and writes. ``flush`` waits for the queue, ``close`` also stops the thread.

This module never imports vLLM (the frontend records with it too); ``trace_line`` is the one
place that builds the audit's record.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RECORD_ENV = "BOUNDARY_RECORD_PATH"


@dataclass(frozen=True, slots=True)
class RecordLimits:
    max_records: int = 100_000
    max_bytes: int = 1 << 30
    queue_size: int = 4096  # finished requests waiting for the writer; beyond it they are dropped


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """One finished request as the scheduler hands it over: references, serialized later.
    ``conversation``: the frontend's JSON ``{"messages": [...], "tools": [...]}``."""

    session: str
    conversation: str | None
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]
    p_end: int
    u_end: int | None
    d_end: int | None
    hit_tokens: int
    served: str
    policy: str | None


def trace_line(finished: FinishedRequest) -> str | None:
    """The audit's JSONL line for ``finished`` (None without a conversation: the audit renders
    messages, which the engine never sees)."""
    from boundary.trace import EngineRecord, TokenOutput, TraceRequest

    if finished.conversation is None:
        return None
    conversation = json.loads(finished.conversation)
    record = TraceRequest(
        session=finished.session,
        messages=conversation["messages"],
        tools=conversation.get("tools") or None,
        output=TokenOutput(token_ids=list(finished.output_token_ids)),
        engine=EngineRecord(
            prompt_token_ids=list(finished.prompt_token_ids),
            p_end=finished.p_end,
            u_end=finished.u_end,
            d_end=finished.d_end,
            hit_tokens=finished.hit_tokens,
            served=finished.served,
            policy=finished.policy,
        ),
    )
    return record.model_dump_json(exclude_none=True) + "\n"


def conversation_json(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> str:
    """The conversation as the frontend sends it for recording."""
    body: dict[str, Any] = {"messages": [dict(m) for m in messages]}
    if tools:
        body["tools"] = [dict(t) for t in tools]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


@dataclass(slots=True)
class RecorderStats:
    written: int = 0
    bytes: int = 0
    dropped_queue_full: int = 0
    dropped_over_limit: int = 0
    without_conversation: int = 0
    invalid: int = 0
    last_error: str | None = None


_STOP = object()


@dataclass(slots=True)
class TraceRecorder:
    """Appends finished requests to ``path`` as audit JSONL from a background thread."""

    path: Path
    limits: RecordLimits = field(default_factory=RecordLimits)
    stats: RecorderStats = field(default_factory=RecorderStats)
    _queue: queue.Queue[Any] = field(init=False)
    _thread: threading.Thread = field(init=False)
    _closed: bool = False

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._queue = queue.Queue(self.limits.queue_size)
        self._thread = threading.Thread(target=self._write_loop, name="boundary-trace-recorder", daemon=True)
        self._thread.start()

    @property
    def full(self) -> bool:
        """Every further record would be dropped (a limit was reached)."""
        s = self.stats
        return s.written >= self.limits.max_records or s.bytes >= self.limits.max_bytes

    def submit(self, finished: FinishedRequest) -> bool:
        """Queue ``finished``; never blocks (False: dropped)."""
        if self._closed or self.full:
            self.stats.dropped_over_limit += 1
            return False
        try:
            self._queue.put_nowait(finished)
        except queue.Full:
            self.stats.dropped_queue_full += 1
            return False
        return True

    def flush(self) -> None:
        """Wait until every queued record is written."""
        self._queue.join()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()

    def _write_loop(self) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            while True:
                item = self._queue.get()
                try:
                    if item is _STOP:
                        return
                    self._write(out, item)
                    if self._queue.empty():
                        out.flush()
                finally:
                    self._queue.task_done()

    def _write(self, out: Any, finished: FinishedRequest) -> None:
        s = self.stats
        try:
            line = trace_line(finished)
        except Exception as exc:  # a malformed conversation from a client never stops the engine
            s.invalid += 1
            s.last_error = f"session {finished.session!r}: {type(exc).__name__}: {exc}"
            return
        if line is None:
            s.without_conversation += 1
            return
        size = len(line.encode("utf-8"))
        if self.full or s.bytes + size > self.limits.max_bytes:
            s.dropped_over_limit += 1
            return
        out.write(line)
        s.written += 1
        s.bytes += size


def recorder_from(
    path: str | None, *, max_records: int, max_bytes: int, environ: Mapping[str, str] = os.environ
) -> TraceRecorder | None:
    """The recorder a setting or ``BOUNDARY_RECORD_PATH`` asks for (None: recording off)."""
    chosen = path or environ.get(RECORD_ENV)
    if not chosen:
        return None
    return TraceRecorder(Path(chosen), RecordLimits(max_records=max_records, max_bytes=max_bytes))
