"""Sessions for production records no client named: grouped by prefix-chaining of prompt ids.

Where it sits: under ``boundary.trace`` (``read_recording`` applies it to every trace it reads,
so ``boundary audit`` and ``boundary experiment`` see the same sessions); it imports only
``prefixes``.

An engine that renders prompts itself sees token ids only; without a session the client named
(``vllm_xargs.boundary_session``), the recorder names the record's session after the request
and marks it ``"session_from": "request_id"``. Such records are chained: a record continues the
session whose latest chained record's stable history (its prompt up to U_end; the whole prompt
when no U_end was recorded) is a prefix of the record's prompt — the deepest such history wins,
the latest record on a tie — and takes that session's name; a record that continues none
starts a session under its own name. Only chain tips are continued (a request that branches
from an earlier turn starts a session), and only unnamed records chain (a named session is the
client's). The OpenAI ``user`` field never reaches vLLM's engine, so it cannot name sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from boundary.prefixes import packed

REQUEST_ID = "request_id"
"""``session_from`` of a record whose session is the request's own id (no client session)."""


class Chainable(Protocol):
    @property
    def session(self) -> str: ...
    @property
    def session_from(self) -> str | None: ...
    @property
    def prompt_token_ids(self) -> list[int] | None: ...
    @property
    def u_end(self) -> int | None: ...


R = TypeVar("R", bound=Chainable)


def chained_sessions(requests: Sequence[R]) -> list[str]:
    """The session of each request, in order: its own, or for an unnamed production record
    the session its prompt continues (see the module docstring)."""
    tips: dict[str, bytes] = {}  # chained session -> its latest record's stable history, packed
    out: list[str] = []
    for request in requests:
        prompt = request.prompt_token_ids
        if request.session_from != REQUEST_ID or prompt is None:
            out.append(request.session)
            continue
        here = packed(prompt)
        best: tuple[int, str] | None = None
        for name, stable in tips.items():  # in insertion order: a later tip wins a tie
            if here.startswith(stable) and (best is None or len(stable) >= best[0]):
                best = (len(stable), name)
        session = request.session if best is None else best[1]
        end = request.u_end if request.u_end is not None else len(prompt)
        tips.pop(session, None)  # re-inserted last: the latest tip
        if end > 0:  # an empty history would continue every prompt
            tips[session] = packed(prompt[:end])
        out.append(session)
    return out
