"""Sessions for production records no client named: grouped by prefix-chaining of prompt ids.

Where it sits: under ``boundary.trace.reader`` (``read_recording`` applies it to every trace it reads,
so ``boundary audit`` and ``boundary experiment`` see the same sessions); it imports only
``prefixes``.

An engine that renders prompts itself sees token ids only; without a session the client named
(``vllm_xargs.boundary_session``), the recorder names the record's session after the request
and marks it ``"session_from": "request_id"``. Such records are chained: a record continues a
session whose first record's stable history (its prompt up to U_end; the whole prompt when no
U_end was recorded) is a prefix of the record's prompt — a conversation's opening messages are
never rewritten, while later history can be (a template that drops earlier reasoning) — the
deepest such history where several are, and takes that session's name. A record that continues
none starts a session under its own name. Only unnamed records chain (a named session is the
client's). Two conversations that open with the same messages (a regenerated first turn, a
repeated benchmark prompt) become one session. The
OpenAI ``user`` field never reaches vLLM's engine, so it cannot name sessions.
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
    the session its prompt continues (see the module docstring). Two sessions never open with
    the same history (the second would have continued the first), so the deepest is unique."""
    roots: dict[str, bytes] = {}  # chained session -> its first record's stable history, packed
    out: list[str] = []
    for request in requests:
        prompt = request.prompt_token_ids
        if request.session_from != REQUEST_ID or prompt is None:
            out.append(request.session)
            continue
        here = packed(prompt)
        candidates = [name for name, root in roots.items() if here.startswith(root)]
        if candidates:
            out.append(max(candidates, key=lambda name: len(roots[name])))
            continue
        end = request.u_end if request.u_end is not None else len(prompt)
        if end > 0:  # an empty history would continue every prompt
            roots[request.session] = packed(prompt[:end])
        out.append(request.session)
    return out
