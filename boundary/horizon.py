"""Stability horizon: how much of ``prompt + generated`` later requests are predicted to keep.

A prediction from data, with no extra rendering: the family's known history rewrites
(``history_rewrites`` in ``family.toml``), each with the event that triggers it, applied to
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from boundary.offsets import BoundaryStatus, CharOffset
from boundary.outputs import ParsedOutput, RegionKind, output_format
from boundary.outputs.formats.xml_calls import PARAMETERS, written_parameters
from boundary.outputs.reasoning import Prefill
from boundary.roundtrip import DEFAULT_HABITS, ClientHabits, control_ids, trailing_controls

if TYPE_CHECKING:
    from boundary.boundaries import Rendering
    from boundary.family import Family, HistoryRewrite

DEFAULT_TRIGGER = {
    "drop_reasoning_before_last_user": "new_user_message",
    "drop_all_reasoning": "next_request",
    "empty_think_block": "new_user_message",
    "reserialize_tool_arguments": "next_request",
    "default_system_prompt": "tools_change",
    "date_in_system_prompt": "new_day",
    "rewrite_stop_token": "next_request",
    "reorder_channels": "next_request",
    "tools_before_last_user": "new_user_message",
}
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
    return rewrite.trigger or DEFAULT_TRIGGER[rewrite.kind]


def active_rewrites(family: Family, template_kwargs: Mapping[str, Any]) -> list[HistoryRewrite]:
    """The family's rewrites that the template kwargs do not switch off."""
    spec = family.spec

    def value(key: str) -> Any:
        if key in template_kwargs:
            return template_kwargs[key]
        declared = spec.template_kwargs.get(key)
        return declared.default if declared else None

    return [
        r for r in spec.history_rewrites if not r.unless or any(value(k) != v for k, v in r.unless.items())
    ]


class _Positions:
    """Char positions in ``prompt.text + generated text`` -> token positions."""

    def __init__(self, family: Family, prompt: Rendering, generated: Sequence[int]) -> None:
        self.family, self.prompt, self.generated = family, prompt, generated
        self._ends: list[int] | None = None

    def token(self, char: int) -> int:
        p_char = len(self.prompt.text)
        if char <= p_char:
            return int(self.prompt.boundary_at(CharOffset(char)).token or 0)
        if self._ends is None:
            decode = self.family.tokenizer.decode
            ends, total = [], 0
            for token_id in self.generated:
                total += len(decode([token_id]))
                ends.append(total)
            self._ends = ends
        g = char - p_char
        return len(self.prompt.token_ids) + sum(1 for e in self._ends if e <= g)


