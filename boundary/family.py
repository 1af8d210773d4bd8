"""Model families: a chat template (or several variants), a vocabulary, and the facts about
them that boundary needs, as data.

Per-family differences live in ``templates/<family>/family.toml`` (validated by
``FamilySpec``), never in subclasses. ``Family.render`` is the library call serving
frontends use: request in, token ids plus U_end / P_end out.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boundary.boundaries import (
    Rendering,
    control_token_pattern,
    encode_rendering,
    encode_rendering_sanitized,
    mark_control_tokens,
)
from boundary.errors import RequestError, TemplateLoadError, TemplateRenderError
from boundary.offsets import CharOffset, Span
from boundary.protocol import (
    ArgumentsForm,
    Message,
    Tool,
    check_value,
    parse_messages,
    parse_tools,
    to_template_messages,
    to_template_tools,
)
from boundary.render import TextRendering, compile_template, render_text
from boundary.resources import data_dir
from boundary.sandbox import DEFAULT_LIMITS, RenderLimits

if TYPE_CHECKING:
    from boundary.outputs import GeneratedOutput
    from boundary.roundtrip import RoundTrip
    from boundary.session import Session, SessionCache

from boundary.tokenizer import Tokenizer, load_vocabulary, rank_source, stand_in_backend, template_literals


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OutputSpec(_Spec):
    """How the model itself writes an assistant turn (``boundary.outputs``), where the family
    departs from its tool-call format's defaults. Every string is literal output text."""

    reasoning_open: str | None = None  # the opener the model writes (default: open tag + "\n")
    reasoning_close: str | None = None  # written after the reasoning (default: "\n" + close tag + "\n\n")
    before_tool_calls: str | None = None  # between non-empty content and the first tool call
    between_tool_calls: str | None = None
    after_tool_calls: str | None = None  # after the last tool call, before the stop token
    before_stop: str = ""  # after a plain answer, before the stop token
    stop_token: str | None = None  # the token that ends a turn (default: the first of stop_tokens)
    # The vLLM 0.33.0 parser pair the family's reader mirrors (``--tool-call-parser`` /
    # ``--reasoning-parser``); None where vLLM has no parser for that part.
    vllm_tool_parser: str | None = None
    vllm_reasoning_parser: str | None = None
    # Who reads generated turns: boundary's own readers, or vLLM's parsers (needs vllm installed).
    parser_backend: Literal["boundary", "vllm"] = "boundary"


class TemplateVariant(_Spec):
    """One verbatim chat template file and where it came from."""

    name: str
    file: str
    source: str
    license: str
    sha256: str | None = None
    models: list[str] = []
    tool_call_format: str | None = None  # overrides the family's for this variant
    output: OutputSpec | None = None  # overrides the family's for this variant
    tool_arguments: ArgumentsForm | None = None  # overrides the family's for this variant


class TemplateKwarg(_Spec):
    """A variable the family's templates read beyond messages/tools (e.g. ``enable_thinking``)."""

    type: Literal["bool", "str", "int"]
    default: bool | str | int | None = None  # the template's behaviour when it is not passed
    doc: str


RewriteTrigger = Literal["next_request", "new_user_message", "final_answer", "tools_change", "new_day"]


class HistoryRewrite(_Spec):
    """A way the template renders earlier turns differently once the conversation moves on.

    ``trigger`` says when it happens: as soon as the turn is history (``next_request``), once a
    new user message arrives (``new_user_message``), once a later final answer follows
    (``final_answer``), when the tools change (``tools_change``) or when the date changes
    (``new_day``). ``turns`` narrows which assistant turns it touches.
    """

    kind: Literal[
        "drop_reasoning_before_last_user",
        "drop_all_reasoning",
        "empty_think_block",
        "reserialize_tool_arguments",
        "default_system_prompt",
        "date_in_system_prompt",
        "rewrite_stop_token",
        "reorder_channels",
        "tools_before_last_user",
    ]
    unless: dict[str, bool | str] = {}  # template kwargs that switch the rewrite off
    trigger: RewriteTrigger | None = None  # None: the kind's usual trigger (``boundary.horizon``)
    turns: Literal["any", "answers", "tool_calls"] = "any"
    doc: str


