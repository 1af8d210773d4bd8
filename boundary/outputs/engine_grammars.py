"""Each engine parser's format as a ``Grammar`` table, and its argument rules.

Where it sits: in outputs, between ``engine_machine`` (the ``Grammar`` type and states) and
``engine_rules`` (the passes that run these tables). A new engine format is a new table here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from boundary.outputs.engine_machine import (
    ARGS,
    BETWEEN,
    CALL_ARGS,
    CONTENT,
    END,
    NAME,
    PREAMBLE,
    REASONING,
    START,
    THOUGHT_END,
    Grammar,
    Move,
    reasoning_markers,
)

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


def envelope(raw: str) -> tuple[str, str]:
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
NAME_IN_ARGS = re.compile(r'"name"\s*:\s*"([^"]*)"')


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
        found = NAME_IN_ARGS.search(raw_args)
        return (found.group(1) if found else ""), None
    return header, None


# -- formats ----------------------------------------------------------------------------------
# Alike by design: each format is one table of moves (data), written out in full per format.


def _qwen3() -> Grammar:
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
        reasoning_terminals=reasoning_markers(moves),
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
        reasoning_terminals=reasoning_markers(moves),
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
        reasoning_terminals=reasoning_markers(moves),
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


CHATML = ("<|im_start|>", "<|im_end|>")
ENGINE_TOOLS: dict[str, Callable[[], Grammar]] = {
    "qwen3_coder": _qwen3,
    "kimi_k2": _kimi,
    "minimax_m2": _minimax,
    "mistral": _mistral,
}
LEGACY_TOOLS = ("hermes", "deepseek_v3", "deepseek_v31")


class ReasoningParser(NamedTuple):
    """An engine reasoning parser: its grammar, whether trailing whitespace of the reasoning
    is dropped, and whether the prompt (ChatML turns) can close the reasoning before the turn
    starts."""

    grammar: Callable[[], Grammar]
    strip: bool
    chatml: bool


ENGINE_REASONING: dict[str, ReasoningParser] = {
    "qwen3": ReasoningParser(_qwen3, strip=False, chatml=True),
    "nemotron_v3": ReasoningParser(_qwen3, strip=True, chatml=True),
    "minimax_m2": ReasoningParser(_minimax, strip=True, chatml=False),
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
