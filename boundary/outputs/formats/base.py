"""The shape every tool-call syntax has: where its calls start, how it writes and reads them.

A syntax works on the *block*: the generated text from its ``start`` marker to the end of
the turn's body (stop token excluded). Spans it returns are relative to that block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from boundary.outputs.model import WrittenCall


@dataclass(frozen=True, slots=True)
class ReadCall:
    """One tool call read back: ``arguments`` is a JSON object's text; spans are
    ``[start, end)`` of the whole call and of its arguments in the block."""

    name: str
    arguments: str
    call_id: str | None
    start: int
    end: int
    args_start: int
    args_end: int


@dataclass(frozen=True, slots=True)
class CallsRead:
    """The calls of a block; ``end`` is where the last call's framing ends; ``problem`` is set
    when the block breaks the syntax (``unclosed`` says it may just be cut off)."""

    calls: list[ReadCall]
    end: int
    problem: str | None = None
    unclosed: bool = False


@dataclass(frozen=True, slots=True)
class CallContext:
    """What writing or reading calls may need beyond the calls: the prompt text (Kimi numbers
    calls across the conversation) and the tools' parameter types (XML syntaxes type values)."""

    prompt_text: str = ""
    parameter_types: dict[str, dict[str, Any]] = field(default_factory=dict)


class ToolCallSyntax(Protocol):
    # read-only members (properties), so frozen dataclasses implement the protocol
    @property
    def name(self) -> str: ...
    @property
    def start(self) -> str: ...  # the text that opens the tool calls; content ends where it first appears
    @property
    def before(self) -> str: ...  # written between non-empty content and the first call
    @property
    def between(self) -> str: ...  # written between two calls
    @property
    def after(self) -> str: ...  # written after the last call, before the stop token

    def write(self, calls: Sequence[WrittenCall], between: str, context: CallContext) -> str: ...

    def read(self, block: str, context: CallContext) -> CallsRead: ...
