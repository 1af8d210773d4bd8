"""A generated turn read by the rules of vLLM 0.33.0's parsers, without vLLM.

The message a client gets back is what the serving engine's composed parser returns
(``ParserManager.get_parser(tool, reasoning, enable_auto_tools=True)`` then ``parse``): the
reasoning parser splits the text, the tool parser reads calls from what it left as content.
This module reproduces those rules for every parser pair a shipped family names
(``output.vllm_tool_parser`` / ``output.vllm_reasoning_parser``):

- *engine parsers* (``qwen3`` and ``nemotron_v3`` reasoning, ``minimax_m2``; ``qwen3_coder``,
  ``kimi_k2``, ``minimax_m2``, ``mistral`` tools) run a state machine over terminals found in
  the text (the longest marker at each position wins); each format is a table of
  ``(state, terminal) -> (next state, events)`` below. A reasoning pass runs it with tool
  markers read as text; a tool pass starts in content. Text after the first tool event is
  dropped once a call is accepted; content is stripped when calls were read.
- *legacy parsers* (``hermes``, ``deepseek_v3``, ``deepseek_v31`` tools; ``deepseek_r1``,
  ``deepseek_v3`` reasoning) use a regular expression over the whole text; any failure
  returns the text as content.

Invariant: reasoning and content are the engine's exact strings (no framing stripped that
the engine keeps); arguments are the engine's text (re-serialized where it re-serializes,
typed by the tool schemas where it types them).
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from boundary.outputs.arguments import parameter_types, typed_arguments

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
    strip_reasoning: bool = True  # trailing whitespace of the reasoning is dropped
    strip_content_with_tools: bool = True
    declared_only: bool = False  # calls to tools the request does not declare are dropped
    empty_name_ok: bool = False  # a call without a name is still a call (Mistral)
    short_ids: bool = False  # calls get 9-character alphanumeric ids (Mistral's)
    envelope_name: bool = True  # a nameless call may name itself in a JSON envelope
    turn_boundaries: tuple[str, ...] = ()  # the prompt may close the reasoning (ChatML)
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
class _Machine:
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


def _reasoning_markers(moves: Mapping[tuple[str, str], Move]) -> frozenset[str]:
    """Markers that only open or close reasoning (read as text when no reasoning parser runs)."""
    plain = {CONTENT, REASONING}
    markers = frozenset(t for (s, t), (n, _) in moves.items() if REASONING in (s, n) and n not in TOOL_STATES)
    for (s, t), (n, events) in moves.items():
        if t in markers and (s not in plain or n not in plain or not set(events) <= {THOUGHT_END}):
            return frozenset()
    return markers


# -- argument rules ---------------------------------------------------------------------------

_QWEN3_PARAM = re.compile(
    r"<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", re.DOTALL
)
_MINIMAX_PARAM = re.compile(
    r"<\s*parameter\s+name\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^>\s]+))\s*>"
    r"(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s+name\s*=))",
    re.DOTALL,
)


def _qwen3_parameters(raw: str) -> str:
    """``<parameter=KEY>VALUE</parameter>`` (or up to the next opener): one newline trimmed
    from each end of a value; the key as written."""
    params: dict[str, Any] = {}
    for m in _QWEN3_PARAM.finditer(raw):
        value = m.group(2)
        value = value[1:] if value.startswith("\n") else value
        params[m.group(1)] = value[:-1] if value.endswith("\n") else value
    return json.dumps(params, ensure_ascii=False)


def _minimax_parameters(raw: str) -> str:
    """``<parameter name="KEY">VALUE</parameter>``: values verbatim, keys stripped, nameless skipped."""
    params: dict[str, Any] = {}
    for m in _MINIMAX_PARAM.finditer(raw):
        key = (m.group(1) or m.group(2) or m.group(3) or "").strip()
        if key:
            params[key] = m.group(4)
    return json.dumps(params, ensure_ascii=False)


def _json_as_written(raw: str) -> str:
    """Kimi: the argument text, stripped, whatever it is."""
    return raw.strip() or "{}"


def _first_json_value(raw: str) -> str:
    """Mistral: the first JSON value of the text (what follows it is dropped), else the text."""
    text = raw.strip()
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return text
    return text[:end]


def _envelope(raw: str) -> tuple[str, str]:
    """A nameless call's body read as ``{"name": ..., "arguments": ...}``: name and arguments."""
    body = raw.strip()
    try:
        parsed = json.loads(body)
    except ValueError:
        return "", body
    if not isinstance(parsed, dict):
        return "", body
    name = parsed.get("name", "")
    for key in ("arguments", "parameters"):
        if key in parsed:
            value = parsed[key]
            return name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return name, json.dumps({k: v for k, v in parsed.items() if k != "name"}, ensure_ascii=False)


