"""The ``Family`` facade: a ``Renderer`` wrapped with the features serving frontends call on it.

Where it sits: the top of the library, above every stage it composes — spec
(``boundary.shipped.spec``, data), registry (``boundary.family.registry``, shipped ``templates/``), the
one-pass renderer (``boundary.renderer``), sessions (``boundary.session.session``) and the round trip
(``boundary.verify.roundtrip``). Those take a ``Renderer`` (their public entry points a ``Family`` in
its place: ``renderer_of``) and never import this module back.

    fam = load_family("qwen3_5")                       # shipped: template + vocabulary + spec
    fam = Family.from_pretrained("/models/Qwen3.5")    # a local model directory
    fam = Family.from_template(template, tokenizer)    # any HF tokenizer
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MethodType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload
from urllib.parse import urlparse

from boundary.errors import ModelNotFoundError, TemplateLoadError
from boundary.family.registry import family_names, family_spec, shipped_templates, shipped_tokenizer
from boundary.outputs import GeneratedOutput
from boundary.render.sandbox import DEFAULT_LIMITS, RenderLimits
from boundary.renderer import Renderer
from boundary.request.models import Message
from boundary.session.cache import DEFAULT_MAX_BYTES, SessionCache
from boundary.session.session import Session
from boundary.shipped.spec import (
    FamilySpec,
    HistoryRewrite,
    OutputSpec,
    RewriteTrigger,
    TemplateKwarg,
    TemplateVariant,
)
from boundary.tokenize.tokenizer import Tokenizer
from boundary.verify.roundtrip import RoundTrip, verify_round_trip

__all__ = [
    "Family",
    "FamilySpec",
    "HistoryRewrite",
    "OutputSpec",
    "RewriteTrigger",
    "TemplateKwarg",
    "TemplateVariant",
    "conventions_of",
    "family_names",
    "family_spec",
    "load_family",
]


_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Delegated(Generic[_P, _R]):
    """A ``Renderer`` method offered on ``Family``: on a family it is that method bound to the
    family's renderer (same signature, same docstring)."""

    def __init__(self, method: Callable[Concatenate[Renderer, _P], _R]) -> None:
        self.method = method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, family: None, owner: type[Family]) -> _Delegated[_P, _R]: ...

    @overload
    def __get__(self, family: Family, owner: type[Family]) -> Callable[_P, _R]: ...

    def __get__(self, family: Family | None, owner: type[Family]) -> _Delegated[_P, _R] | Callable[_P, _R]:
        if family is None:
            return self
        return cast("Callable[_P, _R]", MethodType(self.method, family.renderer))


