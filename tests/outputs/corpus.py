"""A seeded corpus of generated turns per output format, written independently of
boundary's writers: well-formed turns (content, reasoning, one or several calls, nested /
unicode / escaped arguments) and the ways models break them (text between or after calls,
a start tag in prose, unclosed reasoning, missing closers, bad JSON, a cut-off turn).

Each case is the text the model emitted after the prompt, its stop token included when
the turn ended with one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "book",
            "description": "Book a flight.",
            "parameters": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer"},
                    "who": {"type": "string"},
                    "legs": {"type": "array", "items": {"type": "object"}},
                    "vip": {"type": "boolean"},
                    "price": {"type": "number"},
                    "meta": {"type": "object"},
                    "seat": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                    "cabin": {"enum": ["economy", "business"]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search.",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
            },
        },
    },
]
MESSAGES = [{"role": "user", "content": "Book it."}]

_WORDS = [
    "Oslo",
    "Rome",
    "naïve",
    "日本",
    "emoji 🚀",
    'say "hi"',
    "back\\slash",
    "tab\there",
    "a\nb",
    "x < y",
]
_PROSE = ["Sure.", "Let me check.", "I'll book that now.", "Done!", "Två biljetter, tack.", "OK"]


@dataclass(frozen=True, slots=True)
class Case:
    """One generated turn: ``text`` (stop token included when ``stopped``) and what it tests."""

    kind: str
    text: str
    stopped: bool


def _value(rng: random.Random, key: str, depth: int = 0) -> Any:
    if key == "n":
        return rng.choice([1, 2, 12, 0, -3, "2"])
    if key == "who":
        return rng.choice(_WORDS)
    if key == "legs":
        return [{"from": rng.choice(_WORDS), "to": rng.choice(_WORDS)} for _ in range(rng.randint(0, 2))]
    if key == "vip":
        return rng.choice([True, False])
    if key == "price":
        return rng.choice([9.5, 100, 0.25, 1e-3])
    if key == "meta":
        return {"tags": [rng.choice(_WORDS)], "deep": {"k": [1, {"z": None}]}} if depth < 1 else {}
    if key == "seat":
        return rng.choice([12, None])
    if key == "cabin":
        return rng.choice(["economy", "business"])
    if key == "q":
        return rng.choice(_WORDS)
    if key == "limit":
        return rng.choice([5, 10])
    return rng.choice(_WORDS)


def arguments(rng: random.Random, name: str) -> dict[str, Any]:
    keys = ["n", "who", "legs", "vip", "price", "meta", "seat", "cabin"] if name == "book" else ["q", "limit"]
    chosen = rng.sample(keys, rng.randint(0, len(keys)))
    return {k: _value(rng, k) for k in chosen}


def _dumps(rng: random.Random, args: dict[str, Any]) -> str:
    return json.dumps(
        args, ensure_ascii=rng.random() < 0.3, separators=rng.choice([(", ", ": "), (",", ":")])
    )


# -- per-format writers ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Syntax:
    """How one format writes a run of calls, and which markers it uses."""

    calls: Callable[[random.Random, list[tuple[str, dict[str, Any]]]], str]
    start: str  # the text that opens the tool calls
    closers: tuple[str, ...]  # closing markers a model may leave out
    think: bool  # the format's family reasons between <think> tags


def _hermes(rng: random.Random, calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "\n".join(
        f'<tool_call>\n{{"name": "{n}", "arguments": {_dumps(rng, a)}}}\n</tool_call>' for n, a in calls
    )


def _xml_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _qwen3_xml(rng: random.Random, calls: list[tuple[str, dict[str, Any]]]) -> str:
    out = []
    for n, a in calls:
        params = "".join(f"<parameter={k}>\n{_xml_value(v)}\n</parameter>\n" for k, v in a.items())
        out.append(f"<tool_call>\n<function={n}>\n{params}</function>\n</tool_call>")
    return "\n".join(out)


def _minimax(rng: random.Random, calls: list[tuple[str, dict[str, Any]]]) -> str:
    invokes = ""
    for n, a in calls:
        params = "".join(f'<parameter name="{k}">{_xml_value(v)}</parameter>\n' for k, v in a.items())
        invokes += f'<invoke name="{n}">\n{params}</invoke>\n'
    return f"<minimax:tool_call>\n{invokes}</minimax:tool_call>"


def _kimi(rng: random.Random, calls: list[tuple[str, dict[str, Any]]]) -> str:
    parts = "".join(
        f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{_dumps(rng, a)}<|tool_call_end|>"
        for i, (n, a) in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{parts}<|tool_calls_section_end|>"


def _deepseek_v3(rng: random.Random, calls: list[tuple[str, dict[str, Any]]]) -> str:
    parts = "\n".join(
        f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{_dumps(rng, a)}\n```<｜tool▁call▁end｜>"
        for n, a in calls
    )
    return f"<｜tool▁calls▁begin｜>{parts}<｜tool▁calls▁end｜>"


def _deepseek_v31(rng: random.Random, calls: list[tuple[str, dict[str, Any]]]) -> str:
    parts = "".join(
        f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{_dumps(rng, a)}<｜tool▁call▁end｜>" for n, a in calls
    )
    return f"<｜tool▁calls▁begin｜>{parts}<｜tool▁calls▁end｜>"


def _mistral(rng: random.Random, calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(f"[TOOL_CALLS]{n}[ARGS]{_dumps(rng, a)}" for n, a in calls)


SYNTAXES: dict[str, Syntax] = {
    "hermes_json": Syntax(_hermes, "<tool_call>", ("</tool_call>",), True),
    "qwen3_coder_xml": Syntax(
        _qwen3_xml, "<tool_call>", ("</tool_call>", "</function>", "</parameter>"), True
    ),
    "minimax_xml": Syntax(
        _minimax, "<minimax:tool_call>", ("</minimax:tool_call>", "</invoke>", "</parameter>"), True
    ),
    "kimi_sections": Syntax(_kimi, "<|tool_calls_section_begin|>", ("<|tool_calls_section_end|>",), False),
    "deepseek_v3": Syntax(_deepseek_v3, "<｜tool▁calls▁begin｜>", ("<｜tool▁calls▁end｜>",), True),
    "deepseek_v3_1": Syntax(_deepseek_v31, "<｜tool▁calls▁begin｜>", ("<｜tool▁calls▁end｜>",), True),
    "mistral": Syntax(_mistral, "[TOOL_CALLS]", (), False),
}


def _calls(rng: random.Random, n: int) -> list[tuple[str, dict[str, Any]]]:
    return [(name, arguments(rng, name)) for name in (rng.choice(["book", "search"]) for _ in range(n))]


def _think(rng: random.Random, prefilled: bool) -> str:
    reasoning = rng.choice(["Check the dates.", "日本 first?\nThen Rome.", "  spaced  ", ""])
    return ("" if prefilled else "<think>\n") + reasoning + "\n</think>\n\n"


def cases(syntax_name: str, stop: str, *, prefilled_think: bool, seed: int = 0, n: int = 520) -> list[Case]:
    """``n`` seeded cases for one format; ``prefilled_think``: the prompt opened ``<think>``."""
    syn = SYNTAXES[syntax_name]
    rng = random.Random(f"{syntax_name}:{seed}")
    out: list[Case] = []
    kinds = [
        "answer",
        "one_call",
        "content_and_calls",
        "several_calls",
        "text_between",
        "text_after",
        "tag_in_prose",
        "missing_closer",
        "bad_json",
        "truncated",
        "unclosed_think",
        "call_in_unclosed_think",
        "undeclared_tool",
        "empty",
    ]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        think = ""
        if syn.think and (prefilled_think or rng.random() < 0.5) and kind not in ("unclosed_think",):
            think = _think(rng, prefilled_think)
        prose = rng.choice(_PROSE)
        stopped = True
        if kind == "answer":
            body = think + prose + rng.choice(["", "\n", "\n\nMore text."])
        elif kind == "empty":
            body = think
        elif kind == "one_call":
            body = think + syn.calls(rng, _calls(rng, 1))
        elif kind == "content_and_calls":
            body = (
                think
                + prose
                + rng.choice(["\n", "\n\n", " "])
                + syn.calls(rng, _calls(rng, rng.randint(1, 2)))
            )
        elif kind == "several_calls":
            body = think + syn.calls(rng, _calls(rng, rng.randint(2, 3)))
        elif kind == "text_between":
            a, b = syn.calls(rng, _calls(rng, 1)), syn.calls(rng, _calls(rng, 1))
            body = think + a + rng.choice(["\nand then\n", " ", "\n\nAlso: "]) + b
        elif kind == "text_after":
            body = think + syn.calls(rng, _calls(rng, 1)) + rng.choice(["\nDone.", " ok", "\n\n"])
        elif kind == "tag_in_prose":
            body = think + f"Use {syn.start} to call tools." + rng.choice(["", " Then answer."])
        elif kind == "missing_closer":
            text = syn.calls(rng, _calls(rng, rng.randint(1, 2)))
            if syn.closers:
                closer = rng.choice(syn.closers)
                at = text.rfind(closer)
                text = text[:at] + text[at + len(closer) :] if at >= 0 else text
            else:
                text = text[: text.rfind("}")]
            body = think + text
        elif kind == "bad_json":
            text = syn.calls(rng, [("book", {"who": "x", "n": 1})])
            body = think + text.replace('"who"', "who", 1).replace("\n1\n", "\n1,\n", 1)
        elif kind == "truncated":
            full = think + prose + "\n" + syn.calls(rng, _calls(rng, rng.randint(1, 2)))
            body = full[: rng.randint(1, len(full))]
            stopped = False
        elif kind == "unclosed_think":
            body = ("" if prefilled_think else "<think>\n") + "Still thinking " + prose
        elif kind == "call_in_unclosed_think":
            body = (
                ("" if prefilled_think else "<think>\n") + "Let me call.\n" + syn.calls(rng, _calls(rng, 1))
            )
        elif kind == "undeclared_tool":
            body = think + syn.calls(rng, [("cancel", {"id": rng.choice(_WORDS)})])
        else:  # pragma: no cover
            raise AssertionError(kind)
        out.append(Case(kind, body + (stop if stopped else ""), stopped))
    return out
