"""gpt-oss harmony output: a turn is a run of channel messages.

Where it sits: in outputs, beside the tool-call syntaxes: ``codec`` and ``reading`` call it for
harmony formats.

The model writes, after the generation prompt's ``<|start|>assistant``::

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

or, for a tool call (one per turn; ``<|call|>`` ends the turn)::

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>

A commentary message without a recipient is a preamble, read as content. Headers are read
in either order (``to=`` before or after the channel), as the chat template writes them
``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from boundary.errors import RequestError
from boundary.outputs.arguments import JSONTextError, arguments_object
from boundary.outputs.formats.base import ReadCall
from boundary.outputs.model import Region, RegionKind, WrittenCall

START = "<|start|>assistant"
MESSAGE = "<|message|>"
END = "<|end|>"
RETURN = "<|return|>"
CALL = "<|call|>"
_TERMINATORS = (END, RETURN, CALL)
_CHANNEL = re.compile(r"<\|channel\|>(\w+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


@dataclass(frozen=True, slots=True)
class HarmonyWritten:
    body: str
    stop_token: str


@dataclass(frozen=True, slots=True)
class HarmonyRead:
    reasoning: str | None
    content: str | None
    calls: list[ReadCall]
    regions: list[Region] = field(default_factory=list)
    stop_token: str | None = None
    problem: str | None = None
    unclosed: bool = False


def write(
    reasoning: str | None, content: str | None, calls: Sequence[WrittenCall], *, prefilled: bool
) -> HarmonyWritten:
    if len(calls) > 1:
        raise RequestError(
            f"harmony ends a turn at its first tool call ({len(calls)} given): one call per generated turn",
            location="message.tool_calls",
        )
    messages: list[str] = []
    if reasoning is not None:
        messages.append(f"<|channel|>analysis{MESSAGE}{reasoning}{END}")
    if calls:
        if content:
            messages.append(f"<|channel|>commentary{MESSAGE}{content}{END}")
        c = calls[0]
        messages.append(
            f"<|channel|>commentary to=functions.{c.name} <|constrain|>json{MESSAGE}{c.arguments}"
        )
        stop = CALL
    else:
        messages.append(f"<|channel|>final{MESSAGE}{content or ''}")
        stop = RETURN
    body = "".join(m if i == 0 and prefilled else START + m for i, m in enumerate(messages))
    return HarmonyWritten(body, stop)


def read(text: str, *, prefilled: bool) -> HarmonyRead:
    found = _Found()
    pos = 0
    stop: str | None = None
    while pos < len(text):
        seg = pos
        if text.startswith(START, pos):
            head = pos + len(START)
        elif pos == 0 and prefilled:
            head = pos
        else:
            return found.result(None, f"unexpected text: {text[pos : pos + 40]!r}")
        msg = text.find(MESSAGE, head)
        if msg < 0:
            return found.result(None, "a message header is never finished", True)
        header = text[head:msg]
        body_at = msg + len(MESSAGE)
        ends = [(text.find(t, body_at), t) for t in _TERMINATORS]
        ends = [(i, t) for i, t in ends if i >= 0]
        term_at, term = min(ends) if ends else (len(text), "")
        problem = found.take(header, text[body_at:term_at], seg, body_at, term_at, term)
        if problem is not None:
            return found.result(None, *problem)
        if not term:
            return found.result(None, "the last message is never finished", True)
        pos = term_at + len(term)
        if pos == len(text) or term in (RETURN, CALL):
            stop = term
            found.regions.append(Region(RegionKind.STOP, term_at, pos))
            if pos != len(text):
                return found.result(stop, f"text after {term}: {text[pos : pos + 40]!r}")
            break
    return found.result(stop, None)


@dataclass(slots=True)
class _Found:
    """What ``read`` has found so far, message by message."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: list[ReadCall] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)

    def take(
        self, header: str, body: str, seg: int, body_at: int, term_at: int, term: str
    ) -> tuple[str, bool] | None:
        """File one message (``seg`` to its terminator ``term`` at ``term_at``) by its header's
        recipient and channel; the problem, and whether the message is unfinished, if it
        cannot be filed."""
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        kind = channel.group(1) if channel else ""
        if recipient and recipient.group(1).startswith("functions."):
            try:
                arguments_object(body)
            except JSONTextError as exc:
                return f"tool call {len(self.calls)}: arguments are not a JSON object ({exc})", not term
            name = recipient.group(1).removeprefix("functions.")
            self.calls.append(ReadCall(name, body, None, seg, term_at, body_at, term_at))
            self.regions += [
                Region(RegionKind.TOOL_CALL, seg, term_at, len(self.calls) - 1),
                Region(RegionKind.ARGUMENTS, body_at, term_at, len(self.calls) - 1),
            ]
        elif kind == "analysis":
            self.reasoning.append(body)
            self.regions.append(
                Region(RegionKind.REASONING, seg, term_at + (len(term) if term == END else 0))
            )
        elif kind in ("final", "commentary"):
            self.content.append(body)
            self.regions.append(Region(RegionKind.CONTENT, seg, term_at))
        else:
            return f"unknown channel in header {header!r}", False
        return None

    def result(self, stop: str | None, problem: str | None, unclosed: bool = False) -> HarmonyRead:
        return HarmonyRead(
            "\n".join(self.reasoning) if self.reasoning else None,
            "\n".join(self.content) if self.content else None,
            self.calls,
            self.regions,
            stop,
            problem,
            unclosed,
        )