_KIMI_ID = re.compile(r"(?P<id>.+:\d+)")
_NAME_IN_ARGS = re.compile(r'"name"\s*:\s*"([^"]*)"')


def _kimi_name(header: str, raw_args: str) -> tuple[str, str | None]:
    """``functions.NAME:N`` names the call NAME with id ``functions.NAME:N``. A header that is
    not one leaves the name to the arguments (a ``"name"`` key) once arguments were written,
    else the header itself."""
    m = _KIMI_ID.match(header.strip())
    if m:
        call_id = m.group("id").strip()
        name = call_id.split(":")[0].removeprefix("functions.")
        if name:
            return name, call_id
    if raw_args:
        found = _NAME_IN_ARGS.search(raw_args)
        return (found.group(1) if found else ""), None
    return header, None


# -- formats ----------------------------------------------------------------------------------


def _qwen3(thinking: bool = True) -> Grammar:
    moves: dict[tuple[str, str], Move] = {
        (REASONING, "think"): (REASONING, ()),
        (REASONING, "/think"): (CONTENT, (THOUGHT_END,)),
        (CONTENT, "/think"): (CONTENT, ()),
        (REASONING, "tool"): (PREAMBLE, (THOUGHT_END, START)),
        (CONTENT, "tool"): (PREAMBLE, (THOUGHT_END, START)),
        (CONTENT, "function"): (NAME, (START,)),
        (PREAMBLE, "/tool"): (CONTENT, (END,)),
        (PREAMBLE, "function"): (NAME, ()),
        (NAME, ">"): (ARGS, ()),
        (NAME, "/function"): (BETWEEN, (END,)),
        (NAME, "/tool"): (CONTENT, (END,)),
        (NAME, "tool"): (PREAMBLE, (END, START)),
        (NAME, "function"): (NAME, (END, START)),
        (ARGS, "/function"): (BETWEEN, (END,)),
        (ARGS, "function"): (NAME, (END, START)),
        (ARGS, "parameter"): (ARGS, (CALL_ARGS,)),
        (ARGS, "/parameter"): (ARGS, (CALL_ARGS,)),
        (BETWEEN, "/tool"): (CONTENT, ()),
        (BETWEEN, "tool"): (PREAMBLE, (START,)),
        (BETWEEN, "function"): (NAME, (START,)),
    }
    return Grammar(
        terminals={
            "think": ("<think>",),
            "/think": ("</think>",),
            "tool": ("<tool_call>",),
            "/tool": ("</tool_call>",),
            "function": ("<function=",),
            "/function": ("</function>",),
            "parameter": ("<parameter=",),
            "/parameter": ("</parameter>",),
            ">": (">",),
        },
        moves=moves,
        arguments=_qwen3_parameters,
        strip_reasoning=False,
        reasoning_terminals=_reasoning_markers(moves),
    )


def _kimi() -> Grammar:
    moves: dict[tuple[str, str], Move] = {
        (REASONING, "think"): (REASONING, ()),
        (REASONING, "/think"): (CONTENT, (THOUGHT_END,)),
        (CONTENT, "/think"): (CONTENT, ()),
        (REASONING, "section"): (PREAMBLE, (THOUGHT_END,)),
        (CONTENT, "section"): (PREAMBLE, ()),
        (PREAMBLE, "call"): (NAME, (START,)),
        (NAME, "args"): (ARGS, ()),
        (ARGS, "/call"): (BETWEEN, (END,)),
        (ARGS, "/section"): (PREAMBLE, (END,)),
        (BETWEEN, "call"): (NAME, (START,)),
        (PREAMBLE, "/section"): (PREAMBLE, ()),  # text after the section is never content
        (BETWEEN, "/section"): (PREAMBLE, ()),
    }
    return Grammar(
        terminals={
            "think": ("<think>",),
            "/think": ("</think>",),
            "section": ("<|tool_calls_section_begin|>",),
            "/section": ("<|tool_calls_section_end|>",),
            "call": ("<|tool_call_begin|>",),
            "/call": ("<|tool_call_end|>",),
            "args": ("<|tool_call_argument_begin|>",),
        },
        moves=moves,
        arguments=_json_as_written,
        name_rule=_kimi_name,
        strip_content_with_tools=False,
        reasoning_terminals=_reasoning_markers(moves),
    )


