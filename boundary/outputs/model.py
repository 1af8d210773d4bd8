"""What a model generated for one assistant turn, written out and read back.

Where it sits: the bottom of outputs: the result types every outputs module, the round trip and
the audit read.

``GeneratedOutput`` is the model's side: the text it emitted after the prompt and the token
ids it committed, ending with its stop token. ``ParsedOutput`` is the frontend's side: the
assistant message it appends to history, plus where each part sits in the generated text
(regions, half-open ``[start, end)`` in characters of ``ParsedOutput.text``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class OutputStatus(StrEnum):
    COMPLETE = "complete"  # ended with a stop token and every part parsed
    TRUNCATED = "truncated"  # no stop token: cut off (length limit, abort); the parts so far are kept
    MALFORMED = "malformed"  # the format is violated (bad tool-call JSON, unclosed block before the stop)


class RegionKind(StrEnum):
    REASONING = "reasoning"  # reasoning opener, text and closer (a harmony analysis message)
    CONTENT = "content"  # the visible answer
    TOOL_CALL = "tool_call"  # one tool call, its framing included
    ARGUMENTS = "arguments"  # a tool call's arguments as written (inside its TOOL_CALL)
    STOP = "stop"  # the stop token


@dataclass(frozen=True, slots=True)
class Region:
    """A part of the generated text: ``[start, end)`` in characters; ``index`` numbers tool calls."""

    kind: RegionKind
    start: int
    end: int
    index: int | None = None


@dataclass(frozen=True, slots=True)
class WrittenCall:
    """One tool call as the model writes it: ``arguments`` is a JSON object's text, verbatim."""

    name: str
    arguments: str
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class GeneratedOutput:
    """What the model emitted after the prompt for one turn.

    ``text`` includes the stop token; ``token_ids`` is ``text`` before the stop token encoded
    with the family tokenizer, followed by the stop token's single id.
    """

    text: str
    token_ids: list[int]
    stop_token: str | None
    stop_token_id: int | None = None

    @property
    def body(self) -> str:
        """The text without its stop token."""
        return self.text[: len(self.text) - len(self.stop_token or "")]


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """Generated text read back into the assistant message a frontend appends.

    ``message`` is an OpenAI-style assistant message: ``content`` (None when only tool calls
    were written), ``reasoning_content`` when the model reasoned, ``tool_calls`` with
    ``arguments`` as a JSON string. ``problem`` says why the status is not COMPLETE.
    ``status``, ``problem`` and ``regions`` are boundary's reading of ``text`` whichever
    ``backend`` produced ``message`` (vLLM reports no status: it only returns a message).
    """

    status: OutputStatus
    message: dict[str, Any]
    text: str
    stop_token: str | None
    regions: tuple[Region, ...] = ()
    problem: str | None = None
    prefill: str = ""  # the generation prompt's pre-filled part of this turn (e.g. "<think>\n")
    backend: str = "boundary"  # who read ``message``: boundary's reader, or "vllm" (its parsers)

    @property
    def ok(self) -> bool:
        return self.status is OutputStatus.COMPLETE

    @property
    def content(self) -> str | None:
        return self.message.get("content")

    @property
    def reasoning(self) -> str | None:
        return self.message.get("reasoning_content")

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return self.message.get("tool_calls") or []

    def regions_at(self, char: int) -> list[Region]:
        """Every region containing ``char``, outermost first."""
        hits = [r for r in self.regions if r.start <= char < r.end]
        return sorted(hits, key=lambda r: (r.start, -r.end))

    def region(self, kind: RegionKind) -> Region | None:
        return next((r for r in self.regions if r.kind is kind), None)
