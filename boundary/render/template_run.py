"""Run a chat template once, sandboxed and instrumented: the text and its marks.

Where it sits: the render stage, after the request stage and before ``boundary.tokenize``: text and char
positions, no tokens; ``boundary.renderer`` calls it. ``boundary.render.instrumentation`` places the
probes, ``boundary.render.flag_flip`` evaluates each with the generation flag negated, and
``boundary.render.marks`` reads the marks the run leaves into positions.

``compile_template`` parses, instruments and compiles a template source (cached by source
and limits): a shipped template, byte for byte (``boundary.shipped.trust``), in a
``TrustedSandbox`` that skips the per-call checks its AST proves cannot fire, any other in the
fully checked ``Sandbox``; ``CompiledTemplate.trust`` says which. ``run_template`` runs it
and returns the text exactly as transformers' ``apply_chat_template`` would, together with
character positions of the history end (U_end), message starts and ``{% generation %}``
spans, all from that one pass.
"""

from __future__ import annotations

import secrets
from collections import ChainMap
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

import jinja2
import jinja2.meta
import jinja2.nodes
import jinja2.runtime

from boundary.errors import (
    RenderLimitExceeded,
    SandboxViolation,
    TemplateLoadError,
    TemplateRenderError,
)
from boundary.memo import once_cache
from boundary.render import instrumentation as ins
from boundary.render.flag_branches import BranchState
from boundary.render.flag_flip import FlippedTest, Unknown, flipped_test
from boundary.render.marks import CLOSE, OPEN, TextRendering, read_marks
from boundary.render.sandbox import (
    DEFAULT_LIMITS,
    Deadline,
    RenderLimits,
    Sandbox,
    TemplateRaised,
    fixed_clock,
)
from boundary.render.sandbox.limits import limited, release, tick
from boundary.render.sandbox.trusted import TrustedSandbox, plain_attributes
from boundary.shipped.trust import shipped_as


@dataclass(frozen=True, slots=True)
class Trust:
    """Whether a compiled template runs in a ``TrustedSandbox``, and what that skips."""

    trusted: bool
    shipped: str | None  # the shipped template file the source is, byte for byte
    skipped: tuple[str, ...] = ()  # per-call checks skipped (``boundary.render.sandbox.trusted``)
    names: frozenset[str] = frozenset()  # the attribute names they are skipped for


@dataclass(frozen=True, slots=True)
class CompiledTemplate:
    """An instrumented, compiled template and what instrumentation learned about it."""

    source: str
    template: jinja2.Template
    variables: frozenset[str]  # undeclared variables the template reads
    flipped: tuple[FlippedTest, ...]  # one per generation-prompt probe, by site
    unavailable_reason: str | None
    generation_reason: str | None = None
    stateful: tuple[BranchState | None, ...] = ()  # per site: state its branches carry on
    silent: tuple[bool, ...] = ()  # per site: neither branch prints
    shipped: str | None = None  # the shipped template file the source is, byte for byte

    @property
    def probes(self) -> int:
        return len(self.flipped)

    @property
    def trust(self) -> Trust:
        """Read from the environment ``template`` runs in: a template recompiled elsewhere
        (an incremental run's) is trusted only if that environment is a ``TrustedSandbox``."""
        env = self.template.environment
        if isinstance(env, TrustedSandbox):
            return Trust(True, self.shipped, env.skipped_checks, env.plain_names)
        return Trust(False, self.shipped)


_RECORDER: ContextVar[_Recorder] = ContextVar("boundary_recorder")
_SKIP = object()  # the flipped value is not needed: the outcome is already known


# The instrumentation's callbacks (filters the template cannot name). Each reads the render's
# recorder or deadline from the context variable set around the render, once per call.
def _flip(site: int, *values: Any) -> Any:
    return _RECORDER.get().flip(site, values)


def _probe(flipped: Any, site: int, value: Any) -> bool:
    return _RECORDER.get().probe(flipped, site, value)


def _read(value: Any, key: str) -> Any:
    return _RECORDER.get().read(key, value)


def _emit(_: int) -> str:
    return _RECORDER.get().emit()


def _message(_: int, site: int, item: Any) -> str:
    return _RECORDER.get().message(site, item)


def _generation(_: int, start: bool) -> str:
    return _RECORDER.get().generation(start)


_Env = TypeVar("_Env", bound=Sandbox)


@once_cache(maxsize=4)
def _sandbox(limits: RenderLimits) -> Sandbox:
    """The checked environment for ``limits``; one per limits, at most 4 kept."""
    return _with_callbacks(Sandbox(limits))


@once_cache(maxsize=32)
def _trusted_sandbox(limits: RenderLimits, names: frozenset[str]) -> TrustedSandbox:
    """The trusted environment for ``limits`` and ``names``; at most 32 kept."""
    return _with_callbacks(TrustedSandbox(limits, names))