def _minimax() -> Grammar:
    invokes = ("invoke_dq", "invoke_sq", "invoke")
    moves: dict[tuple[str, str], Move] = {
        (REASONING, "think"): (REASONING, ()),
        (REASONING, "/think"): (CONTENT, (THOUGHT_END,)),
        (CONTENT, "/think"): (CONTENT, ()),
        (REASONING, "tool"): (PREAMBLE, (THOUGHT_END,)),
        (CONTENT, "tool"): (PREAMBLE, ()),
        (ARGS, "parameter"): (ARGS, (CALL_ARGS,)),
        (ARGS, "/parameter"): (ARGS, (CALL_ARGS,)),
        (PREAMBLE, "/tool"): (CONTENT, ()),
        (BETWEEN, "/tool"): (CONTENT, ()),
        (CONTENT, "/tool"): (CONTENT, ()),
        (ARGS, "/invoke"): (BETWEEN, (END,)),
        **{(s, t): (NAME, (START,)) for s in (CONTENT, PREAMBLE, BETWEEN) for t in invokes},
        **{(NAME, t): (ARGS, ()) for t in ('">', "'>", ">")},
    }
    return Grammar(
        terminals={
            "think": ("<think>",),
            "/think": ("</think>",),
            "tool": ("<minimax:tool_call>",),
            "/tool": ("</minimax:tool_call>",),
            "parameter": ("<parameter name=",),
            "/parameter": ("</parameter>",),
            "invoke_dq": ('<invoke name="',),
            "invoke_sq": ("<invoke name='",),
            "invoke": ("<invoke name=",),
            "/invoke": ("</invoke>",),
            '">': ('">',),
            "'>": ("'>",),
            ">": (">",),
        },
        moves=moves,
        arguments=_minimax_parameters,
        declared_only=True,
        reasoning_terminals=_reasoning_markers(moves),
    )


def _mistral() -> Grammar:
    """``[TOOL_CALLS]NAME[ARGS]{...}`` (or ``NAME{...}``); a tokenizer without ``[THINK]``
    and without mistral-common's grammar support has no reasoning markers."""
    moves: dict[tuple[str, str], Move] = {
        (CONTENT, "calls"): (NAME, (START,)),
        (NAME, "args"): (ARGS, ()),
        (NAME, "{"): (ARGS, (CALL_ARGS,)),
        (ARGS, "calls"): (NAME, (END, START)),
    }
    return Grammar(
        terminals={"calls": ("[TOOL_CALLS]",), "args": ("[ARGS]",), "{": ("{",)},
        moves=moves,
        arguments=_first_json_value,
        empty_name_ok=True,
        short_ids=True,
        envelope_name=False,
    )


_CHATML = ("<|im_start|>", "<|im_end|>")
ENGINE_TOOLS: dict[str, Callable[[], Grammar]] = {
    "qwen3_coder": _qwen3,
    "kimi_k2": _kimi,
    "minimax_m2": _minimax,
    "mistral": _mistral,
}
LEGACY_TOOLS = ("hermes", "deepseek_v3", "deepseek_v31")
# engine reasoning parsers: the grammar, whether trailing whitespace of reasoning is dropped,
# and whether the prompt (ChatML turns) can close the reasoning before the turn starts
ENGINE_REASONING: dict[str, tuple[Callable[[], Grammar], bool, bool]] = {
    "qwen3": (_qwen3, False, True),
    "nemotron_v3": (_qwen3, True, True),
    "minimax_m2": (_minimax, True, False),
}
LEGACY_REASONING = ("deepseek_r1", "deepseek_v3")
KNOWN_TOOLS = frozenset([*ENGINE_TOOLS, *LEGACY_TOOLS])
KNOWN_REASONING = frozenset([*ENGINE_REASONING, *LEGACY_REASONING])


def supported(tool_parser: str | None, reasoning_parser: str | None) -> bool:
    """Whether this module reads turns as the named vLLM parser pair does."""
    return (tool_parser is not None or reasoning_parser is not None) and (
        (tool_parser is None or tool_parser in KNOWN_TOOLS)
        and (reasoning_parser is None or reasoning_parser in KNOWN_REASONING)
    )


# -- the reasoning pass -----------------------------------------------------------------------


