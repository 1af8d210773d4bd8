"""The reading loop of syntaxes that frame each call with an opening and a closing marker.

Where it sits: among the tool-call syntaxes, above ``base``: the read loop that ``json_calls``
and ``xml_calls`` share.

Such a block is a run of calls ``call_open ... [sep ...] call_close`` with whitespace between
them. Either the run is the whole block, or a section wraps it: ``section.open`` at the
block's start, ``section.close`` after the last call. The loop finds each call's markers and
reports what breaks the framing; a syntax reads only what stands between one call's markers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from boundary.outputs.arguments import skip_whitespace
from boundary.outputs.formats.base import CallContext, CallsRead, ReadCall


@dataclass(frozen=True, slots=True)
class Section:
    """The markers around all of a block's calls; ``noun`` names the section in problems."""

    open: str
    close: str
    noun: str


@dataclass(frozen=True, slots=True)
class CallFrame:
    """Where one call's markers stand in the block: its opening marker at ``start``, its
    separator at ``sep`` (``start`` when the syntax has none), its closing marker at ``close``,
    ending at ``end``. ``index`` numbers the call in the block."""

    index: int
    start: int
    sep: int
    close: int
    end: int


# Reads the call in one frame: the call (its ``end`` is where the next may start) or a problem.
ReadFramed = Callable[[str, CallFrame, CallContext], ReadCall | str]


@dataclass(frozen=True, slots=True)
class Framing:
    """A syntax's call markers (``sep`` empty when it has none) and the section around its
    calls (None when the calls run to the end of the block)."""

    call_open: str
    call_close: str
    sep: str = ""
    section: Section | None = None

    def read(self, block: str, context: CallContext, read_call: ReadFramed) -> CallsRead:
        """Every call of ``block``, each read by ``read_call``; on a problem, the calls before it
        and the end of the last one."""
        section = self.section
        calls: list[ReadCall] = []
        pos = 0 if section is None else len(section.open)
        while True:
            at = skip_whitespace(block, pos)
            if section is not None and block.startswith(section.close, at):
                return CallsRead(calls, at + len(section.close))
            if at >= len(block):
                if section is None:
                    return CallsRead(calls, pos)
                return CallsRead(calls, pos, f"the tool-call {section.noun} is never closed", unclosed=True)
            if not block.startswith(self.call_open, at):
                where = (
                    f"after tool call {len(calls) - 1}"
                    if section is None
                    else f"in the tool-call {section.noun}"
                )
                return CallsRead(calls, pos, f"unexpected text {where}: {block[at : at + 40]!r}")
            sep = block.find(self.sep, at)
            close = block.find(self.call_close, at)
            if sep < 0 or close < 0 or close < sep:
                return CallsRead(calls, pos, f"tool call {len(calls)} is never closed", unclosed=True)
            frame = CallFrame(len(calls), at, sep, close, close + len(self.call_close))
            found = read_call(block, frame, context)
            if isinstance(found, str):
                return CallsRead(calls, pos, found)
            calls.append(found)
            pos = found.end
