"""A generated turn read by the rules of vLLM 0.33.0's parsers, without vLLM.

Where it sits: in outputs, below ``reading``: the engine's reading of a turn, by rule, with no
vLLM import.

The message a client gets back is what the serving engine's composed parser returns
(``ParserManager.get_parser(tool, reasoning, enable_auto_tools=True)`` then ``parse``): the
reasoning parser splits the text, the tool parser reads calls from what it left as content.
This module reproduces those rules for every parser pair a shipped family names
(``output.vllm_tool_parser`` / ``output.vllm_reasoning_parser``):

- *engine parsers* (``qwen3`` and ``nemotron_v3`` reasoning, ``minimax_m2``; ``qwen3_coder``,
  ``kimi_k2``, ``minimax_m2``, ``mistral`` tools) run a state machine over terminals found in
  the text (the longest marker at each position wins); each format is a table of
  ``(state, terminal) -> (next state, events)`` in ``engine_grammars``. A reasoning pass runs it with tool
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from boundary.outputs.arguments import parameter_types, typed_arguments
from boundary.outputs.engine_grammars import (
    CHATML,
    ENGINE_REASONING,
    ENGINE_TOOLS,
    NAME_IN_ARGS,
    envelope,
    supported,
)
from boundary.outputs.engine_machine import (
    CALL_ARGS,
    CALL_NAME,
    CONTENT,
    REASONING,
    TEXT,
    THOUGHT,
    TOOL_EVENTS,
    EngineMessage,
    Grammar,
    Machine,
)

__all__ = ["EngineMessage", "engine_message", "supported"]


# -- the reasoning pass -----------------------------------------------------------------------


def _prompt_closes_reasoning(prompt_text: str, open_tag: str, closers: Sequence[str]) -> bool:
    """The engine starts in content when, after the prompt's last turn marker, the last
    reasoning marker closes the reasoning (``</think>`` or a tool-call start)."""
    start = max((prompt_text.rfind(b) + len(b) for b in CHATML if b in prompt_text), default=0)
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
        events = Machine(grammar, CONTENT if closed else REASONING, skip_tools=True).run(text, dropped)
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
    events = Machine(grammar, CONTENT, skip_reasoning=skip_reasoning).run(text, dropped)
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
            found = NAME_IN_ARGS.search(raw)
            name = found.group(1) if found else ""
        else:
            name = header
        name = name.strip() if isinstance(name, str) else name
        if not name and raw.strip() and grammar.envelope_name:
            name, arguments = envelope(raw)
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