def _prompt_closes_reasoning(prompt_text: str, open_tag: str, closers: Sequence[str]) -> bool:
    """The engine starts in content when, after the prompt's last turn marker, the last
    reasoning marker closes the reasoning (``</think>`` or a tool-call start)."""
    start = max((prompt_text.rfind(b) + len(b) for b in _CHATML if b in prompt_text), default=0)
    tail = prompt_text[start:]
    last = max(((tail.rfind(m), m) for m in (open_tag, *closers) if m in tail), default=None)
    return last is not None and last[1] != open_tag


def _engine_reasoning(
    name: str, text: str, prompt_text: str, kwargs: Mapping[str, Any], dropped: frozenset[str]
) -> tuple[str | None, str | None]:
    make, strip, chatml = ENGINE_REASONING[name]
    reasoning: str | None
    content: str | None
    if name in ("qwen3", "nemotron_v3") and not kwargs.get("enable_thinking", True):
        reasoning, content = None, text
    else:
        grammar = make()
        closed = chatml and _prompt_closes_reasoning(prompt_text, "<think>", ("</think>", "<tool_call>"))
        events = _Machine(grammar, CONTENT if closed else REASONING, skip_tools=True).run(text, dropped)
        thought = "".join(v for k, v, _ in events if k == THOUGHT)
        reasoning = (thought.rstrip() if strip else thought) or None
        content = "".join(v for k, v, _ in events if k == TEXT) or None
    forced = kwargs.get("enable_thinking") is False or kwargs.get("force_nonempty_content") is True
    if name == "nemotron_v3" and forced and (content is None or not content.strip()):
        reasoning, content = content, reasoning  # an answer written as reasoning is the answer
    return reasoning, content


def _legacy_reasoning(name: str, text: str, kwargs: Mapping[str, Any]) -> tuple[str | None, str | None]:
    if name == "deepseek_v3" and not (kwargs.get("thinking") or kwargs.get("enable_thinking")):
        return None, text
    before, tag, after = text.partition("<think>")
    rest = after if tag else before
    if "</think>" not in rest:
        return rest, None
    reasoning, _, content = rest.partition("</think>")
    return reasoning, content or None


# -- the tool pass ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ToolRead:
    called: bool
    calls: tuple[tuple[str, str, str | None], ...]
    content: str | None


def _engine_tools(
    grammar: Grammar,
    text: str,
    tools: Sequence[Mapping[str, Any]],
    *,
    skip_reasoning: bool,
    dropped: frozenset[str],
) -> _ToolRead:
    events = _Machine(grammar, CONTENT, skip_reasoning=skip_reasoning).run(text, dropped)
    before: list[str] = []
    after: list[str] = []
    names: dict[int, str] = {}
    raw_args: dict[int, str] = {}
    seen_tool = False
    for kind, value, index in events:
        if kind == TEXT:
            (after if seen_tool else before).append(value)
        elif kind in TOOL_EVENTS:
            seen_tool = True
            names.setdefault(index, "")
            raw_args.setdefault(index, "")
            if kind == CALL_NAME:
                names[index] += value
            elif kind == CALL_ARGS:
                raw_args[index] += value
    declared = parameter_types(tools)
    calls: list[tuple[str, str, str | None]] = []
    for index in sorted(names):
        header, raw = names[index], raw_args[index]
        if not header and not raw:
            continue
        call_id: str | None = None
        if grammar.name_rule is not None:
            name, call_id = grammar.name_rule(header, raw)
        elif not header.strip() and raw and grammar.envelope_name:
            found = _NAME_IN_ARGS.search(raw)
            name = found.group(1) if found else ""
        else:
            name = header
        name = name.strip() if isinstance(name, str) else name
        if not name and raw.strip() and grammar.envelope_name:
            name, arguments = _envelope(raw)
        elif raw.strip():
            arguments = grammar.arguments(raw)
        else:
            arguments = "{}"
        if not isinstance(name, str) or not (name or grammar.empty_name_ok):
            continue
        if grammar.declared_only and tools and name not in declared:
            continue
        if grammar.short_ids:
            call_id = _short_id(text, len(calls))
        calls.append((name, typed_arguments(arguments, declared.get(name)) if tools else arguments, call_id))
    content = "".join(before) + ("" if calls else "".join(after))
    if content and not content.strip() and names:
        content = ""  # whitespace before the calls is not content
    if calls and grammar.strip_content_with_tools:
        content = content.strip()
    return _ToolRead(bool(calls), tuple(calls), content or None)


