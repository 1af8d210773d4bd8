"""The state machine vLLM 0.33.0's engine parsers run, as data-driven code: states, events,
a ``Grammar`` (a format's markers and ``(state, terminal) -> (next state, events)`` moves) and
the ``Machine`` that runs one over a text.

Where it sits: the bottom of ``engine_rules``: ``engine_grammars`` writes each format as a
``Grammar``, ``engine_rules`` runs the passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# -- states and events ------------------------------------------------------------------------

CONTENT, REASONING, PREAMBLE, NAME, ARGS, BETWEEN = (
    "content",
    "reasoning",
    "preamble",
    "name",
    "args",
    "between",
)
TOOL_STATES = frozenset({PREAMBLE, NAME, ARGS, BETWEEN})
TEXT, THOUGHT, THOUGHT_END, START, CALL_NAME, CALL_ARGS, END = (
    "text",
    "thought",
    "thought_end",
    "start",
    "call_name",
    "call_args",
    "end",
)
TOOL_EVENTS = frozenset({START, CALL_NAME, CALL_ARGS, END})
_FOR_STATE = {CONTENT: TEXT, REASONING: THOUGHT, NAME: CALL_NAME, ARGS: CALL_ARGS}
_DROP = "__drop__"

Move = tuple[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class EngineMessage:
    """What the engine returns for one turn: ``calls`` holds ``(name, arguments, id or None)``."""

    reasoning: str | None
    content: str | None
    calls: tuple[tuple[str, str, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class Grammar:
    """One engine format: its markers, its moves, and how it turns calls into arguments.

    ``arguments`` maps a call's raw argument text (never blank) to its JSON text;
    ``name_rule`` maps a call's raw name text and raw arguments to its name.
    """

    terminals: Mapping[str, tuple[str, ...]]
    moves: Mapping[tuple[str, str], Move]
    arguments: Callable[[str], str]
    name_rule: Callable[[str, str], tuple[str, str | None]] | None = None
    strip_content_with_tools: bool = True
    declared_only: bool = False  # calls to tools the request does not declare are dropped
    empty_name_ok: bool = False  # a call without a name is still a call (Mistral)
    short_ids: bool = False  # calls get 9-character alphanumeric ids (Mistral's)
    envelope_name: bool = True  # a nameless call may name itself in a JSON envelope
    reasoning_terminals: frozenset[str] = field(default=frozenset())

    def literals(self, dropped: frozenset[str]) -> dict[str, str]:
        out = {lit: name for name, spellings in self.terminals.items() for lit in spellings}
        for token in dropped:
            out.setdefault(token, _DROP)
        return out


def _lex(text: str, literals: Mapping[str, str]) -> list[tuple[str | None, str]]:
    """``text`` as terminals and text runs: the longest marker starting at each position."""
    by_first: dict[str, list[str]] = {}
    for lit in sorted(literals, key=len, reverse=True):
        if lit:
            by_first.setdefault(lit[0], []).append(lit)
    out: list[tuple[str | None, str]] = []
    i = run = 0
    while i < len(text):
        hit = next((lit for lit in by_first.get(text[i], ()) if text.startswith(lit, i)), None)
        if hit is None:
            i += 1
            continue
        if run < i:
            out.append((None, text[run:i]))
        out.append((literals[hit], hit))
        i = run = i + len(hit)
    if run < len(text):
        out.append((None, text[run:]))
    return out


@dataclass(slots=True)
class Machine:
    """One pass over the text: ``skip_tools`` reads tool markers as text (the reasoning pass),
    ``skip_reasoning`` reads reasoning markers as text (no reasoning parser configured)."""

    grammar: Grammar
    state: str
    skip_tools: bool = False
    skip_reasoning: bool = False
    index: int = -1
    in_span: bool = False
    events: list[tuple[str, str, int]] = field(default_factory=list)

    def run(self, text: str, dropped: frozenset[str]) -> list[tuple[str, str, int]]:
        for terminal, value in _lex(text, self.grammar.literals(dropped)):
            if terminal is None:
                self._emit_for_state(value)
            else:
                self._terminal(terminal, value)
        if self.state in TOOL_STATES:
            if self.index >= 0:
                self.events.append((END, "", self.index))
            self.state = CONTENT
        elif self.state == REASONING:
            self.events.append((THOUGHT_END, "", self.index))
            self.state = CONTENT
        return self.events

    def _emit_for_state(self, value: str) -> None:
        kind = _FOR_STATE.get(self.state)
        if kind is not None and value:
            self.events.append((kind, value, self.index))

    def _terminal(self, terminal: str, value: str) -> None:
        g = self.grammar
        move = g.moves.get((self.state, terminal))
        if move is None:
            if terminal == _DROP:
                return
            if self.skip_tools and terminal in _tool_exits(g):
                self.in_span = False
            self._emit_for_state(value)
            return
        if self.skip_reasoning and terminal in g.reasoning_terminals:
            self._emit_for_state(value)
            return
        nxt, events = move
        if self.skip_tools and terminal in _tool_terminals(g):
            opener, exit_ = nxt in TOOL_STATES, terminal in _tool_exits(g)
            if not (exit_ and not opener and not self.in_span):
                self.in_span = opener or (self.in_span and not exit_)
                if THOUGHT_END in events:
                    self.state = CONTENT
                    self.events += [(THOUGHT_END, value, self.index), (TEXT, value, self.index)]
                else:
                    self._emit_for_state(value)
                return
        self.state = nxt
        for event in events:
            if event == START:
                self.index += 1
            if event != TEXT or value:
                self.events.append((event, value, self.index))


def _tool_terminals(g: Grammar) -> frozenset[str]:
    return frozenset(t for (s, t), (n, _) in g.moves.items() if n in TOOL_STATES or s in TOOL_STATES)


def _tool_exits(g: Grammar) -> frozenset[str]:
    return frozenset(t for (s, t), (n, _) in g.moves.items() if s in TOOL_STATES and n not in TOOL_STATES)


def reasoning_markers(moves: Mapping[tuple[str, str], Move]) -> frozenset[str]:
    """Markers that only open or close reasoning (read as text when no reasoning parser runs)."""
    plain = {CONTENT, REASONING}
    markers = frozenset(t for (s, t), (n, _) in moves.items() if REASONING in (s, n) and n not in TOOL_STATES)
    for (s, t), (n, events) in moves.items():
        if t in markers and (s not in plain or n not in plain or not set(events) <= {THOUGHT_END}):
            return frozenset()
    return markers