class FamilySpec(_Spec):
    """``templates/<family>/family.toml``."""

    name: str
    display_name: str
    hybrid: bool
    architecture: str
    variants: list[TemplateVariant] = []
    default_variant: str | None = None
    vocabulary: str | None = None  # a shipped vocabulary name
    stand_in_vocabulary: str | None = None  # base vocabulary of a labelled test tokenizer
    control_tokens: list[str] = []  # registered on the stand-in tokenizer
    special_tokens: dict[str, str] = {}  # template variables: bos_token, eos_token, ...
    stop_tokens: list[str] = []
    reasoning_field: str = "reasoning_content"
    reasoning_tags: list[str] = Field(default_factory=list, max_length=2)
    tool_call_format: str | None = None
    content_parts: Literal["keep", "join"] = "keep"
    tool_arguments: ArgumentsForm = "object"  # how the template wants tool-call arguments
    template_kwargs: dict[str, TemplateKwarg] = {}
    history_rewrites: list[HistoryRewrite] = []
    output: OutputSpec = OutputSpec()
    notes: str = ""


def family_names() -> list[str]:
    """Every family in the registry, including those that need a user-supplied template."""
    return sorted(p.parent.name for p in data_dir("templates").glob("*/family.toml"))


@cache
def family_spec(name: str) -> FamilySpec:
    path = data_dir("templates") / name / "family.toml"
    if not path.is_file():
        raise TemplateLoadError(
            f"unknown family {name!r} (known: {', '.join(family_names())})", location="family"
        )
    try:
        with path.open("rb") as f:
            return FamilySpec.model_validate(tomllib.load(f))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise TemplateLoadError(f"invalid spec: {exc}", location=str(path)) from None


@cache
def _shipped_tokenizer(name: str) -> Tokenizer:
    spec = family_spec(name)
    if spec.vocabulary:
        rank_file, pattern = rank_source(spec.vocabulary) or (None, None)
        return Tokenizer(
            load_vocabulary(spec.vocabulary),
            special_tokens=spec.special_tokens,
            source=f"shipped vocabulary {spec.vocabulary!r}",
            rank_file=rank_file,
            split_pattern=pattern,
        )
    if spec.stand_in_vocabulary:
        rank_file, pattern = rank_source(spec.stand_in_vocabulary) or (None, None)
        return Tokenizer(
            stand_in_backend(spec.stand_in_vocabulary, spec.control_tokens),
            special_tokens=spec.special_tokens,
            rank_file=rank_file,
            split_pattern=pattern,
            source=(
                f"stand-in test tokenizer: {spec.stand_in_vocabulary} BPE + {spec.display_name} "
                f"control tokens (no {spec.display_name} vocabulary is available offline; "
                "ids are not the model's)"
            ),
            stand_in=True,
        )
    raise TemplateLoadError(f"family {name!r} ships no vocabulary; pass tokenizer=", location="family")


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
    templates: dict[str, str] = {}
    folder = data_dir("templates") / name
    for v in spec.variants:
        templates[v.name] = (folder / v.file).read_text(encoding="utf-8")
    default = variant or spec.default_variant
    if template is not None:
        templates = {"user": template}
        default = "user"
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
        else _shipped_tokenizer(name)
    )
    return Family(spec, templates, tok, default_variant=default, limits=limits)


