"""Template check: every request of a corpus rendered through one template, and what a
template maintainer needs to know about each — U_end, append-only history, the answer's round
trip, agreement with the reference renderer.

Where it sits: beside the audit: it renders (family, render, boundaries), formats and reads
back turns (outputs, round trip) and applies the family's rewrite table (horizon);
``boundary.testing`` and ``boundary check-template`` call it.

A *request* is a conversation prefix that ends before an assistant turn (and the whole
conversation when it does not end with one), rendered with the generation prompt on. The
assistant turn after a request is *its answer*: written as the model emits it
(``format_output``) and checked against the next request (``verify_round_trip``).

Invariants: ``TemplateCheck.requests`` are in corpus order, then request order, each with a
key (``where``) unique in the check; nothing here guesses a boundary: U_end is the
renderer's, FOUND or UNAVAILABLE with its reason.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from boundary.audit.template_corpus import CorpusEntry
from boundary.errors import BoundaryError, RequestError
from boundary.family.facade import Family
from boundary.offsets import BoundaryStatus
from boundary.outputs import format_output
from boundary.prefixes import common_prefix_length
from boundary.render.options import RenderOptions
from boundary.renderer import Renderer
from boundary.tokenize.rendering import Rendering
from boundary.verify.divergence import head_change
from boundary.verify.horizon import stability_horizon
from boundary.verify.roundtrip import verify_round_trip

Messages = list[dict[str, Any]]

__all__ = ["AnswerCheck", "CorpusEntry", "RequestCheck", "TemplateCheck", "check", "requests_of"]

PINNED_NOW = datetime(2026, 5, 15, 12, 0, 0)
"""The date date-stamped templates write in a check, so that checks of different days agree."""


def requests_of(conversation: Sequence[Mapping[str, Any]]) -> list[int]:
    """The message counts of a conversation's requests, in order: every prefix that ends before
    an assistant turn (never the empty one), then the whole conversation unless it ends with an
    assistant turn."""
    counts = [i for i, m in enumerate(conversation) if i > 0 and m.get("role") == "assistant"]
    if conversation and conversation[-1].get("role") != "assistant":
        counts.append(len(conversation))
    return counts


# -- what is recorded per request ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnswerCheck:
    """The request's answer (the assistant turn after it) against the next request:
    ``round_trips`` whether ``prompt + answer`` up to D_end is a token prefix of it, else
    ``cause`` and ``detail``; ``d_end`` and ``reusable`` in tokens. ``skipped`` (with every
    other field None) when the family cannot write the turn (no tool-call format)."""

    round_trips: bool | None = None
    cause: str | None = None
    detail: str | None = None
    d_end: int | None = None
    reusable: int | None = None
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class RequestCheck:
    """One request: ``messages`` messages of conversation ``conversation`` (its index in the
    corpus) named ``name``; ``kind`` the role it ends with (``after user``, ``after tool``).

    ``u_end`` / ``p_end`` are its boundaries in tokens (``u_end`` None with ``reason`` when the
    template cannot expose it); ``text_sha256`` the text's digest; ``error`` the render's
    error (every boundary field then empty). ``target_equal``: whether text and ids equal the
    reference renderer's (None: not compared). Against the previous request of the same
    conversation (``previous`` its message count; None for the first request):
    ``common_prefix`` the tokens both share, ``extends`` whether they cover the previous
    U_end (None when that request has none), ``reaches_p_end`` whether they cover the
    previous P_end, ``first_difference`` where the texts part (``messages[i]`` of the
    previous request, or ``before messages[0]``) and what each side has there, and
    ``declared`` the history rewrite of the family's rule table that predicts the difference
    (None: none does). ``answer``: the round trip of the turn that answers this request.
    """

    conversation: int
    name: str
    messages: int
    kind: str
    u_end: int | None
    p_end: int
    reason: str | None = None
    text_sha256: str = ""
    error: str | None = None
    target_equal: bool | None = None
    previous: int | None = None
    common_prefix: int | None = None
    extends: bool | None = None
    reaches_p_end: bool | None = None
    first_difference: str | None = None
    declared: str | None = None
    answer: AnswerCheck | None = None

    @property
    def where(self) -> str:
        name = f" ({self.name})" if self.name else ""
        return f"conversation {self.conversation}{name}, {self.messages} messages"


@dataclass(frozen=True, slots=True)
class TemplateCheck:
    """Every request of a corpus, checked. Invariants: ``requests`` in corpus order, then
    request order; the properties below are exactly the records they name."""

    requests: tuple[RequestCheck, ...]

    @property
    def errors(self) -> list[RequestCheck]:
        return [r for r in self.requests if r.error is not None]

    @property
    def missing_u_end(self) -> list[RequestCheck]:
        return [r for r in self.requests if r.error is None and r.u_end is None]

    @property
    def rewrites(self) -> list[RequestCheck]:
        return [r for r in self.requests if r.extends is False]

    def undeclared_rewrites(self, allow: Sequence[str] = ()) -> list[RequestCheck]:
        """The rewrites no kind in ``allow`` explains (``declared`` not in it)."""
        return [r for r in self.rewrites if r.declared is None or r.declared not in allow]

    @property
    def target_mismatches(self) -> list[RequestCheck]:
        return [r for r in self.requests if r.target_equal is False]

    def u_end_report(self) -> str:
        """The requests without U_end (or whose render failed), one a line with the reason
        ("" when there are none)."""
        lines = [f"{r.where}: U_end UNAVAILABLE: {r.reason}" for r in self.missing_u_end]
        lines += [f"{r.where}: render failed: {r.error}" for r in self.errors]
        return _report(lines, len(self.requests), "do not expose U_end")

    def append_report(self, allow: Sequence[str] = ()) -> str:
        """The requests that do not extend the previous one to its U_end, except those a kind
        in ``allow`` explains ("" when none)."""
        lines = [
            f"{r.where}: does not start with the request of {r.previous} messages up to its U_end: "
            f"{r.common_prefix} tokens shared; first difference in {r.first_difference}; "
            f"P_end {'reachable' if r.reaches_p_end else 'unreachable too'}"
            + (
                f"; the family declares it ({r.declared})"
                if r.declared
                else "; no declared rewrite explains it"
            )
            for r in self.undeclared_rewrites(allow)
        ]
        return _report(lines, len(self.requests), "rewrite the previous request's history")


def _report(lines: list[str], total: int, what: str) -> str:
    if not lines:
        return ""
    return f"{len(lines)} of {total} requests {what}:\n" + "\n".join(f"  {line}" for line in lines)


# -- the check -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Options:
    variant: str | None
    now: datetime | None
    template_kwargs: dict[str, Any]
    target: str | None  # whose request handling renders reproduce (``boundary.render.target``)
    reference: Any = None  # the transformers tokenizer texts and ids are compared with, or None


def check(
    fam: Family | Renderer,
    corpus: Sequence[CorpusEntry | Sequence[Mapping[str, Any]]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    variant: str | None = None,
    now: datetime | None = PINNED_NOW,
    target: str | None = None,
    compare_with_transformers: bool = False,
    **template_kwargs: Any,
) -> TemplateCheck:
    """Render every request of ``corpus`` (``requests_of``; a plain message list gets
    ``tools``) with the generation prompt on, as ``target`` hands requests to the template
    (default ``vllm-0.33``), and record U_end, how each request extends the one before, its
    answer's round trip and, with ``compare_with_transformers``, whether text and ids equal
    those of transformers' ``apply_chat_template`` given the messages and tools as ``target``
    hands them over (``Renderer.prepare``). A render that fails is recorded (``error``),
    never raised."""
    renderer = fam.renderer if isinstance(fam, Family) else fam
    entries = [
        e if isinstance(e, CorpusEntry) else CorpusEntry("", [dict(m) for m in e], _list(tools))
        for e in corpus
    ]
    reference = renderer.tokenizer.to_transformers() if compare_with_transformers else None
    options = _Options(variant, now, dict(template_kwargs), target, reference)
    records: list[RequestCheck] = []
    for c, entry in enumerate(entries):
        records += _conversation(renderer, c, entry, options)
    return TemplateCheck(tuple(records))


def _list(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    return None if tools is None else [dict(t) for t in tools]


def _render(renderer: Renderer, messages: Messages, tools: Any, o: _Options) -> Rendering:
    return renderer.render(
        messages, tools, True, variant=o.variant, now=o.now, target=o.target, **o.template_kwargs
    )


def _conversation(renderer: Renderer, c: int, entry: CorpusEntry, o: _Options) -> Iterator[RequestCheck]:
    """The records of one conversation; each is yielded once the next request (its answer's
    continuation) has been checked."""
    held: tuple[RequestCheck, Rendering] | None = None
    for n in requests_of(entry.messages):
        messages = entry.messages[:n]
        kind = f"after {messages[-1].get('role')}"
        try:
            r = _render(renderer, messages, entry.tools, o)
        except BoundaryError as exc:
            if held is not None:
                yield held[0]
            held = None
            yield RequestCheck(c, entry.name, n, kind, None, 0, error=str(exc))
            continue
        found = r.input_end.status is BoundaryStatus.FOUND
        record = RequestCheck(
            c,
            entry.name,
            n,
            kind,
            r.u_end,
            r.p_end,
            None if found else r.input_end.reason or "no reason given",
            text_sha256=hashlib.sha256(r.text.encode()).hexdigest(),
            target_equal=None
            if o.reference is None
            else _target_equal(renderer, r, messages, entry.tools, o),
        )
        if held is not None:
            before, prompt = held
            answer, predicted = _answer(renderer, entry, before, prompt, messages, o)
            yield replace(before, answer=answer)
            record = _against(record, entry.messages, before, prompt, r, predicted)
        held = (record, r)
    if held is not None:
        yield held[0]


def _target_equal(
    renderer: Renderer, r: Rendering, messages: Messages, tools: Any, o: _Options
) -> bool | None:
    """Text and ids equal transformers' for the same request (None: no reference). A
    date-stamped template writes today's date under transformers: on a difference the request
    is rendered again with the clock unpinned, and that rendering decides."""
    if o.reference is None:
        return None
    handed, handed_tools = renderer.prepare(
        messages, tools, RenderOptions(variant=o.variant, target=o.target)
    )
    template = renderer.template(renderer.select_variant(o.variant, tools))
    kwargs = {
        **o.template_kwargs,
        "tools": handed_tools,
        "chat_template": template,
        "add_generation_prompt": True,
    }
    text = o.reference.apply_chat_template(handed, tokenize=False, **kwargs)
    ids = list(
        o.reference.apply_chat_template(handed, tokenize=True, return_dict=True, **kwargs)["input_ids"]
    )
    if (r.text, list(r.token_ids)) == (text, ids) or o.now is None:
        return (r.text, list(r.token_ids)) == (text, ids)
    again = _render(renderer, messages, tools, replace(o, now=None))
    return (again.text, list(again.token_ids)) == (text, ids)


def _with_target(o: _Options) -> dict[str, Any]:
    """The template kwargs, with ``target`` when one is named (the round trip passes its extra
    keyword arguments to ``render``)."""
    return o.template_kwargs if o.target is None else {**o.template_kwargs, "target": o.target}


def _answer(
    renderer: Renderer,
    entry: CorpusEntry,
    before: RequestCheck,
    prompt: Rendering,
    next_messages: Messages,
    o: _Options,
) -> tuple[AnswerCheck, tuple[str, int] | None]:
    """The round trip of the turn that answers ``before`` against ``next_messages``, and the
    first history rewrite the family's rule table predicts for it with its token position
    (the horizon's limit; None: none within ``prompt + answer``)."""
    messages = entry.messages[: before.messages]
    answer = entry.messages[before.messages]
    try:
        generated = format_output(renderer, prompt, answer, variant=o.variant).token_ids
    except RequestError as exc:
        return AnswerCheck(skipped=str(exc)), None
    try:
        rt = verify_round_trip(
            renderer,
            messages,
            generated,
            next_messages,
            tools=entry.tools,
            variant=o.variant,
            now=o.now,
            **_with_target(o),
        )
    except BoundaryError as exc:
        return AnswerCheck(skipped=f"the next request does not render: {exc}"), None
    horizon = stability_horizon(
        renderer, prompt, generated, rt.parsed, messages, variant=o.variant, template_kwargs=o.template_kwargs
    )
    limit = horizon.limit
    checked = AnswerCheck(
        rt.round_trips,
        None if rt.cause is None else rt.cause.value,
        rt.detail,
        rt.d_end,
        rt.reusable_length,
    )
    return checked, None if limit is None else (limit.rewrite, limit.position)


def _against(
    record: RequestCheck,
    conversation: Sequence[Mapping[str, Any]],
    before: RequestCheck,
    prev: Rendering,
    r: Rendering,
    predicted: tuple[str, int] | None,
) -> RequestCheck:
    """``record`` with how ``r`` extends the previous request (``before``, rendered ``prev``);
    a rewrite is ``declared`` when the family's rule table predicted a limit at or before
    where the two part."""
    shared = common_prefix_length(prev.token_ids, r.token_ids)
    extends = None if prev.u_end is None else shared >= prev.u_end
    difference = None
    if extends is False:
        head = head_change(conversation[: before.messages], conversation[: record.messages])
        difference = head or _first_difference(prev, r)
    return replace(
        record,
        previous=before.messages,
        common_prefix=shared,
        extends=extends,
        reaches_p_end=shared >= prev.p_end,
        first_difference=difference,
        declared=predicted[0] if extends is False and predicted and predicted[1] <= shared else None,
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
