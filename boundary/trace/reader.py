"""Reading a trace: a file or stdin, line by line within its size bounds, into requests.

Where it sits: the report end's input: ``boundary.audit`` (through ``boundary.cli.audit``) and
``boundary.experiment.workloads`` read traces with ``read_trace``, ``boundary experiment`` reads
a recording's header with ``read_header``, ``boundary.trace.writer`` checks the header of a file
it appends to; it imports the line format (``boundary.trace.records``), ``boundary.trace.chain``,
``boundary.trace.times``, ``boundary.trace.header`` and ``errors``.

The reader holds one line of text at a time (peak memory follows the parsed requests, not the
file). It reads a regular file or, for ``-``, stdin; anything else (a directory, a device, a
FIFO) is refused before it is opened. A line longer than ``MAX_LINE_BYTES`` (64 MiB), a trace
past ``MAX_TRACE_BYTES`` (1 GiB, the vLLM recorder's cap) and bytes that are not UTF-8 are
refused at that line; each line is then parsed as ``boundary.trace.records`` says. A last line
with no newline that is not JSON as it stands is what a writer has not finished (a recording
read while it is written): it is skipped with an ``InputWarning`` naming it. Any other bad line
is an error.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from boundary.errors import InputWarning, RequestError
from boundary.trace.chain import chained_sessions
from boundary.trace.header import RecordingHeader
from boundary.trace.records import TraceRequest, parse_header, parse_line
from boundary.trace.times import check_arrivals

STDIN = "-"
"""The trace path that reads standard input."""

MAX_LINE_BYTES = 64 << 20
"""The longest line of a trace, in bytes, its newline not counted: room for a production record of
some ten million token ids. Read when a trace is read, so a test may lower it."""

MAX_TRACE_BYTES = 1 << 30
"""The largest trace read, in bytes: the vLLM recorder's own cap on what it writes
(``boundary_vllm.recording.RecordLimits.max_bytes``), so every trace it writes reads back."""


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


def read_header(path: str | Path) -> RecordingHeader | None:
    """The header on a trace file's first non-blank line (None: none). Stdin is never read
    here (it can be read once): ``read_recording`` gives its header with its requests."""
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
    module docstring (and ``boundary.trace.records``') for what is refused."""
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
