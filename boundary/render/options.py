"""``RenderOptions``: how one request is rendered, beyond its messages and tools, as one frozen value.

Where it sits: built once at the public entry points (``Renderer.render``, ``Session.render``,
from their keyword arguments) and handed down unchanged through ``Renderer.prepare``,
``render_prepared`` and ``render_with_encoder`` to the render stage; nothing below the entry
points re-spells the keywords.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from boundary.render.target import RenderTarget
from boundary.request.validation import ArgumentsForm


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """Every option of ``Renderer.render`` but the messages and tools; the defaults are its defaults.

    ``add_generation_prompt`` None means ``not continue_final_message``; ``variant`` None
    lets ``Renderer.select_variant`` choose; ``arguments`` None is the variant's own form;
    ``target`` None is ``vllm-0.33`` (``boundary.render.target``); ``template_kwargs`` are the
    caller's extra template variables, as given (the render decides which reach the template).
    """

    add_generation_prompt: bool | None = None
    variant: str | None = None
    documents: Sequence[Mapping[str, Any]] | None = None
    sanitize_control_tokens: bool = False
    arguments: ArgumentsForm | None = None
    now: datetime | None = None
    continue_final_message: bool | str = False
    strict_request: bool = False
    strict_template_kwargs: bool = False
    target: str | RenderTarget | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)


DEFAULT_OPTIONS = RenderOptions(template_kwargs=MappingProxyType({}))
