"""Reasoning written between think tags, including a ``<think>`` the generation prompt pre-filled.

Where it sits: in outputs, below ``codec`` and ``reading``: the think-tag rules a family's spec
names.

The generation prompt may leave the block open (``<think>\\n``: the model writes its
reasoning and closes it), closed (``<think></think>``: thinking is off, the model writes
only the answer), or not start one (the model opens it itself, or does not reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Prefill(StrEnum):
    NONE = "none"  # the prompt does not start a think block
    OPEN = "open"  # the prompt opened one; the model continues inside it
    CLOSED = "closed"  # the prompt wrote an empty block: thinking is off


@dataclass(frozen=True, slots=True)
class ThinkRead:
    """Reasoning read from the start of a turn's body: ``reasoning`` (None when the model did
    not reason), where the content starts, and a problem when the block never closes."""

    reasoning: str | None
    content_start: int
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """``opener`` / ``closer`` are the exact texts the model writes around its reasoning."""

    open_tag: str
    close_tag: str
    opener: str
    closer: str

    @classmethod
    def of(cls, tags: list[str], opener: str | None, closer: str | None) -> ThinkTags:
        open_tag, close_tag = tags
        return cls(open_tag, close_tag, opener or f"{open_tag}\n", closer or f"\n{close_tag}\n\n")

    def prefill(self, suffix: str) -> tuple[Prefill, str]:
        """The state the generation-prompt ``suffix`` leaves, and the pre-filled block text."""
        at = suffix.rfind(self.open_tag)
        if at < 0:
            return Prefill.NONE, ""
        if self.close_tag in suffix[at:]:
            return Prefill.CLOSED, suffix[at:]
        return Prefill.OPEN, suffix[at:]

    def write(self, reasoning: str | None, state: Prefill, prefilled: str) -> str:
        if state is Prefill.CLOSED:
            return ""
        if state is Prefill.OPEN:
            rest = self.opener[len(prefilled) :] if self.opener.startswith(prefilled) else ""
            return rest + (reasoning or "") + self.closer
        return "" if reasoning is None else self.opener + reasoning + self.closer

    def read(self, body: str, state: Prefill, prefilled: str) -> ThinkRead:
        if state is Prefill.CLOSED:
            return ThinkRead(None, 0)
        if state is Prefill.OPEN:
            rest = self.opener[len(prefilled) :] if self.opener.startswith(prefilled) else ""
            start = len(rest) if rest and body.startswith(rest) else 0
        else:
            lead = len(body) - len(body.lstrip())
            if body.startswith(self.open_tag, lead):
                start = lead + len(self.open_tag)
                rest = self.opener[len(self.open_tag) :] if self.opener.startswith(self.open_tag) else ""
                if rest and body.startswith(rest, start):
                    start += len(rest)
            elif self.close_tag in body and self.open_tag not in body:
                start = 0  # reasoning whose opening tag the model left out
            else:
                return ThinkRead(None, 0)
        close = body.find(self.close_tag, start)
        if close < 0:
            return ThinkRead(
                body[start:], len(body), f"the reasoning block is never closed ({self.close_tag})"
            )
        tag_at = self.closer.find(self.close_tag)
        before, after = (
            (self.closer[:tag_at], self.closer[tag_at + len(self.close_tag) :]) if tag_at >= 0 else ("", "")
        )
        reasoning = body[start:close]
        if before and reasoning.endswith(before):
            reasoning = reasoning[: -len(before)]
        end = close + len(self.close_tag)
        if after and body.startswith(after, end):
            end += len(after)
        else:
            while end < len(body) and body[end] == "\n":
                end += 1
        return ThinkRead(reasoning, end)
