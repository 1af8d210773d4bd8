"""vLLM's own parsers as the reader of generated turns (``parser_backend = "vllm"``).

Where it sits: in outputs, below ``reading``: the only place in ``boundary/`` that imports
vLLM, and only when called.

A frontend serving with vLLM gets back exactly what vLLM's composed parser returns, so
verifying D_end against it is verifying against the engine itself. This module calls
``ParserManager.get_parser(tool, reasoning, enable_auto_tools=True)`` and ``parse`` the
way vLLM's chat-completion server does for one non-streaming choice: one parser per turn,
built with the request's tools and template kwargs, told the prompt's token ids, given the
generated text without its stop token (and, for harmony, the generated ids).

vLLM is imported only when this backend runs: ``import boundary`` never imports it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from boundary.errors import RequestError
from boundary.renderer import Renderer


@dataclass(frozen=True, slots=True)
class EngineRead:
    """vLLM's reading of one turn: what its server puts in the response message.
    ``calls`` holds ``(name, arguments text, id or None)``."""

    reasoning: str | None
    content: str | None
    calls: tuple[tuple[str, str, str | None], ...]


def parser_names(family: Renderer, variant: str | None) -> tuple[str | None, str | None]:
    """The ``(tool parser, reasoning parser)`` pair the family variant's spec names."""
    spec = family.spec
    chosen = next((v for v in spec.variants if v.name == variant), None)
    out = chosen.output if chosen is not None and chosen.output is not None else spec.output
    return out.vllm_tool_parser, out.vllm_reasoning_parser


@cache
def _parser_class(tool: str | None, reasoning: str | None, harmony: bool) -> Any:
    """vLLM's parser class for the pair named: one per pair a family spec names."""
    try:
        from vllm.parser.parser_manager import ParserManager
    except ImportError as exc:  # pragma: no cover - exercised only without vllm
        raise RequestError(
            f"parser_backend='vllm' needs vLLM installed ({exc})", location="parser_backend"
        ) from None
    logging.getLogger("vllm").setLevel(logging.ERROR)  # it logs every output it cannot parse
    return ParserManager.get_parser(tool, reasoning, enable_auto_tools=True, is_harmony=harmony)


# One per family object and variant read through the vLLM backend (the family kept alive):
# bounded by the families a process loads.
_TOKENIZERS: dict[tuple[int, str | None], tuple[Any, Any]] = {}


def engine_tokenizer(family: Renderer, variant: str | None) -> Any:
    """The family's tokenizer as transformers', cached the way vLLM's server caches it."""
    key = (id(family), variant)
    if key not in _TOKENIZERS:
        from vllm.tokenizers.hf import get_cached_tokenizer

        hf = family.tokenizer.to_transformers(family.template(variant))
        _TOKENIZERS[key] = (family, get_cached_tokenizer(hf))  # the family is kept, so its id stays unique
    return _TOKENIZERS[key][1]


@lru_cache(maxsize=64)
def _request(tools_json: str) -> Any:
    """A request object carrying ``tools_json``, as vLLM's parsers read it: at most 64 tool
    lists kept (requests bring their own, so the cache is bounded), least recently used
    dropped first."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    tools = json.loads(tools_json)
    return ChatCompletionRequest(
        model="boundary", messages=[{"role": "user", "content": ""}], tools=tools or None
    )


def engine_read(
    family: Renderer,
    body: str,
    *,
    generated_ids: Sequence[int] = (),
    prompt_ids: Sequence[int] = (),
    tools: Sequence[Mapping[str, Any]] = (),
    variant: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    history_tool_calls: int = 0,
    harmony: bool = False,
) -> EngineRead:
    """vLLM's reading of ``body`` (the generated text without its stop token).

    Raises ``RequestError`` when vLLM is not installed or the family names no vLLM parser.
    """
    tool, reasoning = parser_names(family, variant)
    if tool is None and reasoning is None:
        raise RequestError(
            f"{family.spec.display_name} names no vLLM parser (output.vllm_tool_parser / "
            "output.vllm_reasoning_parser in its family.toml)",
            location="parser_backend",
        )
    cls = _parser_class(tool, reasoning, harmony)
    request = _request(json.dumps(list(tools)))
    kwargs = dict(template_kwargs or {})
    parser = cls(engine_tokenizer(family, variant), request.tools, chat_template_kwargs=kwargs)
    parser.set_prompt_token_ids(list(prompt_ids))
    parser.set_history_tool_call_count(history_tool_calls)  # Kimi numbers calls across the conversation
    got_reasoning, content, calls = parser.parse(
        body, request, enable_auto_tools=True, model_output_token_ids=list(generated_ids)
    )
    return EngineRead(
        got_reasoning,
        content,
        tuple((c.name, c.arguments, getattr(c, "id", None)) for c in calls or ()),
    )