class Family:
    """A ``Renderer`` (templates + tokenizer + spec; ``render`` is one pass giving text, ids,
    U_end and P_end), wrapped with sessions and the round-trip check on top. The renderer's
    public methods and attributes are delegated; ``renderer`` is the renderer itself, which
    every stage below takes (they accept a ``Family`` in its place)."""

    # ``Renderer.__init__``'s signature, alike by design: a family is built as its renderer is.
    def __init__(
        self,
        spec: FamilySpec,
        templates: Mapping[str, str],
        tokenizer: Tokenizer,
        *,
        default_variant: str | None = None,
        limits: RenderLimits = DEFAULT_LIMITS,
    ) -> None:
        self.renderer = Renderer(spec, templates, tokenizer, default_variant=default_variant, limits=limits)

    def __repr__(self) -> str:
        r = self.renderer
        return f"Family({r.name!r}, variant={r.default_variant!r}, tokenizer={r.tokenizer!r})"

    # -- the renderer's attributes and methods --------------------------------------------------
    @property
    def spec(self) -> FamilySpec:
        return self.renderer.spec

    @property
    def name(self) -> str:
        return self.renderer.name

    @property
    def templates(self) -> dict[str, str]:
        return self.renderer.templates

    @property
    def tokenizer(self) -> Tokenizer:
        return self.renderer.tokenizer

    @property
    def default_variant(self) -> str:
        return self.renderer.default_variant

    @property
    def limits(self) -> RenderLimits:
        return self.renderer.limits

    render = _Delegated(Renderer.render)
    render_prepared = _Delegated(Renderer.render_prepared)
    prepare = _Delegated(Renderer.prepare)
    normalize = _Delegated(Renderer.normalize)
    template = _Delegated(Renderer.template)
    select_variant = _Delegated(Renderer.select_variant)
    tool_arguments = _Delegated(Renderer.tool_arguments)
    resolve_template_kwargs = _Delegated(Renderer.resolve_template_kwargs)
    compiled = _Delegated(Renderer.compiled)

    @classmethod
    def from_template(
        cls,
        template: str,
        tokenizer: Any,
        *,
        name: str = "custom",
        special_tokens: Mapping[str, str] | None = None,
        limits: RenderLimits = DEFAULT_LIMITS,
        **spec_fields: Any,
    ) -> Family:
        """A family from a template string and any HF tokenizer (see ``Tokenizer.from_any``).
        The template is compiled here: a syntax error raises ``TemplateLoadError`` at once.

        ``special_tokens`` override the tokenizer's own in a new ``Tokenizer``; the tokenizer
        given (perhaps a shipped family's, which other families share) is never changed."""
        tok = Tokenizer.from_any(tokenizer, special_tokens=special_tokens)
        if special_tokens:  # a new Tokenizer: the one given (perhaps a shipped, shared one) is kept as is
            tok = tok.with_special_tokens(special_tokens)
        return cls(_custom_spec(name, tok, spec_fields), {"default": template}, tok, limits=limits)

    @classmethod
    def from_pretrained(
        cls, path_or_id: str | Path, *, name: str | None = None, **spec_fields: Any
    ) -> Family:
        """A family from a model directory (or hub id, where a hub is reachable) whose tokenizer
        files carry the chat template: ``tokenizer_config.json`` or ``chat_template.jinja``.
        A directory that does not exist, or a hub id while the hub is offline and has no
        cached copy, is a ``ModelNotFoundError`` (a ``FileNotFoundError``) naming it.

        Named templates (``chat_template`` as a list of ``{name, template}``, or
        ``additional_chat_templates/*.jinja``) are read by transformers' own loader and become
        variants; a request without ``variant`` renders ``tool_use`` when it gives tools and
        ``default`` otherwise (``Renderer.select_variant``), as transformers and vLLM do; with
        no ``default`` template such a request is refused, as transformers refuses it."""
        hf = _hf_tokenizer(path_or_id)
        chat_template = hf.chat_template
        if not chat_template:
            raise TemplateLoadError("no chat template in the tokenizer files", location=str(path_or_id))
        templates = chat_template if isinstance(chat_template, dict) else {"default": chat_template}
        tok = Tokenizer.from_transformers(hf, source=str(path_or_id))
        spec = _custom_spec(name or Path(str(path_or_id)).name, tok, spec_fields)
        return cls(spec, templates, tok, default_variant="default")

    def session(self) -> Session:
        """A renderer for the successive requests of one conversation (see ``boundary.session.session``)."""
        return Session(self.renderer)

    def sessions(self, capacity: int = 1024, *, max_bytes: int = DEFAULT_MAX_BYTES) -> SessionCache:
        """Sessions by id, safe to share between threads: at most ``capacity`` kept, holding
        at most ``max_bytes`` (default 256 MiB, as ``Session.nbytes`` counts them), the least
        recently used dropped first; a session larger than ``max_bytes`` alone is served but
        not kept (see ``boundary.session.cache.SessionCache``)."""
        return SessionCache(self.renderer, capacity, max_bytes=max_bytes)

    def verify_round_trip(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        generated_token_ids: Sequence[int] | GeneratedOutput,
        next_messages: Sequence[Mapping[str, Any] | Message] | None = None,
        **options: Any,
    ) -> RoundTrip:
        """Whether the committed generated ids answering ``messages`` are a token prefix of the
        next request; see ``boundary.verify.roundtrip.verify_round_trip`` for options and the result."""
        return verify_round_trip(self.renderer, messages, generated_token_ids, next_messages, **options)


