"""One render's side of an incremental template run: the loop's items and position, the
trace of the iteration being rendered, and the replay of those that are unchanged.

Where it sits: inside the session stage, under ``boundary.session.incremental.store``, which keeps the
entries a ``Run`` records; the hooks of the rewritten template (``boundary.session.incremental.hooks``)
call the ``Run`` of the render in progress.

The message loop iterates ``Run.iterate``: before each item it replays, in Python, the run
of iterations from there that can be replayed, and yields them as one ``SKIPPED`` item
whose ``enter`` prints their output; the loop's body never reads jinja2's ``LoopContext``
(``loop.<attr>`` is ``Run.loop_attr``, jinja2's value at the run's position). A guarded
scan (``incremental_plan._guard``) iterates ``incremental_hooks._scan``, which ends it once
its guard is false.

Invariant: a replay is exactly what rendering the iteration would do, given that every read
in its trace gives the recorded value (``Run.value`` re-evaluates each): the same output
(marks re-issued under this render's nonce), the same namespace writes, the same recorder
state after it and the same counters charged, its loop step included; a skipped scan
iteration is charged its loop step too.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

import jinja2
from jinja2.runtime import LoopContext

from boundary.render.sandbox import Deadline
from boundary.session.incremental.chain import Chain, NamespaceRead, Read, replay_chain, split_reads
from boundary.session.incremental.keys import FALSE, TRUE, Keys
from boundary.session.incremental.plan import Plan


class Store(Protocol):
    """What a ``Run`` reads and counts in the per-session store (``Incremental``)."""

    keys: Keys
    entries: dict[tuple[Any, ...], list[Entry]]
    chain: Chain | None
    reused: int
    rendered: int
    scan_skipped: int
    chained: int

    def outer_id(self, outer: tuple[Any, ...]) -> int: ...


_OPERATORS = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "gteq": operator.ge,
    "lt": operator.lt,
    "lteq": operator.le,
}
_FAILED = object()  # a comparison that raised: equal to no recorded outcome
SKIPPED = object()  # the item the message loop yields for a run of replayed iterations


# -- the per-session store and one render's run -----------------------------------------------
@dataclass(slots=True)
class Entry:
    """One way an iteration ran: what it read, what it left behind, what it printed. Never
    changed once stored: ``parts`` is filled in when its render ends (``Incremental._keep``)."""

    reads: tuple[tuple[tuple[Any, ...], Any], ...]
    writes: tuple[tuple[str, str, Any], ...]
    recorder: tuple[bool, bool, str | None, tuple[Any, ...]]
    steps: int
    built: int
    parts: tuple[str, ...]  # its raw output, split where marks carried the nonce
    # the reads a chain replay checks (``incremental_chain.split_reads``)
    edge: tuple[Read, ...] = ()
    volatile: tuple[Read, ...] = ()
    namespace_reads: tuple[NamespaceRead, ...] = ()
    size: int = 0  # bytes held, counted with ``parts`` (``Incremental._keep``)


@dataclass(slots=True)
class Open:
    """The iteration being rendered: where its output starts and what it read so far."""

    key: tuple[Any, ...]
    start: int
    mark: int  # the length of its message mark, printed just before ``start``
    steps: int
    room: int
    reads: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    written: dict[tuple[str, str], None] = field(default_factory=dict)
    cacheable: bool = True


class Counted:
    """The compiled template as ``template_run._run`` draws it, counting the characters drawn so
    far: a hook reads where in the raw output it stands."""

    __slots__ = ("_template", "blocks", "environment", "globals", "name", "size")

    def __init__(self, template: jinja2.Template) -> None:
        self._template = template
        # what ``template_run.new_context`` reads of a template
        self.environment, self.globals = template.environment, template.globals
        self.name, self.blocks = template.name, template.blocks
        self.size = 0

    def root_render_func(self, context: Any) -> Any:
        for chunk in self._template.root_render_func(context):
            self.size += len(chunk)
            yield chunk


class Run:
    """One render's side of the hooks: the plan's values at the loop, the loop's items and
    position, the iteration open."""

    def __init__(
        self,
        store: Store,
        source: str,
        plan: Plan,
        messages: Sequence[Any],
        recorder: Any,
        deadline: Deadline,
        out: Counted,
    ) -> None:
        self.messages = messages
        self.source = source  # part of every key: a session may switch templates
        self.store, self.plan, self.recorder, self.deadline, self.out = store, plan, recorder, deadline, out
        self.env = out.environment
        self.keys = store.keys
        self.open: Open | None = None
        self.missing = True
        self.outer: int | None = None
        self.disabled: str | None = None
        self.items: list[Any] = []
        self.index = 0  # the loop's position: the iteration running, or being checked for replay
        self.skipped = ""  # the output of the run of replayed iterations the loop yields next
        self.ns: dict[str, Any] = {}
        self.seqs: dict[str, Any] = {}
        self.slots = 0  # iterations entered
        self.done: list[tuple[Open, int, Entry]] = []  # (iteration, where its output ends, entry)
        self.used: list[tuple[Any, ...]] = []  # the keys of the iterations replayed
        self.loops = 0  # times the message loop started
        self.start: tuple[Any, ...] = ()  # the recorder's state when it started
        self.start_namespace: dict[tuple[str, str], Any] = {}  # namespace keys when it started
        # per iteration, in order: its store key and entry (None: it left none)
        self.trail_keys: list[tuple[Any, ...] | None] = []
        self.trail_entries: list[Entry | None] = []
        # the loop's head for the next chain (``incremental_chain.next_chain``): whether the
        # loop iterates the messages, each its own object; the chain's output taken, and where
        # each of its iterations ends; per iteration after it, its output (or, rendered, where
        # it lies in the raw output)
        self.positional = False
        self.loop_start = 0  # where the loop's output starts in the raw output
        self.chained = 0
        self.head_text = ""
        self.head_ends: list[int] | None = None
        self.head_pieces: list[str | tuple[int, int] | None] = []

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
        self.loops += 1
        self.start = self._recorder_state()
        of = self.keys.of
        self.start_namespace = {
            (name, attr): of(value)
            for name, ns in self.ns.items()
            if isinstance(ns, jinja2.utils.Namespace)
            for attr, value in object.__getattribute__(ns, "_Namespace__attrs").items()
        }

    def _recorder_state(self) -> tuple[Any, ...]:
        rec = self.recorder
        watch = rec._watch
        return (rec.decided, rec._pending, rec.unknown, tuple(map(id, watch)) if watch else ())

    def iterate(self, seq: Any, values: tuple[Any, ...]) -> Iterator[Any]:
        """What the message loop iterates: its items in order, except that a run of
        iterations that can all be replayed is one ``SKIPPED`` item whose ``enter`` prints
        their output."""
        self.items = items = seq if type(seq) is list else list(seq)
        self.positional = items is self.messages and len(self.recorder._message_ids) == len(items)
        self.loop_start = self.out.size
        self._begin(values)
        return self._steps(items)

    def _steps(self, items: list[Any]) -> Iterator[Any]:
        i, n = 0, len(items)
        while i < n:
            self.index = i
            k = 0
            if self.disabled is None:
                printed: list[str] = []
                if i == 0 and self.loops == 1:
                    k = replay_chain(self, printed)
                k += self._replay_run(i + k, printed)
                if k:
                    self.skipped = "".join(printed)
                    self.slots += k
                    self.store.reused += k
                    self.deadline.check_time()
            if k:
                self.index = i + k - 1
                self.deadline._steps -= 1  # the loop's own step for SKIPPED charges it again
                yield SKIPPED
                i += k
            else:
                yield items[i]
                i += 1

    def _key(self, item: Any) -> tuple[Any, ...] | None:
        """The store key of an iteration over ``item`` in the recorder's present state (None: no
        exact key); ``_replay_run`` builds the same key inline."""
        item_key = self.keys.of(item)
        if item_key is None:
            return None
        return (item_key, self.outer, *self._recorder_state())

    def _replay_run(self, i: int, printed: list[str]) -> int:
        """Replay iterations ``i, i+1, ...`` while each can be: its key holds an entry whose
        cost (its loop step included) fits the limits and whose reads give the same values
        now; the count. The replay is what rendering the iteration would leave: the
        namespace writes, the recorder's state, the steps and sizes charged, the output (its
        message mark and marks re-issued under this render's nonce) added to ``printed``."""
        items, entries, d, rec = self.items, self.store.entries, self.deadline, self.recorder
        of, value, outer, ns, used = self.keys.of, self.value, self.outer, self.ns, self.used
        nonce, message, site = rec.nonce, rec.message, self.plan.site
        trail_keys, trail_entries, pieces = self.trail_keys, self.trail_entries, self.head_pieces
        j, n = i, len(items)
        while j < n:  # one pass per iteration, inlined: this loop is a long session's hot path
            self.index = j
            item = items[j]
            item_key = of(item)
            if item_key is None:
                break
            watch = rec._watch
            key = (
                item_key,
                outer,
                rec.decided,
                rec._pending,
                rec.unknown,
                tuple(map(id, watch)) if watch else (),
            )
            for entry in entries.get(key, ()):
                if d._steps + 1 + entry.steps > d._max_steps or d._room < entry.built:
                    continue
                for desc, expected in entry.reads:
                    if value(desc) != expected:
                        break
                else:
                    d._steps += 1 + entry.steps
                    d._room -= entry.built
                    for name, attr, written in entry.writes:
                        ns[name][attr] = written
                    rec.decided, rec._pending, rec.unknown, watch = entry.recorder
                    rec._watch = list(watch)
                    used.append(key)
                    trail_keys.append(key)
                    trail_entries.append(entry)
                    piece = message(site, item) + nonce.join(entry.parts)
                    printed.append(piece)
                    pieces.append(piece)
                    break
            else:
                break
            j += 1
        return j - i

    def enter(self, item: Any) -> str:
        if item is SKIPPED:
            self.missing = False
            printed, self.skipped = self.skipped, ""
            return printed
        self.missing = True
        self.slots += 1
        self.store.rendered += 1
        self.trail_keys.append(None)
        self.trail_entries.append(None)
        self.head_pieces.append(None)
        key = None if self.disabled is not None else self._key(item)
        if key is not None:
            mark = len(self.recorder.message(self.plan.site, item))
            self.open = Open(key, self.out.size, mark, self.deadline._steps, self.deadline._room)
        return ""

    def loop_attr(self, attr: str) -> Any:
        """``loop.<attr>`` of the message loop at ``index``, as jinja2's ``LoopContext`` gives
        it (``cycle`` and ``changed`` are refused by the plan)."""
        i, items = self.index, self.items
        n = len(items)
        if attr == "index0":
            return i
        if attr == "index":
            return i + 1
        if attr == "first":
            return i == 0
        if attr == "last":
            return i == n - 1
        if attr == "length":
            return n
        if attr == "revindex":
            return n - i
        if attr == "revindex0":
            return n - i - 1
        if attr == "previtem":
            return items[i - 1] if i else self.env.undefined("there is no previous item")
        if attr == "nextitem":
            return items[i + 1] if i < n - 1 else self.env.undefined("there is no next item")
        if attr == "depth":
            return 1
        if attr == "depth0":
            return 0
        raise AttributeError(attr)  # pragma: no cover  (the plan hooks only LOOP_ATTRS)

    def loop_context(self) -> LoopContext:
        """A jinja2 ``LoopContext`` standing where the message loop stands (for a probe that
        takes the loop as a whole)."""
        i, items = self.index, self.items
        context = LoopContext(islice(items, i + 1, None), self.env.undefined)
        context.index0 = i
        context._length = len(items)
        context._current = items[i]
        if i:
            context._before = items[i - 1]
        return context

    def leave(self) -> str:
        op, self.open = self.open, None
        if op is None or not op.cacheable:
            return ""
        writes = tuple((n, a, getattr(self.ns[n], a)) for n, a in op.written)
        if any(self.keys.of(v) is None for _, _, v in writes):
            return ""  # a value that could be shared mutable state (a cycler, a namespace)
        d = self.deadline
        reads = tuple(op.reads.items())
        edge, volatile, namespace_reads = split_reads(reads)
        rec = self.recorder
        state = (rec.decided, rec._pending, rec.unknown, tuple(rec._watch))
        entry = Entry(
            reads, writes, state, d._steps - op.steps, op.room - d._room, (), edge, volatile, namespace_reads
        )
        index = len(self.trail_keys) - 1
        self.trail_keys[index] = op.key
        self.trail_entries[index] = entry
        self.head_pieces[index] = (op.start - op.mark, self.out.size)
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
            return self.loop_attr(desc[1])
        if kind == "ns":
            return self.env.getattr(self.ns[desc[1]], desc[2])
        return len(self.seqs[desc[1]])

    def _outcome(self, spec: tuple[Any, ...]) -> Any:
        try:
            left = self.raw(spec[0])
            for op, leaf in spec[1:]:
                right = self.raw(leaf)
                if not _OPERATORS[op](left, right):
                    return FALSE
                left = right
        except Exception:
            return _FAILED
        return TRUE

    def value(self, desc: tuple[Any, ...]) -> Any:
        """The key of what the read ``desc`` gives now (the trace's reads, re-evaluated)."""
        kind, of = desc[0], self.keys.of
        if kind == "cmp":
            return self._outcome(desc[1])
        if kind == "loop":
            return of(self.loop_attr(desc[1]))
        if kind == "ns":
            return of(self.env.getattr(self.ns[desc[1]], desc[2]))
        if kind == "item":
            return of(self.env.getitem(self.seqs[desc[1]], desc[2]))
        if kind == "len":
            return of(len(self.seqs[desc[1]]))
        if kind == "loopall":
            attr = self.loop_attr
            return (self.index, len(self.items), of(attr("previtem")), of(attr("nextitem")))
        if kind == "nsall":
            return of(dict(object.__getattribute__(self.ns[desc[1]], "_Namespace__attrs")))
        return tuple(of(x) for x in self.seqs[desc[1]])  # seqall
