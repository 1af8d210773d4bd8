"""Arrival times in a trace (``arrival_s``): on every line or none, never decreasing in a session.

Where it sits: under ``boundary.trace.reader`` (``read_trace`` calls ``check_arrivals`` on every trace
it reads, so ``boundary audit`` and ``boundary experiment`` refuse the same lines); it imports
only ``errors``.

Each value is already a finite number ``>= 0`` (the line's schema); here the trace as a whole:
either every line gives ``arrival_s`` or none does, and within a session a request never
arrives before the one before it. Errors name the line and the field:
``trace.jsonl:3 (session 's1'): arrival_s: 4.0 is before 9.5 at trace.jsonl:2 (session 's1')``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from boundary.errors import RequestError


class Timed(Protocol):
    """What is checked of a trace line."""

    @property
    def session(self) -> str: ...
    @property
    def arrival_s(self) -> float | None: ...
    @property
    def where(self) -> str | None: ...


def check_arrivals(requests: Sequence[Timed]) -> bool:
    """Whether the trace has arrival times; ``RequestError`` at ``where: arrival_s`` for a line
    that gives one when the first line does not (or the reverse), or one earlier than its
    session's previous request."""
    timed = bool(requests) and requests[0].arrival_s is not None
    last: dict[str, Timed] = {}
    for k, r in enumerate(requests):
        where = (r.where or f"request {k} (session {r.session!r})") + ": arrival_s"
        if (r.arrival_s is not None) != timed:
            said = "gives" if timed else "does not give"
            first = requests[0].where or "request 0"
            raise RequestError(f"given on some lines only ({first} {said} one)", location=where)
        before = last.get(r.session)
        last[r.session] = r
        if before is None or before.arrival_s is None or r.arrival_s is None:
            continue
        if r.arrival_s < before.arrival_s:
            at = before.where or "the session's previous request"
            raise RequestError(f"{r.arrival_s} is before {before.arrival_s} at {at}", location=where)
    return timed
