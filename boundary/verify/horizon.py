"""Stability horizon: how much of ``prompt + generated`` later requests are predicted to keep.

Where it sits: after the round trip (it reads the parsed turn and the family's output
format) and before the audit and the experiment, which measure and use it.

A prediction from data, with no extra rendering: the family's history-rewrite rule table
(``history_rewrites`` in ``family.toml``, one ``HistoryRewrite`` row each: its trigger, the
part it re-writes and where the newest turn stops being kept), applied by one generic rule to
the request's rendered turns and the parsed generated turn. For example Qwen3.5 drops the
think blocks of the assistant turns after the last user query once a new user message
arrives, so its horizon is the start of the first such turn: the end of that user turn.

Two token-level effects are checked directly: BPE merging across the prompt / generation
boundary, and generated ids that are not the tokenizer's own encoding of their text. Rewrites
triggered by the date or by a change of tools are not position limits; they are listed in
``holds_while``. The audit measures how often the prediction holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from boundary.offsets import BoundaryStatus, CharOffset
from boundary.outputs import OutputFormat, ParsedOutput, RegionKind, output_format
from boundary.outputs.formats.pythonic_calls import LFM2_PYTHONIC, template_arguments
from boundary.outputs.formats.xml_calls import PARAMETERS, written_parameters
from boundary.outputs.reasoning import Prefill
from boundary.renderer import HoldsRenderer, Renderer, renderer_of
from boundary.shipped.spec import HistoryRewrite, RewritePart
from boundary.tokenize.rendering import Rendering
from boundary.verify.roundtrip import DEFAULT_HABITS, ClientHabits, control_ids, trailing_controls

_CONDITIONS = {"new_day": "the date stays the same", "tools_change": "the tools stay the same"}


@dataclass(frozen=True, slots=True)
class HorizonLimit:
    """One predicted rewrite and the token position where it starts."""

    position: int
    rewrite: str  # a history-rewrite kind, or "bpe_merge" / "non_canonical_ids" / "client_drops_reasoning"
    detail: str


@dataclass(frozen=True, slots=True)
class Horizon:
    """``position``: tokens of ``prompt + generated`` predicted to stay a prefix of every later
    request of the conversation; ``limit`` is the rewrite that sets it (None: the whole kept
    turn); ``holds_while`` lists the conditions the prediction assumes."""

    position: int
    limit: HorizonLimit | None
    limits: tuple[HorizonLimit, ...]
    holds_while: tuple[str, ...]


def trigger_of(rewrite: HistoryRewrite) -> str:
    """The event that triggers ``rewrite`` (a column of the rule table)."""
    return rewrite.trigger


def active_rewrites(
    family: Renderer | HoldsRenderer, template_kwargs: Mapping[str, Any]
) -> list[HistoryRewrite]:
    """The family's rewrites that the template kwargs do not switch off."""
    family = renderer_of(family)
    spec = family.spec

    def value(key: str) -> Any:
        if key in template_kwargs:
            return template_kwargs[key]
        declared = spec.template_kwargs.get(key)
        return declared.default if declared else None

    return [
        r for r in spec.history_rewrites if not r.unless or any(value(k) != v for k, v in r.unless.items())
    ]


def generated_char_ends(decode: Callable[[list[int]], str], generated: Sequence[int]) -> list[int]:
    """For each generated token, where its text ends in ``decode(generated)``, in characters.

    Tokens are decoded in context (a few tokens before them), so decoders that drop a leading
    space at the start of a sequence, or byte-level tokens that split a character, do not
    miscount. A token that ends inside a character ends after that character: a position
    before the character never counts it."""
    ends: list[int] = []
    clean, start = 0, 0  # text length up to the last token that ended on a character boundary
    for i in range(len(generated)):
        context = max(0, start - 4)
        before = decode(list(generated[context:start]))
        piece = decode(list(generated[context : i + 1]))[len(before) :]
        if piece.endswith("\ufffd"):
            ends.append(clean + len(piece.rstrip("\ufffd")) + 1)
            continue
        clean += len(piece)
        start = i + 1
        ends.append(clean)
    return ends