def load_family(
    name: str,
    *,
    variant: str | None = None,
    template: str | None = None,
    tokenizer: Any = None,
    limits: RenderLimits = DEFAULT_LIMITS,
) -> Family:
    """A shipped family. ``template`` / ``tokenizer`` override (or, for families shipped
    without a verbatim template such as Jamba and Falcon-H1, supply) the shipped ones."""
    spec = family_spec(name)
    templates = {"user": template} if template is not None else shipped_templates(name)
    default = "user" if template is not None else variant or spec.default_variant
    if not templates:
        raise TemplateLoadError(
            f"no verbatim {spec.display_name} template is shipped; pass template= (and tokenizer=)",
            location=f"family {name}",
        )
    if default not in templates:
        raise TemplateLoadError(f"unknown variant {default!r} (have: {', '.join(templates)})", location=name)
    tok = (
        Tokenizer.from_any(tokenizer, special_tokens=spec.special_tokens)
        if tokenizer
        else shipped_tokenizer(name)
    )
    return Family(spec, templates, tok, default_variant=default, limits=limits)


CONVENTIONS = (
    "reasoning_field",
    "reasoning_tags",
    "tool_call_format",
    "tool_arguments",
    "content_parts",
    "stop_tokens",
    "template_kwargs",
    "history_rewrites",
    "output",
)
"""The spec fields that describe how a family's model writes its turns and how its template
rewrites history: what a fine-tuned model with an edited template keeps from its base."""


def conventions_of(name: str) -> dict[str, Any]:
    """Shipped family ``name``'s ``CONVENTIONS``, as spec fields for ``Family.from_template`` /
    ``Family.from_pretrained`` (``**conventions_of("qwen3_5")``): a user's template then gets
    the family's output format (tool calls and reasoning read back, round trips) and its
    history-rewrite rule table."""
    spec = family_spec(name)
    return {field: getattr(spec, field) for field in CONVENTIONS}


def _custom_spec(name: str, tok: Tokenizer, fields: dict[str, Any]) -> FamilySpec:
    """The spec of a family made from a user's template and tokenizer."""
    return FamilySpec(
        name=name,
        display_name=fields.pop("display_name", name),
        hybrid=fields.pop("hybrid", False),
        architecture=fields.pop("architecture", "unknown"),
        special_tokens=dict(tok.special_tokens_map),
        **fields,
    )


# -- loading a transformers tokenizer ---------------------------------------------------------------

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def _hf_tokenizer(path_or_id: str | Path) -> Any:
    """transformers' tokenizer for a local model directory or a hub id, failing fast and by
    name: a path that is not there, or a hub id while the hub is unreachable (no retries)."""
    from transformers import AutoTokenizer

    text = str(path_or_id)
    local = Path(text).expanduser()
    if isinstance(path_or_id, Path) or local.exists() or not _HUB_ID.fullmatch(text):
        if not local.is_dir():
            why = "not a directory" if local.exists() else "no such model directory"
            raise ModelNotFoundError(why, location=text)
        return _load(AutoTokenizer, str(local), local_files_only=True)
    try:  # the hub cache first: no network needed
        return AutoTokenizer.from_pretrained(text, local_files_only=True)
    except Exception:
        pass
    if _hub_offline():
        raise ModelNotFoundError(
            "not a local directory, not in the hub cache, and the hub is offline or unreachable",
            location=text,
        )
    return _load(AutoTokenizer, text, local_files_only=False)


def _load(auto: Any, where: str, *, local_files_only: bool) -> Any:
    try:
        return auto.from_pretrained(where, local_files_only=local_files_only)
    except Exception as exc:
        raise TemplateLoadError(f"cannot load tokenizer: {exc}", location=where) from None


def _hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` set, or the hub endpoint not reachable
    within two seconds (instead of the hub client's retries)."""
    if any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in _OFFLINE_VARS):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=2).close()
    except OSError:
        return True
    return False


_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
