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
import operator
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from markupsafe import Markup

from boundary import incremental_plan as ip
from boundary import render as rd
from boundary.continuation import cut_after_final_message, generation_prompt, open_final_message
from boundary.protocol import check_value
from boundary.renderer import Renderer
from boundary.request_identity import content_key
from boundary.sandbox import DEFAULT_LIMITS, Deadline, RenderLimits, Sandbox, fixed_clock
from boundary.template_kwargs import resolve_kwargs

_RUN: ContextVar[_Run] = ContextVar("boundary_incremental_run")
_MAX_OUTER = 64  # distinct outer keys remembered per session


@dataclass(frozen=True, slots=True)
class IncrementalTemplate:
    """A compiled template whose message loop carries the plan's hooks."""

    compiled: rd.CompiledTemplate
    plan: ip.Plan


@lru_cache(maxsize=4)
def _environment(limits: RenderLimits) -> Sandbox:
    env = Sandbox(limits)
    env.filters.update(rd._sandbox(limits).filters)
    env.filters.update(
        {
            ip.ENTER: _enter,
            ip.MISS: _miss,
            ip.LEAVE: _leave,
            ip.LOOP: _loop,
            ip.NS: _ns,
            ip.NS_WRITE: _ns_write,
            ip.ITEM: _item,
            ip.LENGTH: _length,
            ip.LOOP_ALL: _loop_all,
            ip.NS_ALL: _ns_all,
            ip.SEQ_ALL: _seq_all,
            ip.COMPARE: _compare,
        }
    )
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


# -- hooks (filters the template cannot name; see ``boundary.incremental_plan``) -------------
def _enter(_: int, loop: Any, item: Any, *values: Any) -> str:
    return _RUN.get().enter(loop, item, values)


def _miss(_: int) -> bool:
    return _RUN.get().missing


def _leave(_: int) -> str:
    return _RUN.get().leave()


def _loop(value: Any, attr: str) -> Any:
    run = _RUN.get()
    if run.open is not None:
        run.record(("loop", attr), value)
    return value


def _ns(value: Any, name: str, attr: str) -> Any:
    run = _RUN.get()
    if run.open is not None and (name, attr) not in run.open.written:
        run.record(("ns", name, attr), value)
    return value


def _ns_write(value: Any, name: str, attr: str) -> Any:
    run = _RUN.get()
    if run.open is not None:
        run.open.written[name, attr] = None
    return value


@jinja2.pass_environment
def _item(env: jinja2.Environment, seq: Any, name: str, index: Any) -> Any:
    value = env.getitem(seq, index)
    run = _RUN.get()
    if run.open is not None:
        if type(index) in (int, str):
            run.record(("item", name, index), value)
        else:
            run.open.cacheable = False
    return value


def _length(seq: Any, name: str) -> int:
    value = len(seq)
    run = _RUN.get()
    if run.open is not None:
        run.record(("len", name), value)
    return value


def _loop_all(loop: Any) -> Any:
    run = _RUN.get()
    if run.open is not None:
        run.record_key(("loopall",))
    return loop


def _ns_all(ns: Any, name: str) -> Any:
    run = _RUN.get()
    if run.open is not None:
        run.record_key(("nsall", name))
    return ns


def _seq_all(seq: Any, name: str) -> Any:
    run = _RUN.get()
    if run.open is not None:
        run.record_key(("seqall", name))
    return seq


def _compare(result: Any, spec: tuple[Any, ...]) -> Any:
    run = _RUN.get()
    op = run.open
    if op is not None:
        leaves = [spec[0], *(leaf for _, leaf in spec[1:])]
        if any(leaf[0] == "ns" and (leaf[1], leaf[2]) in op.written for leaf in leaves):
            for leaf in leaves:  # the outcome rests on a value this iteration wrote: the rest, one by one
                if leaf[0] != "const" and not (leaf[0] == "ns" and (leaf[1], leaf[2]) in op.written):
                    run.record(leaf, run.raw(leaf))
        else:
            run.record(("cmp", spec), result)
    return result


_OPERATORS = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "gteq": operator.ge,
    "lt": operator.lt,
    "lteq": operator.le,
}
_FAILED = object()  # a comparison that raised: equal to no recorded outcome


# -- the per-session store and one render's run -----------------------------------------------
@dataclass(frozen=True, slots=True)
class _Entry:
    """One way an iteration ran: what it read, what it left behind, what it printed."""

    reads: tuple[tuple[tuple[Any, ...], Any], ...]
    writes: tuple[tuple[str, str, Any], ...]
    recorder: tuple[bool, bool, str | None, tuple[Any, ...]]
    steps: int
    built: int
    parts: tuple[str, ...]  # its raw output, split where marks carried the nonce