class _Positions:
    """Char positions in ``prompt.text + generated text`` -> token positions."""

    def __init__(self, family: Renderer, prompt: Rendering, generated: Sequence[int]) -> None:
        self.family, self.prompt, self.generated = family, prompt, generated
        self._ends: list[int] | None = None

    def token(self, char: int) -> int:
        p_char = len(self.prompt.text)
        if char <= p_char:
            return int(self.prompt.boundary_at(CharOffset(char)).token or 0)
        if self._ends is None:
            self._ends = generated_char_ends(self.family.tokenizer.decode, self.generated)
        g = char - p_char
        return len(self.prompt.token_ids) + sum(1 for e in self._ends if e <= g)


@dataclass(frozen=True, slots=True)
class _Turn:
    """What the rule table is applied to: the request's messages and the generated turn.
    ``u_char`` / ``p_char``: U_end and P_end in characters; ``think_at``: where this turn's
    reasoning begins (None: it has no think block)."""

    messages: Sequence[Mapping[str, Any]]
    parsed: ParsedOutput
    fmt: OutputFormat
    habits: ClientHabits
    starts: tuple[int | None, ...]
    reasoning_field: str
    u_char: int
    p_char: int
    think_at: int | None

    @property
    def calls(self) -> bool:
        return bool(self.parsed.tool_calls)

    def last(self, role_test: Callable[[Mapping[str, Any]], bool]) -> int:
        return max((i for i, m in enumerate(self.messages) if role_test(m)), default=-1)

    def turn_start(self, i: int) -> int | None:
        return self.starts[i] if 0 <= i < len(self.starts) else None

    def has_reasoning(self, m: Mapping[str, Any]) -> bool:
        content = m.get("content")
        field = m.get(self.reasoning_field) or m.get("reasoning_content") or m.get("reasoning")
        close = self.fmt.think.close_tag if self.fmt.think is not None else None
        return bool(field) or (close is not None and isinstance(content, str) and close in content)


@dataclass(frozen=True, slots=True)
class _Cut:
    """Where a rewrite starts: a char position, and whether it lies inside a turn (where the
    whitespace just before it may merge with what the rewrite puts there)."""

    char: int | None
    in_turn: bool = True
    detail: str = ""


# -- the rule table's columns, as generic code -------------------------------------------------

_SINCE: dict[str, Callable[[_Turn], int]] = {  # which earlier turns a trigger reaches
    "new_user_message": lambda t: t.last(lambda m: m.get("role") == "user"),
    "final_answer": lambda t: t.last(lambda m: m.get("role") == "assistant" and not m.get("tool_calls")),
}

_IN_HISTORY: dict[RewritePart, Callable[[_Turn, Mapping[str, Any]], bool]] = {  # an earlier turn holds it
    "reasoning": lambda t, m: t.has_reasoning(m),
    "think_block": lambda t, m: True,
    "empty_think_block": lambda t, m: not t.has_reasoning(m),
    "analysis": lambda t, m: bool(m.get("tool_calls")) and (t.has_reasoning(m) or bool(m.get("content"))),
    "arguments": lambda t, m: bool(m.get("tool_calls")),
    "tool_call_header": lambda t, m: bool(m.get("tool_calls")),
}


def _this_turn(t: _Turn, part: RewritePart) -> _Cut | None:
    """Where ``part`` starts in the newest turn (None: the turn does not hold it)."""
    parsed, think_at = t.parsed, t.think_at
    if part == "reasoning":
        return _Cut(think_at) if parsed.reasoning else None
    if part == "think_block":
        held = think_at is not None and (parsed.reasoning or t.fmt.think is not None)
        return _Cut(think_at) if held else None
    if part == "empty_think_block":
        return _Cut(think_at) if think_at is not None and not parsed.reasoning else None
    if part == "analysis" and t.calls and (parsed.reasoning or parsed.content):
        return _Cut(think_at if parsed.reasoning else t.p_char)
    if part == "arguments" and t.calls:
        at = _first_rewritten_arguments(parsed, t.fmt, t.habits)
        return _Cut(t.p_char + at) if at is not None else None
    if part == "tool_call_header" and t.calls:
        region = parsed.region(RegionKind.TOOL_CALL)
        return _Cut(t.p_char + region.start) if region is not None else None
    if part == "content_whitespace":
        return _trimmed_at(t)
    if part == "tool_list":
        last_user = _SINCE["new_user_message"](t)
        return _Cut(t.turn_start(last_user), in_turn=False) if last_user >= 0 else None
    return None  # stop_token, system_prompt: not position limits of their own


