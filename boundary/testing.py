"""Checks a template maintainer runs in their own pytest suite: does the template expose U_end,
and does every request extend the previous one up to it?

Where it sits: beside the audit, above the renderer: it renders requests through a ``Family``
(or ``Renderer``) and compares consecutive renderings; a maintainer's tests call it (and a
``check-template`` command may), nothing in the library imports it.

    from boundary import Family
    from boundary.testing import assert_exposes_u_end, assert_renders_append_only, builtin_conversations

    fam = Family.from_pretrained("path/to/model")
    conversations = builtin_conversations(limit=8)
    assert_exposes_u_end(fam, conversations)
    assert_renders_append_only(fam, conversations)

A *request* is a conversation prefix that ends before an assistant turn (and the whole
conversation when it does not end with one), rendered with the generation prompt on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest
from typing import Any

from boundary.datasets import mt_bench_questions, mt_bench_reference_answers, tau_bench_airline
from boundary.divergence import head_change
from boundary.errors import BoundaryError
from boundary.family import Family
from boundary.offsets import BoundaryStatus
from boundary.prefixes import common_prefix_length
from boundary.renderer import Renderer
from boundary.rendering import Rendering

__all__ = [
    "RequestCheck",
    "TemplateCheck",
    "assert_exposes_u_end",
    "assert_renders_append_only",
    "builtin_conversations",
    "check",
    "requests_of",
]

Conversation = list[dict[str, Any]]

_TAU_TRAJECTORIES = 4
_TAU_USER_TURNS = 3


def builtin_conversations(limit: int | None = None) -> list[Conversation]:
    """Conversations from the shipped data: tau-bench airline trajectories (system policy, tool
    calls and results) cut to end at their third user turn, alternating with MT-bench two-turn
    chats that ship a reference answer, cut before the second answer. ``limit`` keeps the first
    ``limit`` of them (both kinds from ``limit=2`` on). Fresh lists: callers may change them."""
    tau = []
    for trajectory in tau_bench_airline()[:_TAU_TRAJECTORIES]:
        users = [i for i, m in enumerate(trajectory) if m["role"] == "user"]
        tau.append(trajectory[: users[min(_TAU_USER_TURNS, len(users)) - 1] + 1])
    answers = mt_bench_reference_answers()
    mt = [
        [
            {"role": "user", "content": q["turns"][0]},
            {"role": "assistant", "content": answers[q["question_id"]][0]},
            {"role": "user", "content": q["turns"][1]},
        ]
        for q in mt_bench_questions()
        if q["question_id"] in answers
    ]
    mixed = [c for c in chain.from_iterable(zip_longest(tau, mt)) if c is not None]
    return mixed[:limit]


def requests_of(conversation: Sequence[Mapping[str, Any]]) -> list[int]:
    """The message counts of a conversation's requests, in order: every prefix that ends before
    an assistant turn (never the empty one), then the whole conversation unless it ends with an
    assistant turn."""
    counts = [i for i, m in enumerate(conversation) if i > 0 and m.get("role") == "assistant"]
    if conversation and conversation[-1].get("role") != "assistant":
        counts.append(len(conversation))
    return counts


@dataclass(frozen=True, slots=True)
class RequestCheck:
    """One request: ``conversation[:messages]`` of conversation ``conversation``.

    ``u_end`` / ``p_end`` are its boundaries in tokens (``u_end`` None with ``reason`` when the
    template cannot expose it). Against the previous request of the same conversation
    (``previous`` its message count; None for the first request): ``common_prefix`` is the
    tokens both share, ``extends`` whether they cover the previous U_end (None when that
    request has none, so there is nothing to hold), ``reaches_p_end`` whether they cover the
    previous P_end, and ``first_difference`` where the texts part (``messages[i]`` of the
    previous request, or ``before messages[0]``) with what each side has there.
    """

    conversation: int
    messages: int
    u_end: int | None
    p_end: int
    reason: str | None = None
    previous: int | None = None
    common_prefix: int | None = None
    extends: bool | None = None
    reaches_p_end: bool | None = None
    first_difference: str | None = None

    @property
    def where(self) -> str:
        return f"conversation {self.conversation}, {self.messages} messages"


@dataclass(frozen=True, slots=True)
class TemplateCheck:
    """Every request of a set of conversations, checked. Invariants: ``requests`` in
    conversation order, then request order; ``missing_u_end`` and ``rewrites`` are exactly the
    records with ``u_end is None`` and ``extends is False``."""

    requests: tuple[RequestCheck, ...]

    @property
    def missing_u_end(self) -> list[RequestCheck]:
        return [r for r in self.requests if r.u_end is None]

    @property
    def rewrites(self) -> list[RequestCheck]:
        return [r for r in self.requests if r.extends is False]

    @property
    def ok(self) -> bool:
        return not self.missing_u_end and not self.rewrites

    def u_end_report(self) -> str:
        """The requests without U_end, one a line with the reason ("" when there are none)."""
        lines = [f"{r.where}: U_end UNAVAILABLE: {r.reason}" for r in self.missing_u_end]
        return _report(lines, len(self.requests), "do not expose U_end")

    def append_report(self) -> str:
        """The requests that do not extend the previous one to its U_end ("" when none)."""
        lines = [
            f"{r.where}: does not start with the request of {r.previous} messages up to its U_end: "
            f"{r.common_prefix} tokens shared; first difference in {r.first_difference}; "
            f"P_end {'reachable' if r.reaches_p_end else 'unreachable too'}"
            for r in self.rewrites
        ]
        return _report(lines, len(self.requests), "rewrite the previous request's history")


def _report(lines: list[str], total: int, what: str) -> str:
    if not lines:
        return ""
    return f"{len(lines)} of {total} requests {what}:\n" + "\n".join(f"  {line}" for line in lines)


def check(
    fam: Family | Renderer,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    **render_options: Any,
) -> TemplateCheck:
    """Render every request of ``conversations`` (``requests_of``) with the generation prompt
    on, ``tools`` and ``render_options`` (``variant``, ``now``, template kwargs...) passed to
    ``render``, and record U_end and how each request extends the one before. A render that
    fails raises, with a note naming the request."""
    return TemplateCheck(tuple(_checked(fam, conversations, tools, render_options)))


def _checked(
    fam: Family | Renderer,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    tools: Sequence[Mapping[str, Any]] | None,
    options: dict[str, Any],
) -> Iterator[RequestCheck]:
    for c, conversation in enumerate(conversations):
        before: tuple[int, Rendering] | None = None
        for n in requests_of(conversation):
            try:
                r = fam.render(conversation[:n], tools, True, **options)
            except BoundaryError as exc:
                exc.add_note(f"rendering conversation {c}, {n} messages")
                raise
            found = r.input_end.status is BoundaryStatus.FOUND
            reason = None if found else r.input_end.reason or "no reason given"
            record = RequestCheck(c, n, r.u_end, r.p_end, reason)
            if before is not None:
                record = _against(record, conversation, before, r)
            before = (n, r)
            yield record


def _against(
    record: RequestCheck,
    conversation: Sequence[Mapping[str, Any]],
    before: tuple[int, Rendering],
    r: Rendering,
) -> RequestCheck:
    """``record`` with how ``r`` extends the previous request ``before`` (message count, render)."""
    n, prev = before
    shared = common_prefix_length(prev.token_ids, r.token_ids)
    u_end = prev.u_end
    extends = None if u_end is None else shared >= u_end
    difference = None
    if extends is False:
        head = head_change(conversation[:n], conversation[: record.messages])
        difference = head or _first_difference(prev, r)
    return RequestCheck(
        record.conversation,
        record.messages,
        record.u_end,
        record.p_end,
        record.reason,
        previous=n,
        common_prefix=shared,
        extends=extends,
        reaches_p_end=shared >= prev.p_end,
        first_difference=difference,
    )


def _first_difference(prev: Rendering, r: Rendering) -> str:
    """The message of ``prev`` whose rendering the texts part in (the last one starting at or
    before where they part), and what each text has there."""
    c = common_prefix_length(prev.text, r.text)
    shown = f"{prev.text[c : c + 40]!r} before, {r.text[c : c + 40]!r} now"
    if c >= (prev.input_end.char or 0):
        return f"the tokens only (the text agrees to U_end; BPE merged differently): {shown}"
    at = [i for i, s in enumerate(prev.message_starts) if s is not None and s <= c]
    where = f"messages[{at[-1]}]" if at else "before messages[0]"
    return f"{where}: {shown}"


def assert_exposes_u_end(
    fam: Family | Renderer,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    **render_options: Any,
) -> TemplateCheck:
    """Every request of ``conversations`` has U_end FOUND; else an ``AssertionError`` listing
    each failing request (conversation index, message count) with the UNAVAILABLE reason.
    Returns the check it made."""
    result = check(fam, conversations, tools=tools, **render_options)
    if result.missing_u_end:
        raise AssertionError(result.u_end_report())
    return result


def assert_renders_append_only(
    fam: Family | Renderer,
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    **render_options: Any,
) -> TemplateCheck:
    """Each request's token ids start with the previous request's ids up to that request's
    U_end (so the state kept at U_end is reusable); else an ``AssertionError`` naming each
    request, the message where the renderings first differ and whether P_end is reachable.
    A request after one without U_end is not held to this (``assert_exposes_u_end`` is).
    Returns the check it made."""
    result = check(fam, conversations, tools=tools, **render_options)
    if result.rewrites:
        raise AssertionError(result.append_report())
    return result
