"""Why ``prompt + generated`` and the next request part ways: the ``Cause`` of a divergence.

Where it sits: inside the round trip (``boundary.verify.roundtrip`` calls ``classify`` when a turn
does not round-trip), after render, boundaries and outputs. It reads the two texts where they
part and names the cause from where that is — the system prompt or an earlier turn, the
generation prompt, or a region of the generated turn — with the family's output format as
data (think tags, ``header_marker`` / ``reasoning_header`` for formats with message headers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from boundary.offsets import BoundaryStatus, CharOffset
from boundary.outputs import OutputFormat, ParsedOutput, RegionKind
from boundary.outputs.model import OutputStatus
from boundary.prefixes import common_prefix_length
from boundary.renderer import Renderer
from boundary.tokenize.rendering import Rendering


class Cause(StrEnum):
    """Why the next request stops agreeing with ``prompt + generated``."""

    HIDDEN_REASONING_DROPPED = "hidden_reasoning_dropped"  # reasoning is not rendered in history
    EMPTY_THINK_BLOCK = "empty_think_block"  # an empty think block is dropped or added
    TOOL_CALL_RESERIALIZED = (
        "tool_call_reserialized"  # arguments re-written: JSON spacing, key order, value form
    )
    WHITESPACE = "whitespace"  # whitespace or newlines differ
    STOP_TOKEN = "stop_token"  # the stop token is rendered differently
    ROLE_HEADER = "role_header"  # the turn or message header is written differently
    SYSTEM_PROMPT = "system_prompt"  # a date or default system prompt changed the start
    BPE_REMERGE = "bpe_remerge"  # same text, different tokens: BPE merged across the boundary
    PARSE_FAILURE = "parse_failure"  # the output could not be read back (malformed or cut off)
    HISTORY_EDITED = "history_edited"  # the next request changes an earlier message
    HEAD_REWRITE = "head_rewrite"  # the client rewrites the leading system block every turn
    OTHER = "other"


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2} \w+ \d{4}|\w+ \d{1,2}, \d{4}")
_WS = re.compile(r"\s+")


_HEAD_ROLES = ("system", "developer")


def _role(message: object) -> object:
    return message.get("role") if isinstance(message, Mapping) else getattr(message, "role", None)


def _leading(messages: Sequence[object]) -> int:
    """How many messages open the request in the system / developer role."""
    n = 0
    while n < len(messages) and _role(messages[n]) in _HEAD_ROLES:
        n += 1
    return n


def head_change(messages: Sequence[object], next_messages: Sequence[object]) -> str | None:
    """Where the client changed the head of the prompt between a request and the next one, as
    ``messages[i]`` (an index of the next request), or None: the first leading system /
    developer message that differs (rewritten, added or removed), else the first system /
    developer message the next request adds after this request's messages (a note a template
    or frontend folds into the leading system block)."""
    for i in range(max(_leading(messages), _leading(next_messages))):
        if i >= len(messages) or i >= len(next_messages) or messages[i] != next_messages[i]:
            return f"messages[{i}]"
    for i in range(len(messages), len(next_messages)):
        if _role(next_messages[i]) in _HEAD_ROLES:
            return f"messages[{i}]"
    return None


def _without_space(text: str, limit: int) -> str:
    return _WS.sub("", text[: limit * 4])[:limit]


def _whitespace_only(a: str, b: str) -> bool:
    """The two texts differ at their start only by whitespace (judged on what follows)."""
    n = min(64, len(_WS.sub("", a)), len(_WS.sub("", b)))
    return n > 0 and _without_space(a, n) == _without_space(b, n)


def _token_ends_by(rendering: Rendering, token: int, char: int) -> bool:
    """Token ``token`` of ``rendering`` ends at or before text position ``char``."""
    if token >= len(rendering.token_ids):
        return True
    return int(rendering.boundary_at(CharOffset(char)).token or 0) > token


def _token_ends_by_a(
    family: Renderer, prompt: Rendering, generated: Sequence[int], token: int, char: int
) -> bool:
    """The same for ``prompt + generated`` (generated tokens measured by decoding them)."""
    p = len(prompt.token_ids)
    if token < p:
        return char >= len(prompt.text) or int(prompt.boundary_at(CharOffset(char)).token or 0) > token
    return len(prompt.text) + len(family.tokenizer.decode(list(generated[: token - p + 1]))) <= char


class Verdict(NamedTuple):
    """Why ``prompt + generated`` and the next request part ways: the cause and what differs."""

    cause: Cause
    detail: str


@dataclass(frozen=True, slots=True)
class _Divergence:
    """Where the two texts part: ``a`` (``prompt + generated``) and ``b`` (the next request)
    agree on ``a[:c]``; ``u_char`` / ``p_char`` are U_end and P_end in characters."""

    a: str
    b: str
    c: int
    u_char: int
    p_char: int

    @property
    def shown(self) -> str:
        return f"{self.a[self.c : self.c + 40]!r} here, {self.b[self.c : self.c + 40]!r} in the next request"

    def whitespace_only(self) -> bool:
        return _whitespace_only(self.a[self.c :], self.b[self.c :])


def classify(
    family: Renderer,
    fmt: OutputFormat,
    prompt: Rendering,
    generated: Sequence[int],
    parsed: ParsedOutput,
    nxt: Rendering,
    lcp: int,
    history_same: bool = True,
    roles: Sequence[str] = (),
    head: str | None = None,
) -> Verdict:
    """Name the cause of the first divergence at token ``lcp``: token-level (BPE), a turn that
    could not be read back, then by where the texts part — in history, in the generation
    prompt, or in the generated turn. ``head``: where the client changed the head of the
    prompt (``head_change``), None when it did not."""
    a, b = prompt.text + parsed.text, nxt.text
    c = common_prefix_length(a, b)
    agreed = c >= len(a)  # all of prompt + generated is text of the next request
    if agreed or (_token_ends_by(nxt, lcp, c) and _token_ends_by_a(family, prompt, generated, lcp, c)):
        tok, seq = family.tokenizer, prompt.token_ids + list(generated)
        return Verdict(
            Cause.BPE_REMERGE,
            f"the text agrees but token {lcp} differs: {tok.decode(seq[lcp : lcp + 1])!r} here, "
            f"{tok.decode(nxt.token_ids[lcp : lcp + 1])!r} in the next request",
        )
    if parsed.status is not OutputStatus.COMPLETE and c >= len(prompt.text):
        return Verdict(Cause.PARSE_FAILURE, f"{parsed.status.value}: {parsed.problem}")
    u_char = prompt.input_end.char if prompt.input_end.status is BoundaryStatus.FOUND else len(prompt.text)
    assert u_char is not None
    d = _Divergence(a, b, _tag_start(a, c), u_char, len(prompt.text))
    think = fmt.think
    if think is not None:
        empty = re.compile(rf"\s*{re.escape(think.open_tag)}\s*{re.escape(think.close_tag)}")
        in_a, in_b = bool(empty.match(a, d.c)), bool(empty.match(b, d.c))
        if in_a != in_b:
            return Verdict(
                Cause.EMPTY_THINK_BLOCK,
                f"an empty think block is {'dropped' if in_a else 'added'}: {d.shown}",
            )
    if d.c < u_char:
        return _classify_history(prompt, fmt, d, history_same, roles, head)
    if d.c < d.p_char:
        return _classify_generation_prompt(prompt, fmt, parsed, d)
    return _classify_generated(fmt, parsed, d)


def _classify_generation_prompt(
    prompt: Rendering, fmt: OutputFormat, parsed: ParsedOutput, d: _Divergence
) -> Verdict:
    """The texts part between U_end and P_end: in the generation-only suffix."""
    think = fmt.think
    opened = prompt.text.find(think.open_tag, d.u_char) if think is not None else -1
    if 0 <= opened <= d.c:
        if parsed.reasoning:
            return Verdict(
                Cause.HIDDEN_REASONING_DROPPED, f"the turn's reasoning is not rendered in history: {d.shown}"
            )
        return Verdict(
            Cause.EMPTY_THINK_BLOCK, f"the pre-filled think block is not rendered in history: {d.shown}"
        )
    if d.whitespace_only():
        return Verdict(Cause.WHITESPACE, d.shown)
    return Verdict(Cause.ROLE_HEADER, f"the assistant header is written differently in history: {d.shown}")


def _classify_generated(fmt: OutputFormat, parsed: ParsedOutput, d: _Divergence) -> Verdict:
    """The texts part inside the generated turn: named by the region they part in."""
    g = d.c - d.p_char
    kinds = [r.kind for r in parsed.regions_at(g)]
    shown = d.shown
    if RegionKind.REASONING in kinds:
        if not parsed.reasoning:
            return Verdict(
                Cause.EMPTY_THINK_BLOCK, f"the empty think block is written differently in history: {shown}"
            )
        if d.whitespace_only():
            return Verdict(Cause.WHITESPACE, f"around the reasoning: {shown}")
        return Verdict(
            Cause.HIDDEN_REASONING_DROPPED, f"the turn's reasoning is not rendered in history: {shown}"
        )
    if RegionKind.ARGUMENTS in kinds:
        change = _arguments_change(parsed, g, d.b, d.p_char)
        return Verdict(Cause.TOOL_CALL_RESERIALIZED, f"{change}: {shown}")
    if RegionKind.TOOL_CALL in kinds:
        if d.whitespace_only():
            return Verdict(Cause.WHITESPACE, f"in a tool call's framing: {shown}")
        if fmt.header_marker:
            return Verdict(Cause.ROLE_HEADER, f"the tool call's header is written in another order: {shown}")
        return Verdict(Cause.TOOL_CALL_RESERIALIZED, f"the tool call is written differently: {shown}")
    if RegionKind.STOP in kinds:
        return Verdict(Cause.STOP_TOKEN, shown)
    if d.whitespace_only():
        return Verdict(Cause.WHITESPACE, shown)
    marker = fmt.header_marker
    if marker and marker in d.a[d.c : d.c + 40] and marker in d.b[d.c : d.c + 40]:
        return Verdict(Cause.ROLE_HEADER, f"the message header is written differently: {shown}")
    return Verdict(Cause.OTHER, shown)


def _classify_history(
    prompt: Rendering,
    fmt: OutputFormat,
    d: _Divergence,
    history_same: bool,
    roles: Sequence[str],
    head: str | None,
) -> Verdict:
    """The texts part before U_end: in the system prompt or an earlier turn. Inside the
    leading system / tools block (before the first message of another role) and with the
    client's head changed: ``HEAD_REWRITE``, naming the message."""
    a, b, c, shown = d.a, d.b, d.c, d.shown
    starts = prompt.message_starts
    first_turn = next(
        (s for s, role in zip(starts, roles, strict=False) if s is not None and role not in _HEAD_ROLES),
        None,
    )
    if head is not None and first_turn is not None and c < first_turn:
        return Verdict(
            Cause.HEAD_REWRITE,
            f"the client rewrites the head of the prompt ({head} of the next request): "
            f"everything after it is prefilled again: {shown}",
        )
    if not history_same:
        return Verdict(Cause.HISTORY_EDITED, f"the next request changes an earlier message: {shown}")
    window = a[max(0, c - 24) : c + 24]
    if first_turn is None or c < first_turn:
        if _DATE.search(window):
            return Verdict(Cause.SYSTEM_PROMPT, f"the date in the system prompt changed: {shown}")
        if first_turn is not None:
            return Verdict(Cause.SYSTEM_PROMPT, f"the system prompt changed: {shown}")
    think = fmt.think
    if think is not None:
        opened = a.rfind(think.open_tag, 0, c + len(think.open_tag))
        closed = a.find(think.close_tag, max(opened, 0))
        if opened >= 0 and closed >= c - len(think.close_tag):
            if a[opened + len(think.open_tag) : closed].strip():
                return Verdict(
                    Cause.HIDDEN_REASONING_DROPPED, f"an earlier turn's reasoning is dropped: {shown}"
                )
            return Verdict(
                Cause.EMPTY_THINK_BLOCK, f"an earlier turn's empty think block is dropped: {shown}"
            )
    if c in starts and a[c : c + 32] in b[c : c + 8192]:
        at = starts.index(c)
        return Verdict(Cause.OTHER, f"the template writes something new before messages[{at}]: {shown}")
    header = fmt.reasoning_header
    if header and header in a[max(0, c - 12) : c + 20]:
        return Verdict(Cause.HIDDEN_REASONING_DROPPED, f"an earlier turn's analysis is dropped: {shown}")
    return Verdict(Cause.OTHER, f"the template renders earlier history differently: {shown}")


def _arguments_change(parsed: ParsedOutput, g: int, b: str, offset: int) -> str:
    """How the re-rendered arguments differ from the written ones (both read from the
    arguments' start, where the two texts still agree)."""
    region = next(r for r in parsed.regions_at(g) if r.kind is RegionKind.ARGUMENTS)
    written = parsed.text[region.start : region.end]
    there = b[offset + region.start :]
    try:
        ours = json.loads(written)
        theirs, _ = json.JSONDecoder().raw_decode(there)
    except (json.JSONDecodeError, ValueError):
        compact = _WS.sub("", written)
        same = _WS.sub("", there[: len(written) * 2]).startswith(compact)
        return "spacing" if same else "value form (a value is written differently)"
    if ours == theirs and isinstance(ours, dict) and isinstance(theirs, dict):
        return "JSON spacing" if list(ours) == list(theirs) else "JSON key order"
    return "value form (the arguments are written as another value)"


def _tag_start(text: str, c: int) -> int:
    """Move ``c`` back to the start of a control tag (``<...>`` or ``[...]``) it falls inside."""
    for open_, close in (("<", ">"), ("[", "]")):
        at = text.rfind(open_, max(0, c - 32), c)
        if at >= 0 and close not in text[at:c]:
            return at
    return c