def _with_callbacks(env: _Env) -> _Env:
    """``env`` with the instrumentation's callbacks installed as filters."""
    env.filters.update(
        {
            ins.FLIP: _flip,
            ins.PROBE: _probe,
            ins.READ: _read,
            ins.EMIT: _emit,
            ins.MESSAGE: _message,
            ins.TICK: tick,
            ins.GENERATION: _generation,
            ins.CHECKED_ADD: env._checked_add,
            ins.CHECKED_ADDS: env.checked_adds,
            ins.CHECKED_CONCAT: _concat(env),
            ins.CHECKED_SLICE: env.checked_slice,
        }
    )
    return env


def _concat(env: Sandbox) -> Any:
    """``~`` as jinja2 compiles it (``markup_join`` under autoescape, else ``str_join``),
    size-checked by the sandbox."""

    @jinja2.pass_eval_context
    def concat(eval_ctx: Any, parts: tuple[Any, ...]) -> str:
        if eval_ctx.autoescape:
            return jinja2.runtime.markup_join(parts)
        return env.checked_concat(parts)

    return concat


@once_cache(maxsize=128)
def compile_template(source: str, limits: RenderLimits = DEFAULT_LIMITS) -> CompiledTemplate:
    """Parse, instrument and compile ``source``. Cached (``boundary.memo``): each source and
    limits compiled once, however many threads ask at once; at most 128 kept, least recently
    used dropped first (a Qwen3.5 template compiles to about 0.2 MiB, its incremental form 0.4)."""
    env: Sandbox = _sandbox(limits)
    shipped = shipped_as(source)
    try:
        tree = env.parse(source)
        for node in tree.find_all(
            (jinja2.nodes.Include, jinja2.nodes.Import, jinja2.nodes.FromImport, jinja2.nodes.Extends)
        ):
            raise SandboxViolation(
                f"templates may not {type(node).__name__.lower()} other templates (no file access)",
                location=f"template:{node.lineno}",
            )
        variables = frozenset(jinja2.meta.find_undeclared_variables(tree))
        if shipped is not None:
            env = _trusted_sandbox(limits, plain_attributes(tree))
        instrumented = ins.instrument(env.parse(source))  # a fresh tree: instrument() mutates it
        template = env.from_string(instrumented.tree)
        flipped = tuple(flipped_test(p.test, env) for p in instrumented.probes)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateLoadError(f"syntax error: {exc.message}", location=f"template:{exc.lineno}") from None
    except (RecursionError, SyntaxError, MemoryError) as exc:
        # jinja2's parser and code generator, and Python's compiler after them, recurse once per
        # nesting level: deep ``(((...)))``, ``{% if %}`` or ``{% for %}`` nesting ends here
        raise TemplateLoadError(
            f"the template nests too deeply to compile ({type(exc).__name__}: {exc})", location="template"
        ) from None
    stateful = tuple(p.stateful for p in instrumented.probes)
    silent = tuple(p.silent for p in instrumented.probes)
    return CompiledTemplate(
        source,
        template,
        variables,
        flipped,
        instrumented.unavailable_reason,
        instrumented.generation_reason,
        stateful,
        silent,
        shipped,
    )


class _Recorder:
    """Per-render state behind the instrumentation's callbacks; each mark callback returns a
    mark or ''. Once the first divergent probe is found (or a probe's flipped value is
    unknown), later probes are not evaluated."""

    __slots__ = ("_compiled", "_flipped", "_message_ids", "_pending", "_watch", "decided", "nonce", "unknown")

    def __init__(self, messages: Sequence[Any], compiled: CompiledTemplate) -> None:
        self.nonce = OPEN + secrets.token_hex(6) + ":"
        self._message_ids = dict(zip(map(id, messages), range(len(messages)), strict=True))
        self._flipped = compiled.flipped
        self._compiled = compiled
        self._watch: list[BranchState] = []  # state the divergences so far carry on
        self.decided = compiled.unavailable_reason is not None
        self.unknown: str | None = None
        self._pending = False

    def flip(self, site: int, values: tuple[Any, ...]) -> Any:
        if self.decided:
            return _SKIP
        test = self._flipped[site]
        try:
            return test.evaluate(values)
        except Unknown as exc:
            self.decided = True
            self.unknown = f"the if-test at template line {test.lineno} can't be re-evaluated safely: {exc}"
            return _SKIP

    def probe(self, flipped: Any, site: int, value: Any) -> bool:
        """The template's own test value; at a divergence (the other render takes the other
        branch) a mark, unless the test is silent; state its branches carry on is watched."""
        truth = bool(value)
        if flipped is _SKIP or flipped == truth:
            return truth
        compiled = self._compiled
        state = compiled.stateful[site] if site < len(compiled.stateful) else None
        silent = site < len(compiled.silent) and compiled.silent[site]
        if state is not None and state.watch is None:
            self.decided, self.unknown = True, state.reason
            return truth
        if state is not None:
            self._watch.append(state)
        if not silent:
            self.decided = self._pending = True
        return truth

    def read(self, key: str, value: Any) -> Any:
        """A read of state some branch on the flag may have changed: after a divergence that
        changed it, U_end is withdrawn."""
        if self.unknown is None:
            for state in self._watch:
                if state.watch is not None and key in state.watch:
                    self.unknown = state.reason
        return value

    def emit(self) -> str:
        if not self._pending:
            return ""
        self._pending = False
        return f"{self.nonce}g{CLOSE}"

    def message(self, site: int, item: Any) -> str:
        index = self._message_ids.get(id(item))
        return "" if index is None else f"{self.nonce}m{site}.{index}{CLOSE}"

    def generation(self, start: bool) -> str:
        return f"{self.nonce}{'s' if start else 'e'}{CLOSE}"


