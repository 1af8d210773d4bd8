"""Incremental template runs within a session: each message's loop body is rendered once and
reused while every value it read is unchanged.

Where it sits: inside the session stage, beside ``template_run``: a ``Session`` passes
``Incremental.run_template`` to ``Renderer.render_with_encoder`` in place of
``template_run.run_template``; ``boundary.session.incremental.plan`` decides per template whether it may.

For a template the plan accepts, each iteration of the message loop is keyed by the message's
exact content, the values of the outer names the body reads (fixed for the loop), and the
recorder's state (probes); under that key it keeps, for each way the body ran, its *trace*:
every value it read through a hook (``loop.<attr>``, ``ns.<attr>`` of a top-level namespace
before the iteration wrote it, ``messages[i]``, ``messages|length``) with its value. An
iteration is replayed only when the trace's reads give the same values now; the replay prints
the body's output (its marks re-issued under this render's nonce), writes the namespace
attributes the body wrote, restores the recorder's state and charges the render's counters
what the body cost, so the text, marks, U_end and limits are those of a full render. A run
of consecutive replayable iterations costs the Jinja loop one step (``Run.iterate``), and a
guarded scan ends once its guard is false (``incremental_plan._guard``).
Values are compared by exact content (``boundary.request.identity.content_key``: key order
and types kept); a value with no such key (a cycler, a macro, a custom object) makes the
iteration run in full. A template the plan refuses is rendered in full, and ``reason`` says
why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import jinja2

from boundary.footprint import SLOT, held_bytes, ints_bytes, strings_bytes
from boundary.memo import once_cache
from boundary.render import template_run as tr
from boundary.render.marks import TextRendering, read_marks
from boundary.render.sandbox import DEFAULT_LIMITS, Deadline, RenderLimits, Sandbox
from boundary.render.sandbox.trusted import TrustedSandbox
from boundary.session.incremental import plan as ip
from boundary.session.incremental.chain import Chain, head_splice, next_chain
from boundary.session.incremental.hooks import FILTERS, RUN
from boundary.session.incremental.keys import Keys
from boundary.session.incremental.run import Counted, Entry, Run

_MAX_OUTER = 64  # distinct outer keys remembered per session
# Bytes counted for what an entry holds beside its output (the entry, its read and write
# tuples, its slot in the store and ``_touched``) and per read or write it records.
_ENTRY = 400
_READ = 160
_OFF = "incremental runs are turned off for this session"


@dataclass(frozen=True, slots=True)
class IncrementalTemplate:
    """A compiled template whose message loop carries the plan's hooks."""

    compiled: tr.CompiledTemplate
    plan: ip.Plan


@once_cache(maxsize=32)
def _environment(limits: RenderLimits, trusted: frozenset[str] | None) -> Sandbox:
    """The environment a rewritten template runs in: a ``TrustedSandbox`` over ``trusted``
    (the plain attribute names of a shipped template, ``CompiledTemplate.trust``), else the
    fully checked ``Sandbox``; with the instrumentation's and the plan's hooks. At most 32 kept."""
    env = Sandbox(limits) if trusted is None else TrustedSandbox(limits, trusted)
    env.filters.update(tr._sandbox(limits).filters)
    env.filters.update(FILTERS)
    return env


@once_cache(maxsize=128)
def compile_incremental(source: str, limits: RenderLimits = DEFAULT_LIMITS) -> IncrementalTemplate | str:
    """``source`` compiled with the plan's hooks, or why its loop cannot run incrementally.
    Load errors are ``compile_template``'s. Cached (``boundary.memo``): compiled once per
    source and limits however many sessions' first requests arrive together; at most 128
    kept, least recently used dropped first. The value is frozen and shared by every session."""
    compiled = tr.compile_template(source, limits)
    trust = compiled.trust
    env = _environment(limits, trust.names if trust.trusted else None)
    try:
        plan = ip.plan(source, env.parse)
        if isinstance(plan, str):
            return plan
        template = env.from_string(plan.tree)
    except (jinja2.TemplateError, RecursionError, SyntaxError, MemoryError) as exc:  # pragma: no cover
        return f"the rewritten template does not compile ({type(exc).__name__}: {exc})"
    return IncrementalTemplate(replace(compiled, template=template), plan)