def stability_horizon(
    family: Family,
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
    fmt = output_format(family, variant)
    kwargs = dict(template_kwargs or {})
    pos = _Positions(family, prompt, generated)
    p_char = len(prompt.text)
    u_char = prompt.input_end.char if prompt.input_end.status is BoundaryStatus.FOUND else p_char
    assert u_char is not None
    reasoning_field = family.spec.reasoning_field
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    calls = bool(parsed.tool_calls)
    reasoning_region = parsed.region(RegionKind.REASONING)
    think_at = _think_start(prompt, fmt, u_char, p_char, reasoning_region)

    def turn_start(i: int) -> int | None:
        starts = prompt.message_starts
        return starts[i] if i < len(starts) else None

    def has_reasoning(m: Mapping[str, Any]) -> bool:
        content = m.get("content")
        field = m.get(reasoning_field) or m.get("reasoning_content") or m.get("reasoning")
        return bool(field) or (isinstance(content, str) and "</think>" in content)

    limits: list[HorizonLimit] = []
    holds: list[str] = []

    text = prompt.text + parsed.text

    def limit_at(char: int | None, kind: str, detail: str, *, in_turn: bool = True) -> None:
        """A limit at ``char``; inside a turn, whitespace just before it may merge (BPE) with
        whatever the rewrite puts there, so the limit steps back over that token."""
        if char is None:
            return
        token = pos.token(char)
        if in_turn and 0 < char <= len(text) and text[char - 1].isspace():
            token = max(0, token - 1)
        limits.append(HorizonLimit(token, kind, detail))

    for rewrite in active_rewrites(family, kwargs):
        trigger = trigger_of(rewrite)
        if trigger in _CONDITIONS:
            holds.append(_CONDITIONS[trigger])
            continue
        turn_matches = rewrite.turns == "any" or (rewrite.turns == "tool_calls") == calls
        kind = rewrite.kind
        if kind in ("drop_reasoning_before_last_user", "empty_think_block") and trigger == "new_user_message":
            needs_reasoning = kind == "drop_reasoning_before_last_user"
            for i in range(last_user + 1, len(messages)):
                m = messages[i]
                if m.get("role") == "assistant" and (has_reasoning(m) or not needs_reasoning):
                    limit_at(
                        turn_start(i),
                        kind,
                        f"messages[{i}] loses its think block once a new user message arrives",
                        in_turn=False,
                    )
                    break
            else:
                if parsed.reasoning or (not needs_reasoning and think_at is not None):
                    limit_at(
                        u_char,
                        kind,
                        "this turn loses its think block once a new user message arrives",
                        in_turn=False,
                    )
        elif kind == "drop_all_reasoning" and trigger == "final_answer":
            # a tool-call turn's analysis (its reasoning, or its content where the format writes
            # content there) stays until a final answer follows it
            last_final = max(
                (
                    i
                    for i, m in enumerate(messages)
                    if m.get("role") == "assistant" and not m.get("tool_calls")
                ),
                default=-1,
            )
            for i in range(last_final + 1, len(messages)):
                m = messages[i]
                if (
                    m.get("role") == "assistant"
                    and m.get("tool_calls")
                    and (has_reasoning(m) or m.get("content"))
                ):
                    limit_at(
                        turn_start(i),
                        kind,
                        f"messages[{i}] loses its analysis once a final answer follows",
                        in_turn=False,
                    )
                    break
            else:
                if calls and (parsed.reasoning or parsed.content):
                    limit_at(
                        think_at if parsed.reasoning else p_char,
                        kind,
                        "this turn loses its analysis once a final answer follows",
                    )
        elif kind == "drop_all_reasoning" and turn_matches and think_at is not None:
            if parsed.reasoning or fmt.think is not None:
                limit_at(think_at, kind, "this turn's reasoning is not rendered in history")
        elif kind == "empty_think_block" and turn_matches and not parsed.reasoning and think_at is not None:
            limit_at(think_at, kind, "this turn's empty think block is re-written in history")
        elif kind == "tools_before_last_user" and last_user >= 0:
            limit_at(
                turn_start(last_user), kind, "the tool list moves to the next user message", in_turn=False
            )
        elif kind == "reserialize_tool_arguments" and calls:
            at = _first_rewritten_arguments(parsed, fmt, habits)
            if at is not None:
                limit_at(p_char + at, kind, "this turn's tool-call arguments are re-written in history")
        elif kind == "reorder_channels" and calls:
            region = parsed.region(RegionKind.TOOL_CALL)
            if region is not None:
                limit_at(p_char + region.start, kind, "this turn's tool-call header is re-ordered in history")
    if parsed.reasoning and not habits.echo_reasoning:
        limit_at(think_at, "client_drops_reasoning", "the client does not send reasoning_content back")
    limits += _token_effects(family, prompt, generated, parsed)

    trailing = trailing_controls(generated, control_ids(family, fmt))
    rewritten_stop = any(r.kind == "rewrite_stop_token" for r in active_rewrites(family, kwargs))
    kept = len(prompt.token_ids) + len(generated) - (trailing if rewritten_stop else 0)
    shallowest = min(limits, key=lambda lim: lim.position, default=None)
    position = min(kept, shallowest.position) if shallowest else kept
    return Horizon(
        position,
        shallowest if shallowest and shallowest.position < kept else None,
        tuple(sorted(limits, key=lambda lim: lim.position)),
        tuple(dict.fromkeys(holds)),
    )


def _think_start(prompt: Rendering, fmt: Any, u_char: int, p_char: int, region: Any) -> int | None:
    """Where this turn's reasoning begins: the pre-filled open tag, or the written one."""
    if fmt.harmony:
        return p_char + region.start if region is not None else None
    if fmt.think is None:
        return None
    state, _ = fmt.think.prefill(prompt.text[u_char:])
    if state is not Prefill.NONE:
        return prompt.text.find(fmt.think.open_tag, u_char)
    return p_char + region.start if region is not None else None


def _first_rewritten_arguments(parsed: ParsedOutput, fmt: Any, habits: ClientHabits) -> int | None:
    """Where the first tool call whose written arguments a template re-writes starts: JSON
    arguments that ``tojson`` writes differently (unless the client sends them back as
    written); XML values that are JSON other than a string (a client that types them by the
    tool's schema sends them back as values, and the template writes ``tojson`` or ``str()``)."""
    xml = fmt.syntax is not None and fmt.syntax.name in PARAMETERS
    for region in parsed.regions:
        if region.kind is not RegionKind.ARGUMENTS:
            continue
        if xml:
            values = written_parameters(fmt.syntax.name, parsed.text[region.start : region.end])
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
    family: Family, prompt: Rendering, generated: Sequence[int], parsed: ParsedOutput
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