def _template_line(exc: BaseException) -> str:
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return "template" if line is None else f"template:{line}"


def template_context(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    documents: Sequence[Mapping[str, Any]] | None,
    add_generation_prompt: bool,
    variables: Mapping[str, Any] | None,
    now: datetime | None,
) -> dict[str, Any]:
    """The names a template run sees, as transformers passes them: ``variables`` (special
    tokens, template kwargs) under the request's own names; ``strftime_now`` fixed to ``now``."""
    context: dict[str, Any] = {
        **(variables or {}),
        "messages": messages,
        "tools": tools,
        "documents": documents,
        "add_generation_prompt": add_generation_prompt,
    }
    if now is not None:
        context["strftime_now"] = fixed_clock(now)
    return context


def run_template(
    compiled: CompiledTemplate,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    variables: Mapping[str, Any] | None = None,
    now: datetime | None = None,
    limits: RenderLimits = DEFAULT_LIMITS,
) -> TextRendering:
    """Render once; ``variables`` are the tokenizer's special tokens plus template kwargs,
    passed as transformers passes them."""
    recorder = _Recorder(messages, compiled)
    context = template_context(messages, tools, documents, add_generation_prompt, variables, now)
    deadline = Deadline(limits)
    raw = _run(compiled.template, context, recorder, deadline)
    withdrawn = compiled.unavailable_reason if compiled.unavailable_reason is not None else recorder.unknown
    return read_marks(raw, recorder.nonce, len(messages), withdrawn=withdrawn, deadline=deadline)


class TemplateRunner(Protocol):
    """Something that runs a compiled template as ``run_template`` does, with its result (a
    session's incremental run, ``boundary.session.incremental.store``)."""

    def __call__(
        self,
        compiled: CompiledTemplate,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        documents: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        variables: Mapping[str, Any] | None,
        now: datetime | None,
        limits: RenderLimits,
    ) -> TextRendering: ...


def new_context(template: jinja2.Template, context: dict[str, Any]) -> jinja2.runtime.Context:
    """``template.new_context(context)``, the same context: jinja2 builds it from the template's
    globals, a ``ChainMap`` it reads key by key in Python twice a render; flattened here in C."""
    chained = template.globals
    flat: dict[str, Any] = {}
    if isinstance(chained, ChainMap):
        for mapping in reversed(chained.maps):
            flat.update(mapping)
    else:  # pragma: no cover  (jinja2 3.x: always a ChainMap)
        flat.update(chained)
    parent = {**flat, **context}
    return jinja2.runtime.new_context(
        template.environment, template.name, template.blocks, parent, True, flat
    )


def _run(template: jinja2.Template, context: dict[str, Any], recorder: _Recorder, deadline: Deadline) -> str:
    """Render with ``recorder`` and one ``Deadline`` (loop steps, sizes, clock) active: the
    template's own generator is drawn directly, with jinja2's traceback rewriting on errors."""
    chunks: list[str] = []
    size = 0
    limits = deadline.limits
    tokens = limited(deadline), _RECORDER.set(recorder)
    try:
        try:
            for chunk in template.root_render_func(new_context(template, context)):
                size += len(chunk)
                chunks.append(chunk)
                if size > limits.max_output_chars:
                    raise RenderLimitExceeded(
                        f"output passed max_output_chars={limits.max_output_chars:,}", location="template"
                    )
                if not len(chunks) & 0x3FF:
                    deadline.check_time()
        except Exception:
            template.environment.handle_exception()  # re-raises with the template's line numbers
    except TemplateRaised as exc:
        raise TemplateRenderError(str(exc.message), location=_template_line(exc)) from None
    except jinja2.exceptions.SecurityError as exc:
        raise SandboxViolation(str(exc), location=_template_line(exc)) from None
    except RecursionError as exc:
        raise RenderLimitExceeded("recursion too deep", location=_template_line(exc)) from None
    except RenderLimitExceeded:
        raise
    except (
        jinja2.TemplateError,
        TypeError,
        ValueError,
        KeyError,
        IndexError,
        AttributeError,
        ZeroDivisionError,
        OverflowError,
    ) as exc:
        raise TemplateRenderError(f"{type(exc).__name__}: {exc}", location=_template_line(exc)) from None
    finally:
        _RECORDER.reset(tokens[1])
        release(tokens[0])
    deadline.check_time()
    return "".join(chunks)