class Incremental:
    """One conversation's cached loop iterations; ``run_template`` is
    ``template_run.run_template`` with the message loop run incrementally where the plan
    allows. ``reason`` says why the last render ran in full (None: it ran incrementally)."""

    def __init__(self, *, enabled: bool = True, min_messages: int = 0) -> None:
        self.enabled = enabled
        self.min_messages = min_messages  # a shorter request runs the template in full
        self.keys = Keys()
        self.entries: dict[tuple[Any, ...], list[Entry]] = {}
        self.chain: Chain | None = None  # the last render's loop head (``incremental_chain``)
        self._touched: dict[tuple[Any, ...], int] = {}  # key -> the last render that used it
        self._generation = 0
        self._outer: dict[tuple[Any, ...], int] = {}
        self.reason: str | None = None
        self.reused = 0  # iterations replayed, over all renders
        self.rendered = 0  # iterations rendered
        self.scan_skipped = 0  # iterations of guarded scans skipped (``incremental_plan._guard``)
        self.chained = 0  # of the iterations replayed, those replayed as the head's chain
        # bytes held by the entries (their ``size``), the chain and the outer keys
        self._entry_bytes = self._chain_bytes = self._outer_bytes = 0

    @property
    def nbytes(self) -> int:
        """Bytes this store holds, counted as it changes: each entry's output and a fixed
        amount per entry and per read (``_ENTRY``, ``_READ``), the chain's text and a slot
        per iteration, the outer keys and the value keys (``Keys.nbytes``)."""
        return self._entry_bytes + self._chain_bytes + self._outer_bytes + self.keys.nbytes

    def outer_id(self, outer: tuple[Any, ...]) -> int:
        if outer not in self._outer:
            if len(self._outer) >= _MAX_OUTER:
                self._outer.clear()
                self.entries, self._touched, self.chain = {}, {}, None
                self._entry_bytes = self._chain_bytes = self._outer_bytes = 0
            self._outer[outer] = len(self._outer)
            self._outer_bytes += held_bytes(outer[1:]) + 4 * SLOT  # the source is the template's own
        return self._outer[outer]

    def run_template(
        self,
        compiled: tr.CompiledTemplate,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        documents: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        variables: Mapping[str, Any] | None,
        now: datetime | None,
        limits: RenderLimits,
    ) -> TextRendering:
        """``template_run.run_template`` (a ``TemplateRunner``), the same result."""
        incremental = compile_incremental(compiled.source, limits) if self.enabled else _OFF
        if len(messages) < self.min_messages and not isinstance(incremental, str):
            incremental = f"a request of fewer than {self.min_messages} messages runs the template in full"
        if isinstance(incremental, str):
            self.reason = incremental
            return tr.run_template(
                compiled,
                messages,
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                variables=variables,
                now=now,
                limits=limits,
            )
        compiled = incremental.compiled
        recorder = tr._Recorder(messages, compiled)
        context = tr.template_context(messages, tools, documents, add_generation_prompt, variables, now)
        deadline = Deadline(limits)
        out = Counted(compiled.template)
        run = Run(self, compiled.source, incremental.plan, messages, recorder, deadline, out)
        self.keys.start([*messages, tools])
        token = RUN.set(run)
        try:
            raw = tr._run(out, context, recorder, deadline)  # type: ignore[arg-type]
        finally:
            RUN.reset(token)
        splice = head_splice(run, raw)  # from the chain replayed, before ``_keep`` replaces it
        self._keep(run, raw)
        self.reason = run.disabled
        unavailable = compiled.unavailable_reason
        withdrawn = unavailable if unavailable is not None else recorder.unknown
        return read_marks(
            raw, recorder.nonce, len(messages), withdrawn=withdrawn, deadline=deadline, splice=splice
        )

    def _keep(self, run: Run, raw: str) -> None:
        """Keep what this render used or rendered, and its loop's head as the next chain;
        forget what the last two renders did not touch once the store outgrows the
        conversation."""
        nonce, entries, touched = run.recorder.nonce, self.entries, self._touched
        self._generation += 1
        generation = self._generation
        touched.update(dict.fromkeys(run.used, generation))
        for op, end, entry in run.done:
            entry.parts = tuple(raw[op.start : end].split(nonce))
            entry.size = strings_bytes(entry.parts) + _ENTRY + _READ * _records(entry)
            kept = entries.setdefault(op.key, [])
            kept.insert(0, entry)
            self._entry_bytes += entry.size
            if len(kept) > 4:
                self._entry_bytes -= kept.pop().size
            touched[op.key] = generation
        self.chain = chain = next_chain(run, raw)
        self._chain_bytes = 0 if chain is None else _chain_bytes(chain)
        if len(entries) > 2 * run.slots + 16:
            for key in [k for k, g in touched.items() if g < generation - 1]:
                del touched[key]
                self._entry_bytes -= sum(e.size for e in entries.pop(key, ()))


def _records(entry: Entry) -> int:
    """The reads and writes ``entry`` records, as it keeps them (a read may sit in two tuples)."""
    return (
        len(entry.reads)
        + len(entry.writes)
        + len(entry.edge)
        + len(entry.volatile)
        + len(entry.namespace_reads)
    )


def _chain_bytes(chain: Chain) -> int:
    """The chain's texts, and per iteration its slots in the item, key and entry lists and
    its ints (steps, built, ends, plain ends)."""
    texts = held_bytes(chain.text) + held_bytes(chain.plain)
    return texts + len(chain.items) * 3 * SLOT + ints_bytes(4 * len(chain.items) + len(chain.events))
