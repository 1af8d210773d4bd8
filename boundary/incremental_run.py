"""One render's side of an incremental template run: the hooks the rewritten template calls,
the trace of the iteration being rendered, and the replay of one that is unchanged.

Where it sits: inside the render stage, under ``boundary.incremental``, which sets ``RUN``
around each render and keeps the entries a ``Run`` records; the hooks are the filters named
in ``boundary.incremental_plan``.

Invariant: a replay is exactly what rendering the iteration would do, given that every read
in its trace gives the recorded value (``Run.value`` re-evaluates each): the same output
(marks re-issued under this render's nonce), the same namespace writes, the same recorder
state after it and the same counters charged.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import jinja2
from markupsafe import Markup

from boundary import incremental_rewrite as ip
from boundary.incremental_plan import Plan
from boundary.request.identity import content_key
from boundary.sandbox import Deadline

RUN: ContextVar[Run] = ContextVar("boundary_incremental_run")


class Store(Protocol):
    """What a ``Run`` reads and counts in the per-session store (``Incremental``)."""

    keys: Keys
    entries: dict[tuple[Any, ...], list[Entry]]
    reused: int
    rendered: int

    def outer_id(self, outer: tuple[Any, ...]) -> int: ...


# -- hooks (filters the template cannot name; see ``boundary.incremental_plan``) -------------
def _enter(_: int, loop: Any, item: Any, *values: Any) -> str:
    return RUN.get().enter(loop, item, values)


def _miss(_: int) -> bool:
    return RUN.get().missing


def _leave(_: int) -> str:
    return RUN.get().leave()


def _loop(value: Any, attr: str) -> Any:
    run = RUN.get()
    if run.open is not None:
        run.record(("loop", attr), value)
    return value


def _ns(value: Any, name: str, attr: str) -> Any:
    run = RUN.get()
    if run.open is not None and (name, attr) not in run.open.written:
        run.record(("ns", name, attr), value)
    return value


def _ns_write(value: Any, name: str, attr: str) -> Any:
    run = RUN.get()
    if run.open is not None:
        run.open.written[name, attr] = None
    return value


@jinja2.pass_environment
def _item(env: jinja2.Environment, seq: Any, name: str, index: Any) -> Any:
    value = env.getitem(seq, index)
    run = RUN.get()
    if run.open is not None:
        if type(index) in (int, str):
            run.record(("item", name, index), value)
        else:
            run.open.cacheable = False
    return value


def _length(seq: Any, name: str) -> int:
    value = len(seq)
    run = RUN.get()
    if run.open is not None:
        run.record(("len", name), value)
    return value


def _loop_all(loop: Any) -> Any:
    run = RUN.get()
    if run.open is not None:
        run.record_key(("loopall",))
    return loop


def _ns_all(ns: Any, name: str) -> Any:
    run = RUN.get()
    if run.open is not None:
        run.record_key(("nsall", name))
    return ns


def _seq_all(seq: Any, name: str) -> Any:
    run = RUN.get()
    if run.open is not None:
        run.record_key(("seqall", name))
    return seq


def _compare(result: Any, spec: tuple[Any, ...]) -> Any:
    run = RUN.get()
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
class Entry:
    """One way an iteration ran: what it read, what it left behind, what it printed."""

    reads: tuple[tuple[tuple[Any, ...], Any], ...]
    writes: tuple[tuple[str, str, Any], ...]
    recorder: tuple[bool, bool, str | None, tuple[Any, ...]]
    steps: int
    built: int
    parts: tuple[str, ...]  # its raw output, split where marks carried the nonce


@dataclass(slots=True)
class Open:
    """The iteration being rendered: where its output starts and what it read so far."""

    key: tuple[Any, ...]
    start: int
    steps: int
    room: int
    reads: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    written: dict[tuple[str, str], None] = field(default_factory=dict)
    cacheable: bool = True


class Keys:
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


class Counted:
    """The compiled template as ``template_run._run`` draws it, counting the characters drawn so
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


class Run:
    """One render's side of the hooks: the plan's values at the loop, the iteration open."""

    def __init__(
        self, store: Store, source: str, plan: Plan, recorder: Any, deadline: Deadline, out: Counted
    ) -> None:
        self.source = source  # part of every key: a session may switch templates
        self.store, self.plan, self.recorder, self.deadline, self.out = store, plan, recorder, deadline, out
        self.env = out.environment
        self.keys = store.keys
        self.open: Open | None = None
        self.missing = True
        self.outer: int | None = None
        self.disabled: str | None = None
        self.loop: Any = None
        self.ns: dict[str, Any] = {}
        self.seqs: dict[str, Any] = {}
        self.slots = 0  # iterations entered
        self.done: list[tuple[Open, int, Entry]] = []  # (iteration, where its output ends, entry)
        self.used: list[tuple[tuple[Any, ...], Entry]] = []

    def _begin(self, values: tuple[Any, ...]) -> None:
        plan = self.plan
        k, m = len(plan.namespaces), len(plan.sequences)
        self.ns = dict(zip(plan.namespaces, values[:k], strict=True))
        self.seqs = dict(zip(plan.sequences, values[k : k + m], strict=True))
        for name, ns in self.ns.items():
            if not isinstance(ns, jinja2.utils.Namespace):
                self.disabled = f"{name!r} is not a namespace when the message loop runs"
        env_globals = self.env.globals
        outer = tuple(
            ("global", name) if value is env_globals.get(name, self) else self.keys.of(value)
            for name, value in zip(plan.outer, values[k + m :], strict=True)
        )
        for name, key in zip(plan.outer, outer, strict=True):
            if key is None:
                self.disabled = f"{name!r} has a value with no exact key when the message loop runs"
        self.outer = self.store.outer_id((self.source, *outer))

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
        watch = rec._watch
        key = (
            item_key,
            self.outer,
            rec.decided,
            rec._pending,
            rec.unknown,
            tuple(map(id, watch)) if watch else (),
        )
        for entry in store.entries.get(key, ()):
            if self._fits(entry) and self._verified(entry):
                return self._replay(key, entry)
        self.open = Open(key, self.out.size, self.deadline._steps, self.deadline._room)
        return ""

    def _verified(self, entry: Entry) -> bool:
        value = self.value
        for desc, expected in entry.reads:  # noqa: SIM110  (no generator per replayed iteration)
            if value(desc) != expected:
                return False
        return True

    def _fits(self, entry: Entry) -> bool:
        d = self.deadline
        return d._steps + entry.steps <= d._max_steps and d._room - entry.built >= 0

    def _replay(self, key: tuple[Any, ...], entry: Entry) -> str:
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
        nonce: str = self.recorder.nonce
        return nonce.join(entry.parts)

    def leave(self) -> str:
        op, self.open = self.open, None
        if op is None or not op.cacheable:
            return ""
        writes = tuple((n, a, getattr(self.ns[n], a)) for n, a in op.written)
        if any(self.keys.of(v) is None for _, _, v in writes):
            return ""  # a value that could be shared mutable state (a cycler, a namespace)
        rec, d = self.recorder, self.deadline
        state = (rec.decided, rec._pending, rec.unknown, tuple(rec._watch))
        entry = Entry(tuple(op.reads.items()), writes, state, d._steps - op.steps, op.room - d._room, ())
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


FILTERS: dict[str, Any] = {
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
