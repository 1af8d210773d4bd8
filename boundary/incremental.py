"""Incremental template runs within a session: each message's loop body is rendered once and
reused while every value it read is unchanged.

Where it sits: inside the render stage, beside ``render``: a ``Session`` uses it in place of
``Renderer.render_text``; ``boundary.incremental_plan`` decides per template whether it may.

For a template the plan accepts, each iteration of the message loop is keyed by the message's
exact content, the values of the outer names the body reads (fixed for the loop), and the
recorder's state (probes); under that key it keeps, for each way the body ran, its *trace*:
every value it read through a hook (``loop.<attr>``, ``ns.<attr>`` of a top-level namespace
before the iteration wrote it, ``messages[i]``, ``messages|length``) with its value. An
iteration is replayed only when the trace's reads give the same values now; the replay prints
the body's output (its marks re-issued under this render's nonce), writes the namespace
attributes the body wrote, restores the recorder's state and charges the render's counters
what the body cost, so the text, marks, U_end and limits are those of a full render.
Values are compared by exact content (``boundary.request_identity.content_key``: key order
and types kept); a value with no such key (a cycler, a macro, a custom object) makes the
iteration run in full. A template the plan refuses is rendered in full, and ``reason`` says
why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2

from boundary import incremental_plan as ip
from boundary import render as rd
from boundary.continuation import cut_after_final_message, generation_prompt, open_final_message
from boundary.incremental_run import FILTERS, RUN, Counted, Entry, Keys, Run
from boundary.protocol import check_value
from boundary.renderer import Renderer
from boundary.sandbox import DEFAULT_LIMITS, Deadline, RenderLimits, Sandbox, fixed_clock
from boundary.template_kwargs import resolve_kwargs

_MAX_OUTER = 64  # distinct outer keys remembered per session
_OFF = "incremental runs are turned off for this session"


@dataclass(frozen=True, slots=True)
class IncrementalTemplate:
    """A compiled template whose message loop carries the plan's hooks."""

    compiled: rd.CompiledTemplate
    plan: ip.Plan


@lru_cache(maxsize=4)
def _environment(limits: RenderLimits) -> Sandbox:
    env = Sandbox(limits)
    env.filters.update(rd._sandbox(limits).filters)
    env.filters.update(FILTERS)
    return env


@lru_cache(maxsize=128)
def compile_incremental(source: str, limits: RenderLimits = DEFAULT_LIMITS) -> IncrementalTemplate | str:
    """``source`` compiled with the plan's hooks, or why its loop cannot run incrementally.
    Load errors are ``compile_template``'s."""
    compiled = rd.compile_template(source, limits)
    env = _environment(limits)
    try:
        plan = ip.plan(source, env.parse)
        if isinstance(plan, str):
            return plan
        template = env.from_string(plan.tree)
    except (jinja2.TemplateError, RecursionError, SyntaxError, MemoryError) as exc:  # pragma: no cover
        return f"the rewritten template does not compile ({type(exc).__name__}: {exc})"
    return IncrementalTemplate(replace(compiled, template=template), plan)


class Incremental:
    """One conversation's cached loop iterations; ``render_text`` is ``Renderer.render_text``
    (no control-token sanitizing) with the message loop run incrementally where the plan
    allows. ``reason`` says why the last render ran in full (None: it ran incrementally)."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.keys = Keys()
        self.entries: dict[tuple[Any, ...], list[Entry]] = {}
        self._touched: dict[tuple[Any, ...], int] = {}  # key -> the last render that used it
        self._generation = 0
        self._outer: dict[tuple[Any, ...], int] = {}
        self.reason: str | None = None
        self.reused = 0  # iterations replayed, over all renders
        self.rendered = 0  # iterations rendered

    def outer_id(self, outer: tuple[Any, ...]) -> int:
        if outer not in self._outer:
            if len(self._outer) >= _MAX_OUTER:
                self._outer.clear()
                self.entries, self._touched = {}, {}
            self._outer[outer] = len(self._outer)
        return self._outer[outer]

    def render_text(
        self,
        renderer: Renderer,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool | None = None,
        *,
        variant: str | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        now: datetime | None = None,
        continue_final_message: bool | str = False,
        strict_template_kwargs: bool = False,
        **template_kwargs: Any,
    ) -> rd.TextRendering:
        """``renderer.render_text`` (without ``control_pattern``), the same result."""
        source = renderer.template(renderer.select_variant(variant, tools))
        compiled = renderer.compiled(source)
        special = renderer.tokenizer.special_tokens_map
        kwargs = resolve_kwargs(
            renderer.spec, special, template_kwargs, compiled.variables, strict=strict_template_kwargs
        ).kept
        prompt_flag = generation_prompt(add_generation_prompt, continue_final_message)
        for i, document in enumerate(documents or ()):
            check_value(document, f"documents[{i}]")
        final: str | None = None
        if continue_final_message:
            messages, final = open_final_message(messages, continue_final_message, source)
        rendered = self.render_compiled(
            source,
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=prompt_flag,
            variables={**special, **kwargs},
            now=now,
            limits=renderer.limits,
        )
        rendered = rendered if final is None else cut_after_final_message(rendered, final)
        return replace(rendered, template_kwargs=dict(kwargs))

    def render_compiled(
        self,
        source: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        documents: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        variables: Mapping[str, Any],
        now: datetime | None,
        limits: RenderLimits,
    ) -> rd.TextRendering:
        """``render.render_text`` of ``source``'s compiled template, the same result."""
        incremental = compile_incremental(source, limits) if self.enabled else _OFF
        if isinstance(incremental, str):
            self.reason = incremental
            return rd.render_text(
                rd.compile_template(source, limits),
                messages,
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                variables=variables,
                now=now,
                limits=limits,
            )
        compiled = incremental.compiled
        recorder = rd._Recorder(messages, compiled)
        context: dict[str, Any] = {
            **variables,
            "messages": messages,
            "tools": tools,
            "documents": documents,
            "add_generation_prompt": add_generation_prompt,
        }
        if now is not None:
            context["strftime_now"] = fixed_clock(now)
        deadline = Deadline(limits)
        out = Counted(compiled.template)
        run = Run(self, source, incremental.plan, recorder, deadline, out)
        self.keys.start([*messages, tools])
        token = RUN.set(run)
        try:
            raw = rd._run(out, context, recorder, deadline)  # type: ignore[arg-type]
        finally:
            RUN.reset(token)
        self._keep(run, raw)
        self.reason = run.disabled
        return rd._read_marks(raw, recorder, compiled, len(messages), deadline)

    def _keep(self, run: Run, raw: str) -> None:
        """Keep what this render used or rendered; forget what the last two renders did not
        touch once the store outgrows the conversation."""
        nonce, entries = run.recorder.nonce, self.entries
        self._generation += 1
        generation = self._generation
        for key, _ in run.used:
            self._touched[key] = generation
        for op, end, entry in run.done:
            parts = tuple(raw[op.start : end].split(nonce))
            kept = entries.setdefault(op.key, [])
            kept.insert(0, replace(entry, parts=parts))
            del kept[4:]
            self._touched[op.key] = generation
        if len(entries) > 2 * run.slots + 16:
            for key in [k for k, g in self._touched.items() if g < generation - 1]:
                del self._touched[key]
                entries.pop(key, None)