def _trimmed_at(t: _Turn) -> _Cut | None:
    """Where trimming the newest turn's content first changes it: its start when it begins
    with whitespace, else the end of its text when it ends with whitespace (None: neither)."""
    content, region = t.parsed.content or "", t.parsed.region(RegionKind.CONTENT)
    if region is None or content == content.strip():
        return None
    start = t.p_char + region.start
    return _Cut(start if content[:1].isspace() else start + len(content.rstrip()))


def _turn_matches(rewrite: HistoryRewrite, tool_calls: bool) -> bool:
    return rewrite.turns == "any" or (rewrite.turns == "tool_calls") == tool_calls


def _rewrite_cut(t: _Turn, rewrite: HistoryRewrite) -> _Cut | None:
    """Where ``rewrite`` first changes ``prompt + generated``, and why: the first earlier turn
    its trigger reaches that holds the part, else the newest turn when it holds it."""
    since = _SINCE.get(rewrite.trigger)
    in_history = _IN_HISTORY.get(rewrite.part)
    if since is not None and in_history is not None:
        for i in range(since(t) + 1, len(t.messages)):
            m = t.messages[i]
            matches = _turn_matches(rewrite, bool(m.get("tool_calls")))
            if m.get("role") == "assistant" and matches and in_history(t, m):
                return _Cut(t.turn_start(i), False, f"messages[{i}]: {rewrite.doc}")
    if not _turn_matches(rewrite, t.calls):
        return None
    cut = _this_turn(t, rewrite.part)
    if cut is None:
        return None
    if rewrite.limit == "turn_start":
        return _Cut(t.u_char, False, f"this turn: {rewrite.doc}")
    return replace(cut, detail=f"this turn: {rewrite.doc}")