class Family:
    """Templates + tokenizer + spec. ``render`` is one pass: text, ids, U_end, P_end."""

    def __init__(
        self,
        spec: FamilySpec,
        templates: Mapping[str, str],
        tokenizer: Tokenizer,
        *,
        default_variant: str | None = None,
        limits: RenderLimits = DEFAULT_LIMITS,
    ) -> None:
        if not templates:
            raise TemplateLoadError("a family needs at least one template", location=spec.name)
        self.spec = spec
        self.templates = dict(templates)
        self.tokenizer = tokenizer
        self.default_variant = default_variant or next(iter(self.templates))
        self.limits = limits
        self._control_patterns: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Family({self.name!r}, variant={self.default_variant!r}, tokenizer={self.tokenizer!r})"

    @property
    def name(self) -> str:
        return self.spec.name

    def template(self, variant: str | None = None) -> str:
        variant = variant or self.default_variant
        try:
            return self.templates[variant]
        except KeyError:
            raise RequestError(
                f"unknown variant {variant!r} (have: {', '.join(self.templates)})", location="variant"
            ) from None

    # -- constructors -----------------------------------------------------------------------
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

        ``special_tokens`` override the tokenizer's own in a new ``Tokenizer``; the tokenizer
        given (perhaps a shipped family's, which other families share) is never changed."""
        tok = Tokenizer.from_any(tokenizer, special_tokens=special_tokens)
        if special_tokens:  # a new Tokenizer: the one given (perhaps a shipped, shared one) is kept as is
            tok = tok.with_special_tokens(special_tokens)
        spec = FamilySpec(
            name=name,
            display_name=spec_fields.pop("display_name", name),
            hybrid=spec_fields.pop("hybrid", False),
            architecture=spec_fields.pop("architecture", "unknown"),
            special_tokens=dict(tok.special_tokens_map),
            **spec_fields,
        )
        return cls(spec, {"default": template}, tok, limits=limits)

    @classmethod
    def from_pretrained(
        cls, path_or_id: str | Path, *, name: str | None = None, **spec_fields: Any
    ) -> Family:
        """A family from a model directory (or hub id, where a hub is reachable) whose tokenizer
        files carry the chat template: ``tokenizer_config.json`` or ``chat_template.jinja``."""
        from transformers import AutoTokenizer

        try:
            hf = AutoTokenizer.from_pretrained(str(path_or_id))
        except Exception as exc:
            raise TemplateLoadError(f"cannot load tokenizer: {exc}", location=str(path_or_id)) from None
        chat_template = hf.chat_template
        if not chat_template:
            raise TemplateLoadError("no chat template in the tokenizer files", location=str(path_or_id))
        templates = chat_template if isinstance(chat_template, dict) else {"default": chat_template}
        tok = Tokenizer.from_transformers(hf, source=str(path_or_id))
        label = name or Path(str(path_or_id)).name
        spec = FamilySpec(
            name=label,
            display_name=spec_fields.pop("display_name", label),
            hybrid=spec_fields.pop("hybrid", False),
            architecture=spec_fields.pop("architecture", "unknown"),
            special_tokens=dict(tok.special_tokens_map),
            **spec_fields,
        )
        return cls(spec, templates, tok)

    # -- rendering --------------------------------------------------------------------------
    def prepare(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        tools: Sequence[Mapping[str, Any] | Tool] | None = None,
        *,
        arguments: ArgumentsForm | None = None,
        variant: str | None = None,
        strict_request: bool = False,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """Validate a request and normalize it into the dicts ``variant``'s template reads.
        ``strict_request`` refuses fields and content part types outside the OpenAI schema."""
        parsed = parse_messages(messages, strict=strict_request)
        template_tools = to_template_tools(parse_tools(tools, strict=strict_request))
        return self.normalize(parsed, arguments, variant=variant), template_tools

    def normalize(
        self,
        messages: Sequence[Message],
        arguments: ArgumentsForm | None = None,
        *,
        variant: str | None = None,
    ) -> list[dict[str, Any]]:
        """Validated messages as the dicts this family's templates read (``to_template_messages``;
        tool-call arguments in ``arguments`` form, default ``tool_arguments(variant)``). A family
        whose templates read text only (``content_parts = "join"``) gets the text parts joined."""
        template_messages = to_template_messages(
            messages,
            reasoning_field=self.spec.reasoning_field,
            arguments=arguments or self.tool_arguments(variant),
        )
        if self.spec.content_parts == "join":
            for m in template_messages:
                if isinstance(m.get("content"), list):
                    m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
        return template_messages

    def tool_arguments(self, variant: str | None = None) -> ArgumentsForm:
        """How ``variant``'s template wants tool-call arguments: the variant's own
        ``tool_arguments`` where its spec sets one, else the family's."""
        name = variant or self.default_variant
        for v in self.spec.variants:
            if v.name == name and v.tool_arguments is not None:
                return v.tool_arguments
        return self.spec.tool_arguments

    def render(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        tools: Sequence[Mapping[str, Any] | Tool] | None = None,
        add_generation_prompt: bool | None = None,
        *,
        variant: str | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        sanitize_control_tokens: bool = False,
        arguments: ArgumentsForm | None = None,
        now: datetime | None = None,
        continue_final_message: bool | str = False,
        strict_request: bool = False,
        strict_template_kwargs: bool = False,
        **template_kwargs: Any,
    ) -> Rendering:
        """Render one request in a single pass.

        ``template_kwargs`` the template never reads are dropped, as vLLM drops them, and named
        in ``Rendering.ignored_template_kwargs`` (``strict_template_kwargs=True`` refuses them
        instead); ``now`` pins ``strftime_now`` for date-stamped templates; ``arguments``
        chooses whether tool-call arguments reach the template as objects or as the JSON text
        the client sent (default: ``tool_arguments(variant)``); ``strict_request`` refuses
        fields outside the OpenAI chat schema.

        ``continue_final_message`` (True for the content, or the name of the field to
        continue, as in transformers) renders the final message open for the model to
        continue: the text is cut after its content exactly as transformers cuts it, and
        U_end / P_end are as ``Rendering`` documents. ``add_generation_prompt`` defaults to
        ``not continue_final_message``; asking for both is a ``RequestError``.
        """
        template_messages, template_tools = self.prepare(
            messages, tools, arguments=arguments, variant=variant, strict_request=strict_request
        )
        return self.render_prepared(
            template_messages,
            template_tools,
            add_generation_prompt,
            variant=variant,
            documents=documents,
            sanitize_control_tokens=sanitize_control_tokens,
            now=now,
            continue_final_message=continue_final_message,
            strict_template_kwargs=strict_template_kwargs,
            **template_kwargs,
        )

    def render_prepared(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool | None = None,
        *,
        variant: str | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        sanitize_control_tokens: bool = False,
        now: datetime | None = None,
        continue_final_message: bool | str = False,
        strict_template_kwargs: bool = False,
        **template_kwargs: Any,
    ) -> Rendering:
        """``render`` for messages already validated and normalized by ``prepare``."""
        pattern = self._control_pattern(self.template(variant)) if sanitize_control_tokens else None
        rendered = self.render_text(
            messages,
            tools,
            add_generation_prompt,
            variant=variant,
            documents=documents,
            control_pattern=pattern,
            now=now,
            continue_final_message=continue_final_message,
            strict_template_kwargs=strict_template_kwargs,
            **template_kwargs,
        )
        if pattern is None:
            result = encode_rendering(rendered, self.tokenizer)
        else:
            result = encode_rendering_sanitized(rendered, self.tokenizer, pattern)
        _, ignored = self.resolve_template_kwargs(template_kwargs, variant, strict=strict_template_kwargs)
        return replace(result, ignored_template_kwargs=ignored) if ignored else result

    def render_text(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool | None = None,
        *,
        variant: str | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        control_pattern: re.Pattern[str] | None = None,
        now: datetime | None = None,
        continue_final_message: bool | str = False,
        strict_template_kwargs: bool = False,
        **template_kwargs: Any,
    ) -> TextRendering:
        """The render stage alone: text and char positions, no tokens. With ``control_pattern``
        (sanitizing), control tokens in the inputs come back wrapped in markers. With
        ``continue_final_message`` the text ends after the final message's content and
        ``input_end`` is that message's start (see ``Rendering``)."""
        source = self.template(variant)
        compiled = compile_template(source, self.limits)
        kwargs, _ = self._check_kwargs(template_kwargs, compiled.variables, strict=strict_template_kwargs)
        generation_prompt = _generation_prompt(add_generation_prompt, continue_final_message)
        for i, document in enumerate(documents or ()):
            check_value(document, f"documents[{i}]")
        if control_pattern is not None:
            messages = mark_control_tokens(messages, control_pattern)
            tools = mark_control_tokens(tools, control_pattern)
            documents = mark_control_tokens(documents, control_pattern)
        final: str | None = None
        if continue_final_message:
            messages, final = _open_final_message(messages, continue_final_message, source)
        rendered = render_text(
            compiled,
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=generation_prompt,
            variables={**self.tokenizer.special_tokens_map, **kwargs},
            now=now,
            limits=self.limits,
        )
        return rendered if final is None else _cut_after_final_message(rendered, final)

    def resolve_template_kwargs(
        self, kwargs: Mapping[str, Any], variant: str | None = None, *, strict: bool = False
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The template kwargs ``variant``'s template receives (checked) and the names of those
        it drops, as ``vllm.renderers.hf.resolve_chat_template_kwargs`` decides: a kwarg
        reaches the template only if the template reads it (an undeclared variable of its
        Jinja AST). ``strict`` refuses, instead of dropping, a kwarg that is neither read
        nor declared by the family nor a special token (the behaviour before leniency)."""
        return self._check_kwargs(
            kwargs, compile_template(self.template(variant), self.limits).variables, strict=strict
        )

    def session(self) -> Session:
        """A renderer for the successive requests of one conversation (see ``boundary.session``)."""
        from boundary.session import Session

        return Session(self)

    def sessions(self, capacity: int = 1024) -> SessionCache:
        """Sessions by id, at most ``capacity`` kept (least recently used dropped first)."""
        from boundary.session import SessionCache

        return SessionCache(self, capacity)

    def verify_round_trip(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        generated_token_ids: Sequence[int] | GeneratedOutput,
        next_messages: Sequence[Mapping[str, Any] | Message] | None = None,
        **options: Any,
    ) -> RoundTrip:
        """Whether the committed generated ids answering ``messages`` are a token prefix of the
        next request; see ``boundary.roundtrip.verify_round_trip`` for options and the result."""
        from boundary.roundtrip import verify_round_trip

        return verify_round_trip(self, messages, generated_token_ids, next_messages, **options)

    def _control_pattern(self, source: str) -> Any:
        key = hashlib.sha256(source.encode()).hexdigest()
        if key not in self._control_patterns:
            self._control_patterns[key] = control_token_pattern(
                self.tokenizer.control_tokens(template_literals(source))
            )
        return self._control_patterns[key]

    def _check_kwargs(
        self, kwargs: Mapping[str, Any], reads: frozenset[str], *, strict: bool = False
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Split ``kwargs`` into those passed to a template that reads ``reads`` and the names
        dropped (see ``resolve_template_kwargs``). ``chat_template`` / ``tokenize`` are refused
        as vLLM refuses them; apply_chat_template's own options never reach the template and
        are refused where they would change the ids; a declared kwarg of the wrong type, or a
        value past the request limits, is a ``RequestError``."""
        kept: dict[str, Any] = {}
        ignored: list[str] = []
        for key, value in kwargs.items():
            where = f"template_kwargs.{key}"
            declared = self.spec.template_kwargs.get(key)
            if key in _REFUSED_KWARGS:
                raise RequestError("not a template variable; a request may not set it", location=where)
            if key in _APPLY_OPTIONS:
                if value and key not in _IDS_UNCHANGED:
                    raise RequestError(
                        "an apply_chat_template option that changes the ids; not supported", location=where
                    )
                ignored.append(key)
                continue
            if (
                strict
                and declared is None
                and key not in reads
                and key not in self.tokenizer.special_tokens_map
            ):
                raise RequestError(f"the {self.name} template does not read this variable", location=where)
            if declared is not None and value is not None and (strict or key in reads):
                expected = {"bool": bool, "str": str, "int": int}[declared.type]
                if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                    raise RequestError(
                        f"expected {declared.type}, got {type(value).__name__}", location=where
                    )
            if key not in reads:
                ignored.append(key)
                continue
            check_value(value, where)
            kept[key] = value
        return kept, tuple(ignored)


# -- template kwargs ------------------------------------------------------------------------------
# vLLM refuses these in a request's chat_template_kwargs (resolve_chat_template_kwargs).
_REFUSED_KWARGS = frozenset({"chat_template", "tokenize"})
# apply_chat_template's own parameters: consumed by it, never passed to the template.
_APPLY_OPTIONS = frozenset(
    {
        "conversation",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
_IDS_UNCHANGED = frozenset({"return_tensors", "return_dict", "return_assistant_tokens_mask"})


# -- continue_final_message -----------------------------------------------------------------------
# As transformers' render_jinja_template does it: the final message's text gets a tag appended,
# the chat is rendered, and the text is cut where the tag begins.
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def _generation_prompt(add_generation_prompt: bool | None, continue_final_message: bool | str) -> bool:
    """``add_generation_prompt`` as given, or by default ``not continue_final_message``."""
    if add_generation_prompt is None:
        return not continue_final_message
    if add_generation_prompt and continue_final_message:
        raise RequestError(
            "continue_final_message and add_generation_prompt are not compatible: continue the final "
            "message, or prompt a new assistant message",
            location="continue_final_message",
        )
    return add_generation_prompt


def _open_final_message(
    messages: Sequence[Mapping[str, Any]], continue_final_message: bool | str, source: str
) -> tuple[list[Mapping[str, Any]], str]:
    """The messages with the tag after the final message's text (the last text part of a list),
    and that text; the given messages are not modified. Refuses what transformers refuses."""
    field = continue_final_message if isinstance(continue_final_message, str) else "content"
    if not messages:
        raise RequestError("continue_final_message: there is no final message", location="messages")
    where = f"messages[{len(messages) - 1}].{field}"
    last = dict(messages[-1])
    value = last.get(field)
    if value is None:
        raise RequestError(
            f"continue_final_message: the final message has no {field!r} to continue", location=where
        )
    if field not in source:
        raise RequestError(
            f"continue_final_message: the chat template never mentions {field!r}",
            location="continue_final_message",
        )
    if isinstance(value, (list, tuple)):
        parts = [dict(p) if isinstance(p, Mapping) else p for p in value]
        for part in reversed(parts):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                final = part["text"]
                part["text"] = final + _CONTINUE_TAG
                break
        else:
            raise RequestError(
                "continue_final_message: the final message has no text part to continue", location=where
            )
        last[field] = parts
    elif isinstance(value, str):
        final = value
        last[field] = value + _CONTINUE_TAG
    else:
        raise RequestError(
            f"continue_final_message: expected text, got {type(value).__name__}", location=where
        )
    return [*messages[:-1], last], final


def _cut_after_final_message(rendered: TextRendering, final: str) -> TextRendering:
    """``rendered`` cut where transformers cuts it (at the tag; before trailing whitespace if the
    template trimmed the tag's space), with ``input_end`` moved to the final message's start,
    never beyond the generation-prompt probe's position."""
    text = rendered.text
    tag = _CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise TemplateRenderError(
            "continue_final_message: the template drops part of the final message, so it cannot be continued",
            location="template",
        )
    at = text.rindex(tag)
    cut_text = text[:at] if text[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG else text[:at].rstrip()
    cut = len(cut_text)
    start = rendered.message_starts[-1] if rendered.message_starts else None
    if rendered.input_end is None:
        input_end, reason = None, rendered.input_end_reason
    elif start is None:
        input_end = None
        reason = (
            "the template's message loop never began the final message, "
            "so where the continued message starts is unknown"
        )
    else:
        input_end, reason = CharOffset(min(start, rendered.input_end, cut)), None
    starts = tuple(s if s is None or s <= cut else None for s in rendered.message_starts)
    spans = tuple(
        Span(s.start, CharOffset(min(s.end, cut))) for s in rendered.generation_spans if s.start < cut
    )
    return TextRendering(cut_text, input_end, reason, starts, spans)
