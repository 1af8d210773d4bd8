"""The family renderer: one request in, token ids plus U_end / P_end out, in one pass.

Where it sits: the middle of the data flow — request (``request``: validate, normalize) ->
render (``boundary.render``: sandboxed, instrumented Jinja; marks; continuation; template
kwargs) -> tokenize (``boundary.tokenize.encode``: ids, U_end, P_end, as a ``Rendering``).
Everything downstream (sessions, outputs, round trip, horizon, audit, experiment, the vLLM
plugin) takes a ``Renderer``; the ``Family`` facade (``boundary.family.facade``) adds those features
on top without them importing it back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol, get_args

from boundary.errors import RequestError, TemplateLoadError
from boundary.render.content_format import detect_content_format
from boundary.render.continuation import cut_after_final_message, generation_prompt, open_final_message
from boundary.render.marks import TextRendering
from boundary.render.options import DEFAULT_OPTIONS, RenderOptions
from boundary.render.sandbox import DEFAULT_LIMITS, RenderLimits
from boundary.render.target import (
    RenderTarget,
    resolve_target,
    template_tools,
    transformers_message,
    vllm_message,
)
from boundary.render.template_kwargs import ResolvedKwargs, resolve_kwargs
from boundary.render.template_run import CompiledTemplate, TemplateRunner, compile_template, run_template
from boundary.request.identity import as_read
from boundary.request.limits import check_value
from boundary.request.models import Message, Tool
from boundary.request.validation import (
    ArgumentsForm,
    parse_messages,
    parse_messages_or_plain,
    parse_tools,
    to_template_messages,
)
from boundary.shipped.spec import FamilySpec
from boundary.tokenize.encode import (
    Encoder,
    encode_rendering,
    encode_rendering_sanitized,
    mark_control_tokens,
)
from boundary.tokenize.rendering import Rendering
from boundary.tokenize.segments import token_pattern
from boundary.tokenize.tokenizer import Tokenizer, template_literals

TOOL_USE = "tool_use"
"""The named template transformers and vLLM render with when a request gives tools."""

ARGUMENTS_FORMS: tuple[str, ...] = get_args(ArgumentsForm)


def check_arguments(arguments: object) -> None:
    """Refuse an ``arguments=`` option that is not one of ``ARGUMENTS_FORMS`` (None: the
    family's default), before any message is read."""
    if arguments is not None and arguments not in ARGUMENTS_FORMS:
        raise RequestError(
            f"expected one of {', '.join(map(repr, ARGUMENTS_FORMS))}, got {arguments!r}",
            location="arguments",
        )


class Renderer:
    """Templates + tokenizer + spec. ``render`` is one pass: text, ids, U_end, P_end.

    Every template is compiled when the renderer is made, so a template with a syntax
    error raises ``TemplateLoadError`` here, not at the first render."""

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
        for source in self.templates.values():
            self.compiled(source)

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}({self.name!r}, variant={self.default_variant!r}, tokenizer={self.tokenizer!r})"

    @property
    def name(self) -> str:
        return self.spec.name

    def compiled(self, source: str) -> CompiledTemplate:
        """``source`` compiled under this renderer's limits (cached by ``compile_template``)."""
        return compile_template(source, self.limits)

    def select_variant(self, variant: str | None, tools: Sequence[Any] | None) -> str:
        """The template a request renders with, chosen as transformers' ``get_chat_template``
        (and so vLLM's ``resolve_chat_template``) chooses among named templates: ``variant``
        when named, else ``tool_use`` when tools are given (``tools is not None``) and there
        is one, else the default."""
        if variant is not None:
            return variant
        if tools is not None and TOOL_USE in self.templates:
            return TOOL_USE
        return self.default_variant

    def template(self, variant: str | None = None) -> str:
        variant = variant or self.default_variant
        try:
            return self.templates[variant]
        except KeyError:
            have = ", ".join(self.templates)
            problem = (
                f"no template named {variant!r} to render by default (have: {have}); name one"
                if variant == self.default_variant
                else f"unknown variant {variant!r} (have: {have})"
            )
            raise RequestError(problem, location="variant") from None

    # -- rendering --------------------------------------------------------------------------
    def prepare(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        tools: Sequence[Mapping[str, Any] | Tool] | None = None,
        options: RenderOptions = DEFAULT_OPTIONS,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """Validate a request and normalize it into the dicts its template reads, as
        ``options.target`` hands them over (``boundary.render.target``; default ``vllm-0.33``).
        ``options.strict_request`` refuses fields and content part types outside the OpenAI
        schema; ``options.arguments`` and ``options.variant`` are ``render``'s."""
        check_arguments(options.arguments)
        resolved = resolve_target(options.target)
        variant = self.select_variant(options.variant, tools)
        strict, arguments = options.strict_request, options.arguments
        if resolved.family_conventions:
            parsed = parse_messages_or_plain(messages, strict=strict)
            parsed_tools = parse_tools(tools, strict=strict)
            normalized = self.normalize_parsed(parsed, arguments, variant=variant, target=resolved)
        else:
            models = parse_messages(messages, strict=strict)
            parsed_tools = parse_tools(tools, strict=strict)
            normalized = self.normalize(models, arguments, variant=variant, target=resolved, sent=messages)
        sent_tools = None if tools is None else [as_read(t) for t in tools]
        return normalized, template_tools(resolved, parsed_tools, sent_tools)

    def normalize_parsed(
        self,
        parsed: Sequence[Message | tuple[str, str]],
        arguments: ArgumentsForm | None = None,
        *,
        variant: str | None = None,
        target: RenderTarget,
    ) -> list[dict[str, Any]]:
        """``normalize`` for a target that follows the family's conventions (vLLM), given
        ``parse_messages_or_plain``'s result: a plain message's dict is built directly (what
        ``normalize`` makes of its model), the models go through ``normalize``."""
        models = [m for m in parsed if not isinstance(m, tuple)]
        normalized = self.normalize(models, arguments, variant=variant, target=target)
        if len(models) == len(parsed):
            return normalized
        rest = iter(normalized)
        return [{"role": m[0], "content": m[1]} if isinstance(m, tuple) else next(rest) for m in parsed]

    def normalize(
        self,
        messages: Sequence[Message],
        arguments: ArgumentsForm | None = None,
        *,
        variant: str | None = None,
        target: str | RenderTarget | None = None,
        sent: Sequence[Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Validated messages as the dicts this family's templates read, as ``target`` hands
        them over. ``sent`` is the request as the client sent it (default: the messages'
        ``model_dump(exclude_unset=True)``), which transformers targets pass on as is.
        Tool-call arguments are in ``arguments`` form, by default ``tool_arguments(variant)``
        for a frontend target (vLLM) and as sent for transformers. A family whose templates
        read text only (``content_parts = "join"``) gets the text parts joined (vLLM)."""
        check_arguments(arguments)
        resolved = resolve_target(target)
        if not resolved.family_conventions:
            raw = [as_read(m) for m in (messages if sent is None else sent)]
            out = [transformers_message(m, resolved) for m in raw]  # type: ignore[arg-type]
            if arguments is not None:  # an explicit form: only the arguments' values change
                forced = to_template_messages(messages, arguments=arguments)
                for m, f in zip(out, forced, strict=True):
                    calls = zip(m.get("tool_calls") or (), f.get("tool_calls") or (), strict=False)
                    for call, forced_call in calls:
                        call["function"]["arguments"] = forced_call["function"]["arguments"]
            return out
        template_messages = to_template_messages(
            messages,
            reasoning_field=self.spec.reasoning_field,
            arguments=arguments or self.tool_arguments(variant),
        )
        content_format = detect_content_format(self.template(variant))
        out = [vllm_message(m, self.spec.reasoning_field, content_format) for m in template_messages]
        if self.spec.content_parts == "join":
            for m in out:
                if isinstance(m.get("content"), list):
                    m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
        return out

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
        /,
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
        target: str | RenderTarget | None = None,
        **template_kwargs: Any,
    ) -> Rendering:
        """Render one request in a single pass.

        ``template_kwargs`` the template never reads are dropped, as vLLM drops them, and named
        in ``Rendering.ignored_template_kwargs`` (``strict_template_kwargs=True`` refuses them
        instead); ``now`` pins ``strftime_now`` for date-stamped templates; ``arguments``
        chooses whether tool-call arguments reach the template as objects or as the JSON text
        the client sent (default: ``tool_arguments(variant)``); ``strict_request`` refuses
        fields outside the OpenAI chat schema; ``target`` names whose request handling the
        render reproduces (``boundary.render.target``: ``"vllm-0.33"``, the default, or
        ``"transformers"``), an unknown one being a ``RequestError`` at ``target``.

        ``continue_final_message`` (True for the content, or the name of the field to
        continue, as in transformers) renders the final message open for the model to
        continue: the text is cut after its content exactly as transformers cuts it, and
        U_end / P_end are as ``Rendering`` documents. ``add_generation_prompt`` defaults to
        ``not continue_final_message``; asking for both is a ``RequestError``.
        """
        options = RenderOptions(
            add_generation_prompt=add_generation_prompt,
            variant=variant,
            documents=documents,
            sanitize_control_tokens=sanitize_control_tokens,
            arguments=arguments,
            now=now,
            continue_final_message=continue_final_message,
            strict_request=strict_request,
            strict_template_kwargs=strict_template_kwargs,
            target=target,
            template_kwargs=template_kwargs,
        )
        prepared_messages, prepared_tools = self.prepare(messages, tools, options)
        return self.render_prepared(prepared_messages, prepared_tools, options)

    def render_prepared(
        self,
        /,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        options: RenderOptions = DEFAULT_OPTIONS,
    ) -> Rendering:
        """``render`` for messages already validated and normalized by ``prepare``."""
        return self.render_with_encoder(messages, tools, options, encoder=None)

    def render_with_encoder(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        options: RenderOptions,
        *,
        encoder: Encoder | None,
        run: TemplateRunner | None = None,
    ) -> Rendering:
        """``render_prepared`` with the text encoded by ``encoder`` (None: the tokenizer, in
        full); sanitizing control tokens encodes the pieces apart and never uses it. ``run``
        runs the compiled template in ``run_template``'s place and must give its result
        (None: ``run_template``; a session passes its incremental run). The template kwargs
        are resolved once, here."""
        variant = self.select_variant(options.variant, tools)
        resolved = self.resolve_template_kwargs(
            options.template_kwargs, variant, strict=options.strict_template_kwargs
        )
        pattern = self._control_pattern(self.template(variant)) if options.sanitize_control_tokens else None
        rendered = self._text_rendering(
            messages, tools, options, variant=variant, control_pattern=pattern, kwargs=resolved.kept, run=run
        )
        if pattern is None:
            result = encode_rendering(rendered, self.tokenizer, encoder)
        else:
            result = encode_rendering_sanitized(rendered, self.tokenizer, pattern)
        return replace(result, ignored_template_kwargs=resolved.ignored) if resolved.ignored else result

    def _text_rendering(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None,
        options: RenderOptions,
        *,
        variant: str,
        control_pattern: re.Pattern[str] | None,
        kwargs: Mapping[str, Any],
        run: TemplateRunner | None,
    ) -> TextRendering:
        """The render stage alone: text and char positions, no tokens, with ``kwargs`` (the
        resolved template kwargs) passed. With ``control_pattern`` (sanitizing), control
        tokens in the inputs come back wrapped in markers. With ``continue_final_message``
        the text ends after the final message's content and ``input_end`` is that message's
        start (see ``Rendering``)."""
        documents, continue_final_message = options.documents, options.continue_final_message
        source = self.template(variant)
        compiled = self.compiled(source)
        prompt_flag = generation_prompt(options.add_generation_prompt, continue_final_message)
        for i, document in enumerate(documents or ()):
            check_value(document, f"documents[{i}]")
        if control_pattern is not None:
            messages = mark_control_tokens(messages, control_pattern)
            tools = mark_control_tokens(tools, control_pattern)
            documents = mark_control_tokens(documents, control_pattern)
        final: str | None = None
        if continue_final_message:
            messages, final = open_final_message(messages, continue_final_message, source)
        rendered = (run or run_template)(
            compiled,
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=prompt_flag,
            variables={**self.tokenizer.special_tokens_map, **kwargs},
            now=options.now,
            limits=self.limits,
        )
        rendered = rendered if final is None else cut_after_final_message(rendered, final)
        return replace(rendered, template_kwargs=dict(kwargs))

    def resolve_template_kwargs(
        self, kwargs: Mapping[str, Any], variant: str | None = None, *, strict: bool = False
    ) -> ResolvedKwargs:
        """The template kwargs ``variant``'s template receives (checked) and the names of those
        it drops, as ``vllm.renderers.hf.resolve_chat_template_kwargs`` decides: a kwarg
        reaches the template only if the template reads it (an undeclared variable of its
        Jinja AST). ``strict`` refuses, instead of dropping, a kwarg that is neither read
        nor declared by the family nor a special token (the behaviour before leniency)."""
        reads = self.compiled(self.template(variant)).variables
        return resolve_kwargs(self.spec, self.tokenizer.special_tokens_map, kwargs, reads, strict=strict)

    def _control_pattern(self, source: str) -> Any:
        key = hashlib.sha256(source.encode()).hexdigest()
        if key not in self._control_patterns:
            self._control_patterns[key] = token_pattern(
                self.tokenizer.control_tokens(template_literals(source))
            )
        return self._control_patterns[key]


class HoldsRenderer(Protocol):
    """A facade over a ``Renderer`` (``boundary.family.facade.Family``): the public entry points of
    the stages below take one in a renderer's place."""

    @property
    def renderer(self) -> Renderer: ...


def renderer_of(family: Renderer | HoldsRenderer) -> Renderer:
    """``family`` itself when it is a ``Renderer``, else the renderer it wraps."""
    return family if isinstance(family, Renderer) else family.renderer
