"""Shared test data: the fixture corpus, shipped families and transformers references.

Imported by tests as ``tests.support``."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import boundary

ROOT = Path(__file__).resolve().parents[1]
CONVERSATIONS = ROOT / "fixtures" / "conversations"
FIXED_NOW = datetime(2026, 5, 15, 12, 0, 0)


def fixture_cases() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(CONVERSATIONS.glob("*.json"))]


def shipped_variants() -> list[tuple[str, str]]:
    out = []
    for name in boundary.family_names():
        spec = boundary.family_spec(name)
        out.extend((name, v.name) for v in spec.variants)
    return out


def kwarg_settings(family: str) -> list[dict[str, Any]]:
    """The template defaults, plus each boolean template kwarg flipped from its default."""
    settings: list[dict[str, Any]] = [{}]
    for key, kw in boundary.family_spec(family).template_kwargs.items():
        if kw.type == "bool":
            settings.append({key: not kw.default})
    return settings


@cache
def family(name: str, variant: str | None = None) -> boundary.Family:
    return boundary.load_family(name, variant=variant)


@cache
def reference_tokenizer(name: str, variant: str) -> Any:
    """transformers' fast tokenizer over the same vocabulary, with the variant's template."""
    fam = family(name)
    return fam.tokenizer.to_transformers(fam.template(variant))


def fixed_strftime(fmt: str) -> str:
    return FIXED_NOW.strftime(fmt)


def reference_request(
    fam: boundary.Family,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    variant: str | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The raw request as a serving frontend hands it to transformers' ``apply_chat_template``,
    built here from the documented rules, not with boundary's request code (the code under
    test): messages and tools as sent (copied), plus vLLM's four conventions, a ``None``
    content made ``""``; ``tool_calls`` left out when None or empty, each call typed
    ``function``, its arguments parsed to an object (or kept / written as JSON text for a
    template that wants text); reasoning under ``reasoning`` and ``reasoning_content``
    (``reasoning`` wins) and under the family's reasoning field unless set; for a family
    that reads text only, text parts joined with newlines; and, as vLLM 0.33.0 does for a
    template that never loops over message content, a list of text parts joined into its
    non-empty texts with newlines. Family facts are read from its spec (data)."""
    spec = fam.spec
    wanted = next(
        (v.tool_arguments for v in spec.variants if v.name == (variant or fam.default_variant)), None
    )
    as_text = (wanted or spec.tool_arguments) == "string"
    raw = copy.deepcopy(list(messages))
    out = [_reference_message(dict(m), spec.reasoning_field, as_text) for m in raw]
    chosen = variant or ("tool_use" if tools is not None and "tool_use" in fam.templates else None)
    if not loops_over_content(fam.templates[chosen or fam.default_variant]):
        for m in out:
            content = m.get("content")
            if isinstance(content, list) and all(
                isinstance(p, dict) and p.get("type") == "text" for p in content
            ):
                m["content"] = "\n".join(p["text"] for p in content if p["text"])
    if spec.content_parts == "join":
        for m in out:
            if isinstance(m.get("content"), list):
                m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
    return out, None if tools is None else copy.deepcopy(list(tools))


_CONTENT_LOOP = re.compile(r"\{%-?\s*for\s+\w+\s+in\s+[^%]*content\b[^%]*%\}")


def loops_over_content(template: str) -> bool:
    """Whether ``template`` has a ``{% for ... in ...content... %}`` loop: vLLM's "openai"
    content format, here as a plain text search (vLLM walks the AST); the two agree on every
    shipped and held-out template (``tests/test_render_target.py``)."""
    return _CONTENT_LOOP.search(template) is not None


def _reference_message(m: dict[str, Any], reasoning_field: str, as_text: bool) -> dict[str, Any]:
    if "content" in m and m["content"] is None:
        m["content"] = ""
    if m.get("role") != "assistant":
        return m
    reasoning = m.get("reasoning") if m.get("reasoning") is not None else m.get("reasoning_content")
    if reasoning is not None:
        m["reasoning_content"] = m["reasoning"] = reasoning
        if m.get(reasoning_field) is None:
            m[reasoning_field] = reasoning
    if not m.get("tool_calls"):
        m.pop("tool_calls", None)
        return m
    calls = []
    for call in m["tool_calls"]:
        arguments = call["function"]["arguments"]
        if as_text:
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        elif isinstance(arguments, str):
            arguments = json.loads(arguments) if arguments else {}
        calls.append({**call, "type": "function", "function": {**call["function"], "arguments": arguments}})
    m["tool_calls"] = calls
    return m


# One function tool, the weather lookup the hand-written output cases call.
WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]


def keyed_session(fam: boundary.Family) -> boundary.Session:
    """A session that keys every request's messages, however short (by default a request of
    fewer than ``MIN_KEYED_MESSAGES`` is validated in full), so that a test of what keys
    decide exercises them."""
    return boundary.Session(fam.renderer, min_keyed_messages=0)