def stability_horizon(
    family: Renderer | HoldsRenderer,
    prompt: Rendering,
    generated: Sequence[int],
    parsed: ParsedOutput,
    messages: Sequence[Mapping[str, Any]],
    *,
    habits: ClientHabits = DEFAULT_HABITS,
    variant: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> Horizon:
    """Predict the horizon of one turn. ``messages`` are the request's messages (as sent, or
    as ``Family.prepare`` gives them), indexed like ``prompt.message_starts``."""
    family = renderer_of(family)
    fmt = output_format(family, variant)
    p_char = len(prompt.text)
    u_char = prompt.input_end.char if prompt.input_end.status is BoundaryStatus.FOUND else p_char
    assert u_char is not None
    think_at = _think_start(prompt, fmt, u_char, p_char, parsed.region(RegionKind.REASONING))
    turn = _Turn(
        messages,
        parsed,
        fmt,
        habits,
        prompt.message_starts,
        family.spec.reasoning_field,
        u_char,
        p_char,
        think_at,
    )
    pos = _Positions(family, prompt, generated)
    text = prompt.text + parsed.text
    limits: list[HorizonLimit] = []

    def limit_at(cut: _Cut, kind: str) -> None:
        """A limit at ``cut``; inside a turn, whitespace just before it may merge (BPE) with
        whatever the rewrite puts there, so the limit steps back over that token."""
        if cut.char is None:
            return
        token = pos.token(cut.char)
        if cut.in_turn and 0 < cut.char <= len(text) and text[cut.char - 1].isspace():
            token = max(0, token - 1)
        limits.append(HorizonLimit(token, kind, cut.detail))

    rewrites = active_rewrites(family, dict(template_kwargs or {}))
    holds = [_CONDITIONS[r.trigger] for r in rewrites if r.trigger in _CONDITIONS]
    for rewrite in rewrites:
        cut = None if rewrite.trigger in _CONDITIONS else _rewrite_cut(turn, rewrite)
        if cut is not None:
            limit_at(cut, rewrite.kind)
    if parsed.reasoning and not habits.echo_reasoning:
        limit_at(
            _Cut(think_at, True, "the client does not send reasoning_content back"), "client_drops_reasoning"
        )
    limits += _token_effects(family, prompt, generated, parsed)

    trailing = trailing_controls(generated, control_ids(family, fmt))
    rewritten_stop = any(r.part == "stop_token" for r in rewrites)
    kept = len(prompt.token_ids) + len(generated) - (trailing if rewritten_stop else 0)
    return _horizon(kept, limits, holds)


def _horizon(kept: int, limits: list[HorizonLimit], holds: list[str]) -> Horizon:
    """The shallowest of ``limits`` and the ``kept`` length of ``prompt + generated``."""
    shallowest = min(limits, key=lambda lim: lim.position, default=None)
    position = min(kept, shallowest.position) if shallowest else kept
    return Horizon(
        position,
        shallowest if shallowest and shallowest.position < kept else None,
        tuple(sorted(limits, key=lambda lim: lim.position)),
        tuple(dict.fromkeys(holds)),
    )


def _think_start(prompt: Rendering, fmt: OutputFormat, u_char: int, p_char: int, region: Any) -> int | None:
    """Where this turn's reasoning begins: the pre-filled open tag, or the written one."""
    if fmt.harmony:
        return p_char + region.start if region is not None else None
    if fmt.think is None:
        return None
    state, _ = fmt.think.prefill(prompt.text[u_char:])
    if state is not Prefill.NONE:
        return prompt.text.find(fmt.think.open_tag, u_char)
    return p_char + region.start if region is not None else None


def _first_rewritten_arguments(parsed: ParsedOutput, fmt: OutputFormat, habits: ClientHabits) -> int | None:
    """Where the first tool call whose written arguments a template re-writes starts: JSON
    arguments that ``tojson`` writes differently (unless the client sends them back as
    written); XML values that are JSON other than a string (a client that types them by the
    tool's schema sends them back as values, and the template writes ``tojson`` or ``str()``);
    Python keyword arguments the template writes back differently (single-quoted strings)."""
    xml = fmt.syntax.name if fmt.syntax is not None and fmt.syntax.name in PARAMETERS else None
    pythonic = fmt.syntax is not None and fmt.syntax.name == LFM2_PYTHONIC
    for region in parsed.regions:
        if region.kind is not RegionKind.ARGUMENTS:
            continue
        if pythonic:
            written = parsed.text[region.start : region.end]
            call = parsed.tool_calls[region.index or 0]["function"]["arguments"]
            if written != template_arguments(json.loads(call)):
                return region.start
            continue
        if xml is not None:
            values = written_parameters(xml, parsed.text[region.start : region.end])
            if any(_retyped(raw) for _, raw in values):
                return region.start
            continue
        call = parsed.tool_calls[region.index or 0]["function"]["arguments"]
        if habits.arguments != "string" and call != json.dumps(json.loads(call), ensure_ascii=False):
            return region.start
    return None


def _retyped(raw: str) -> bool:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return False
    return not isinstance(value, str) and (
        isinstance(value, bool) or value is None or json.dumps(value, ensure_ascii=False) != raw
    )


def _token_effects(
    family: Renderer, prompt: Rendering, generated: Sequence[int], parsed: ParsedOutput
) -> list[HorizonLimit]:
    """BPE merging across the prompt / generation boundary, and ids that are not the
    tokenizer's own encoding of the generated text (a re-render encodes the text)."""
    out = []
    tok = family.tokenizer
    p = len(prompt.token_ids)
    if p and generated:
        head = list(generated[:4])
        joined = tok.decode(prompt.token_ids[-1:]) + tok.decode(head)
        if tok.encode_ids(joined)[:2] != [prompt.token_ids[-1], head[0]]:
            out.append(
                HorizonLimit(p - 1, "bpe_merge", "the prompt's last token merges with the generated text")
            )
    trailing = trailing_controls(
        generated, frozenset(i for i in (tok.token_to_id(parsed.stop_token or ""),) if i)
    )
    body = list(generated[: len(generated) - trailing])
    canonical = tok.encode_ids(tok.decode(body))
    if canonical != body:
        n = next(
            (i for i, (a, b) in enumerate(zip(canonical, body, strict=False)) if a != b),
            min(len(canonical), len(body)),
        )
        out.append(
            HorizonLimit(
                p + n, "non_canonical_ids", "the generated ids are not the tokenizer's encoding of their text"
            )
        )
    return out
