"""vLLM 0.33.0's own parsers as the oracle for boundary's output readers.

Calls ``ParserManager.get_parser(tool, reasoning, enable_auto_tools=True)`` and ``parse``
exactly as vLLM's chat-completion server does for a non-streaming choice: a parser per
choice built with the request's tools and template kwargs, told the prompt's token ids,
given the generated text without its stop token. Importing this module imports vLLM.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/test and CI install it)")

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.parser.parser_manager import ParserManager

from boundary.outputs.vllm_backend import engine_tokenizer
from tests.support import family

logging.getLogger("vllm").setLevel(logging.CRITICAL)  # vLLM logs every output it cannot parse


@dataclass(frozen=True, slots=True)
class Read:
    """What a client receives: reasoning, content, and ``(name, arguments text)`` per call."""

    reasoning: str | None
    content: str | None
    calls: tuple[tuple[str, str], ...]


@cache
def parser_class(tool: str | None, reasoning: str | None) -> Any:
    return ParserManager.get_parser(tool, reasoning, enable_auto_tools=True)


def hf_tokenizer(name: str, variant: str | None) -> Any:
    """The family's vocabulary and template as a transformers tokenizer, held as vLLM's server
    holds it (shared with the backend under test: it is the parsers' input, not a reading)."""
    fam = family(name, variant)
    return engine_tokenizer(fam, variant or fam.default_variant)


@cache
def _request(tools_json: str, messages_json: str) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        model="m", messages=json.loads(messages_json), tools=json.loads(tools_json) or None
    )


def vllm_read(
    name: str,
    variant: str | None,
    body: str,
    *,
    tools: Sequence[Mapping[str, Any]] | None,
    messages: Sequence[Mapping[str, Any]],
    prompt_ids: Sequence[int],
    template_kwargs: Mapping[str, Any] | None = None,
) -> Read:
    """vLLM's reading of ``body`` (the generated text, stop token excluded)."""
    fam = family(name, variant)
    out = fam.spec.output
    chosen = next((v for v in fam.spec.variants if v.name == variant), None)
    if chosen is not None and chosen.output is not None:
        out = chosen.output
    cls = parser_class(out.vllm_tool_parser, out.vllm_reasoning_parser)
    request = _request(json.dumps(list(tools or [])), json.dumps(list(messages)))
    parser = cls(hf_tokenizer(name, variant), request.tools, chat_template_kwargs=dict(template_kwargs or {}))
    parser.set_prompt_token_ids(list(prompt_ids))
    reasoning, content, calls = parser.parse(body, request, enable_auto_tools=True)
    return Read(reasoning, content, tuple((c.name, c.arguments) for c in calls or ()))
