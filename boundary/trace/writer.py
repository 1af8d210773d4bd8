"""Writing a trace: requests to a JSONL file, and ``TraceWriter`` appending records under bounds.

Where it sits: the report end's output: ``boundary_vllm.recording`` (engine) records finished
requests with ``TraceWriter``, ``boundary.cli.audit`` and ``boundary.experiment.workloads.mooncake``
write traces with ``write_trace``; what it writes ``boundary.trace.reader`` reads back. It imports
``boundary.trace.records`` (the lines), ``boundary.trace.header`` and ``boundary.trace.reader``
(the header of a file it appends to).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from boundary.trace.header import RecordingHeader
from boundary.trace.reader import read_header
from boundary.trace.records import TraceRequest


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