def _short_id(text: str, index: int) -> str:
    """A stable id of the form Mistral requires (9 alphanumerics; vLLM draws a random one)."""
    digest = hashlib.sha256(f"{index}:{text}".encode()).digest()
    alphabet = string.ascii_letters + string.digits
    return "".join(alphabet[b % len(alphabet)] for b in digest[:9])


_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_DEEPSEEK_V3_CALL = re.compile(
    r"<｜tool▁call▁begin｜>(?P<type>.*)<｜tool▁sep｜>(?P<name>.*)\n```json\n"
    r"(?P<args>[\s\S]*?)\n```<｜tool▁call▁end｜>"
)
_DEEPSEEK_V31_CALL = re.compile(
    r"<｜tool▁call▁begin｜>(?P<name>.*?)<｜tool▁sep｜>(?P<args>[\s\S]*?)<｜tool▁call▁end｜>"
)
_CALLS_BEGIN, _CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"


def _legacy_tools(name: str, text: str) -> _ToolRead:
    """hermes: every ``<tool_call>`` body (the last may be unclosed) is one JSON object;
    DeepSeek: every complete call the pattern finds. Any failure: no calls, the text as content."""
    if name == "hermes":
        if "<tool_call>" not in text:
            return _ToolRead(False, (), text)
        try:
            calls = []
            for closed, unclosed in _HERMES_CALL.findall(text):
                call = json.loads(closed or unclosed)
                if not isinstance(call["name"], str):
                    raise TypeError("name")
                calls.append((call["name"], json.dumps(call["arguments"], ensure_ascii=False), None))
        except (ValueError, KeyError, TypeError, IndexError):
            return _ToolRead(False, (), text)
        return _ToolRead(True, tuple(calls), text[: text.find("<tool_call>")] or None)
    if _CALLS_BEGIN not in text:
        return _ToolRead(False, (), text)
    content = text[: text.find(_CALLS_BEGIN)]
    if name == "deepseek_v3":
        found = list(_DEEPSEEK_V3_CALL.finditer(text))
        if any(m.group("type") != "function" for m in found):
            return _ToolRead(False, (), text)
        end = text.rfind(_CALLS_END)
        if end >= 0:
            content += text[end + len(_CALLS_END) :]
    else:
        found = list(_DEEPSEEK_V31_CALL.finditer(text))
    return _ToolRead(True, tuple((m.group("name"), m.group("args"), None) for m in found), content or None)


# -- the composed parser ----------------------------------------------------------------------


def engine_message(
    tool_parser: str | None,
    reasoning_parser: str | None,
    body: str,
    *,
    prompt_text: str = "",
    tools: Sequence[Mapping[str, Any]] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    special_tokens: Sequence[str] = (),
) -> EngineMessage:
    """What vLLM's composed parser (``tool_parser`` + ``reasoning_parser``) returns for
    ``body``, the generated text without its stop token, in a request declaring ``tools``
    (an empty list: ``tool_choice`` is ``"none"`` and no call is returned; None: not known,
    calls are read as with ``"auto"``, untyped). ``special_tokens``
    are the tokenizer's; the engine parsers drop those that are not one of their markers."""
    kwargs = dict(template_kwargs or {})
    dropped = frozenset(special_tokens)
    engine_based = True
    reasoning: str | None
    content: str | None
    if reasoning_parser is None:
        reasoning, content = None, body
    elif reasoning_parser in ENGINE_REASONING:
        reasoning, content = _engine_reasoning(reasoning_parser, body, prompt_text, kwargs, dropped)
    else:
        engine_based = False
        reasoning, content = _legacy_reasoning(reasoning_parser, body, kwargs)
    if tool_parser is None:
        return EngineMessage(reasoning, content)
    if tool_parser in ENGINE_TOOLS:
        read = _engine_tools(
            ENGINE_TOOLS[tool_parser](),
            content or "",
            tools or (),
            skip_reasoning=reasoning_parser is None,
            dropped=dropped,
        )
    else:
        engine_based = False
        read = _legacy_tools(tool_parser, content or "")
    if (
        tools is not None and not tools
    ):  # a request without tools has tool_choice "none": no calls are returned
        return EngineMessage(reasoning, read.content if engine_based else content)
    if read.called:
        text = read.content if read.content and read.content.strip() else None
        return EngineMessage(reasoning, text, read.calls)
    return EngineMessage(reasoning, (read.content or None) if engine_based else content)