@dataclass(slots=True)
class _Open:
    """The iteration being rendered: where its output starts and what it read so far."""

    key: tuple[Any, ...]
    start: int
    steps: int
    room: int
    reads: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    written: dict[tuple[str, str], None] = field(default_factory=dict)
    cacheable: bool = True


class _Keys:
    """Exact-content keys of the values an iteration reads (``content_key``; scalars as
    ``(type, value)``), memoized by identity: within one render for any object (pinned, so
    its id is not reused), and across renders for the objects a session keeps unchanged and
    never exposes (its normalized message dicts and tool list, passed to ``start``)."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Any, Any]] = {}
        self._memo: dict[int, tuple[Any, Any]] = {}

    def start(self, keep: Sequence[Any]) -> None:
        pool = {**self._kept, **self._memo}
        self._kept = {id(o): pool[id(o)] for o in keep if id(o) in pool and pool[id(o)][0] is o}
        self._memo = {}

    def of(self, value: Any) -> Any:
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            return (kind, value)
        if kind is dict or kind is list or kind is tuple:
            known = self._kept.get(id(value)) or self._memo.get(id(value))
            if known is not None and known[0] is value:
                return known[1]
            key = content_key(value)
            self._memo[id(value)] = (value, key)
            return key
        if kind is float:
            return content_key(value)
        if isinstance(value, jinja2.Undefined):
            return (kind, value._undefined_name, value._undefined_hint)
        if kind is Markup:
            return (kind, str(value))
        return None


class _Counted:
    """The compiled template as ``render._run`` draws it, counting the characters drawn so
    far: a hook reads where in the raw output it stands."""

    __slots__ = ("_template", "environment", "size")

    def __init__(self, template: jinja2.Template) -> None:
        self._template = template
        self.environment = template.environment
        self.size = 0

    def new_context(self, context: dict[str, Any]) -> Any:
        return self._template.new_context(context)

    def root_render_func(self, context: Any) -> Any:
        for chunk in self._template.root_render_func(context):
            self.size += len(chunk)
            yield chunk


class _Run:
    """One render's side of the hooks: the plan's values at the loop, the iteration open."""

    def __init__(self, store: Incremental, plan: ip.Plan, recorder: Any, deadline: Deadline, out: _Counted) -> None:
        self.store, self.plan, self.recorder, self.deadline, self.out = store, plan, recorder, deadline, out
        self.env = out.environment
        self.keys = store.keys
        self.open: _Open | None = None
        self.missing = True
        self.outer: int | None = None
        self.disabled: str | None = None
        self.loop: Any = None
        self.ns: dict[str, Any] = {}
        self.seqs: dict[str, Any] = {}
        self.slots = 0  # iterations entered
        self.done: list[tuple[_Open, int, _Entry]] = []  # (iteration, where its output ends, entry)
        self.used: list[tuple[tuple[Any, ...], _Entry]] = []

    def _begin(self, values: tuple[Any, ...]) -> None:
        plan = self.plan
        k, m = len(plan.namespaces), len(plan.sequences)
        self.ns = dict(zip(plan.namespaces, values[:k], strict=True))
        self.seqs = dict(zip(plan.sequences, values[k : k + m], strict=True))
        for name, ns in self.ns.items():
            if not isinstance(ns, jinja2.utils.Namespace):
                self.disabled = f"{name!r} is not a namespace when the message loop runs"
        outer = tuple(self.keys.of(v) for v in values[k + m :])
        for name, key in zip(plan.outer, outer, strict=True):
            if key is None:
                self.disabled = f"{name!r} has a value with no exact key when the message loop runs"
        self.outer = self.store.outer_id(outer)

    def enter(self, loop: Any, item: Any, values: tuple[Any, ...]) -> str:
        if self.outer is None:
            self._begin(values)
        self.loop, self.missing = loop, True
        self.slots += 1
        store = self.store
        store.rendered += 1
        item_key = self.keys.of(item)
        if self.disabled is not None or item_key is None:
            return ""
        rec = self.recorder
        key = (item_key, self.outer, (rec.decided, rec._pending, rec.unknown, tuple(map(id, rec._watch))))
        for entry in store.entries.get(key, ()):
            if self._fits(entry) and all(self.value(d) == v for d, v in entry.reads):
                return self._replay(key, entry)
        self.open = _Open(key, self.out.size, self.deadline._steps, self.deadline._room)
        return ""

    def _fits(self, entry: _Entry) -> bool:
        d = self.deadline
        return d._steps + entry.steps <= d._max_steps and d._room - entry.built >= 0

    def _replay(self, key: tuple[Any, ...], entry: _Entry) -> str:
        d = self.deadline
        d._steps += entry.steps
        d._room -= entry.built
        for name, attr, value in entry.writes:
            self.ns[name][attr] = value
        rec = self.recorder
        rec.decided, rec._pending, rec.unknown, watch = entry.recorder
        rec._watch = list(watch)
        self.missing = False
        self.store.rendered -= 1
        self.store.reused += 1
        self.used.append((key, entry))
        return self.recorder.nonce.join(entry.parts)

    def leave(self) -> str:
        op, self.open = self.open, None
        if op is None or not op.cacheable:
            return ""
        writes = tuple((n, a, getattr(self.ns[n], a)) for n, a in op.written)
        if any(self.keys.of(v) is None for _, _, v in writes):
            return ""  # a value that could be shared mutable state (a cycler, a namespace)
        rec, d = self.recorder, self.deadline
        state = (rec.decided, rec._pending, rec.unknown, tuple(rec._watch))
        entry = _Entry(tuple(op.reads.items()), writes, state, d._steps - op.steps, op.room - d._room, ())
        self.done.append((op, self.out.size, entry))
        return ""

    def record(self, desc: tuple[Any, ...], value: Any) -> None:
        op = self.open
        key = self.keys.of(value)
        if op is not None:
            if key is None:
                op.cacheable = False
            else:
                op.reads[desc] = key

    def record_key(self, desc: tuple[Any, ...]) -> None:
        op = self.open
        key = self.value(desc)
        if op is not None:
            if key is None or (type(key) is tuple and None in key):
                op.cacheable = False
            else:
                op.reads[desc] = key

    def raw(self, desc: tuple[Any, ...]) -> Any:
        """What a comparison operand gives now."""
        kind = desc[0]
        if kind == "const":
            return desc[1]
        if kind == "loop":
            return getattr(self.loop, desc[1])
        if kind == "ns":
            return self.env.getattr(self.ns[desc[1]], desc[2])
        return len(self.seqs[desc[1]])

    def _outcome(self, spec: tuple[Any, ...]) -> Any:
        try:
            left = self.raw(spec[0])
            for op, leaf in spec[1:]:
                right = self.raw(leaf)
                if not _OPERATORS[op](left, right):
                    return (bool, False)
                left = right
        except Exception:
            return _FAILED
        return (bool, True)

    def value(self, desc: tuple[Any, ...]) -> Any:
        """The key of what the read ``desc`` gives now (the trace's reads, re-evaluated)."""
        kind, of = desc[0], self.keys.of
        if kind == "cmp":
            return self._outcome(desc[1])
        if kind == "loop":
            return of(getattr(self.loop, desc[1]))
        if kind == "ns":
            return of(self.env.getattr(self.ns[desc[1]], desc[2]))
        if kind == "item":
            return of(self.env.getitem(self.seqs[desc[1]], desc[2]))
        if kind == "len":
            return of(len(self.seqs[desc[1]]))
        if kind == "loopall":
            loop = self.loop
            return (loop.index0, loop.length, loop.depth0, of(loop.previtem), of(loop.nextitem))
        if kind == "nsall":
            return of(dict(object.__getattribute__(self.ns[desc[1]], "_Namespace__attrs")))
        return tuple(of(x) for x in self.seqs[desc[1]])  # seqall


class Incremental:
    """One conversation's cached loop iterations; ``render_text`` is ``Renderer.render_text``
    (no control-token sanitizing) with the message loop run incrementally where the plan
    allows. ``reason`` says why the last render ran in full (None: it ran incrementally)."""

    def __init__(self) -> None:
        self.keys = _Keys()
        self.entries: dict[tuple[Any, ...], list[_Entry]] = {}
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
        incremental = compile_incremental(source, limits)
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
        out = _Counted(compiled.template)
        run = _Run(self, incremental.plan, recorder, deadline, out)
        self.keys.start([*messages, tools])
        token = _RUN.set(run)
        try:
            raw = rd._run(out, context, recorder, deadline)  # type: ignore[arg-type]
        finally:
            _RUN.reset(token)
        self._keep(run, raw)
        self.reason = run.disabled
        return rd._read_marks(raw, recorder, compiled, len(messages), deadline)

    def _keep(self, run: _Run, raw: str) -> None:
        """Keep what this render used or rendered; forget what the last two renders did not
        touch once the store outgrows the conversation."""
        nonce, entries = run.recorder.nonce, self.entries
        self._generation += 1
        generation = self._generation
        for key, entry in run.used:
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
