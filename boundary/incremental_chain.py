"""The head of the message loop that the last render ran, replayed as one chain.

Where it sits: inside the render stage, under ``boundary.incremental_run``: a ``Run`` takes the
chain the store kept from the previous render (``Chain``) before it replays iterations one by
one, and leaves the chain of its own render behind.

A session's next request usually repeats the previous one's messages and adds a few. When the
message loop starts in the state the previous render's loop started in (the same outer values,
the same recorder state) and its first items are the very objects the previous render iterated,
iteration ``j`` of that head reads what it read last time, except for two kinds of read:

- reads that look past the head (``loop.length``, ``loop.revindex*``, ``messages|length``,
  ``messages[i]``, the loop or a sequence as a whole): *volatile*, re-evaluated for every
  iteration that has one; ``loop.last`` and ``loop.nextitem`` look at the next item only, and
  are re-evaluated for the head's last iteration alone;
- reads of namespace state (``ns.attr``, a namespace as a whole, comparisons with either): their
  values follow from the namespace at the loop's start and the writes of the iterations before,
  which are the same entries; they are re-evaluated only for the attributes whose value at the
  loop's start changed.

Each iteration of the head is then replayed with the entry it was rendered or replayed with last
time, and charged the same steps and sizes, in order, as ``Run._replay_run`` charges them.

Invariant: a chain replay of iteration ``j`` happens only if replaying that entry one by one
would happen too: its key holds (same item object, outer values and recorder state) and every
read of its trace gives the recorded value now (the stable ones by the argument above, the rest
re-evaluated), and the limits admit it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# ``loop`` attributes whose value depends on the items after the current one: ``last`` and
# ``nextitem`` only on the next one (the *edge* reads), the rest on the loop's length.
_EDGE_LOOP_ATTRS = frozenset({"last", "nextitem"})
_LENGTH_LOOP_ATTRS = frozenset({"last", "length", "revindex", "revindex0", "nextitem"})
_VOLATILE_KINDS = frozenset({"item", "len", "seqall", "loopall"})

Read = tuple[tuple[Any, ...], Any]  # (the read's description, its recorded key)
# (the (namespace, attribute) pairs it rests on, its description, its recorded key)
NamespaceRead = tuple[tuple[tuple[str, str | None], ...], tuple[Any, ...], Any]


def _leaf_is_volatile(leaf: tuple[Any, ...]) -> bool:
    return (leaf[0] == "loop" and leaf[1] in _LENGTH_LOOP_ATTRS) or leaf[0] == "len"


def split_reads(
    reads: tuple[Read, ...],
) -> tuple[tuple[Read, ...], tuple[Read, ...], tuple[NamespaceRead, ...]]:
    """An iteration's reads that a chain replay must check: the edge reads (``loop.last``,
    ``loop.nextitem``: the same while the next item is the same object), the other volatile
    ones, and the namespace reads with the ``(namespace, attribute)`` pairs each rests on
    (attribute None: the namespace as a whole). Every other read depends on the iteration's
    position and the items before it alone."""
    edge: list[Read] = []
    volatile: list[Read] = []
    namespace: list[NamespaceRead] = []
    for desc, expected in reads:
        kind = desc[0]
        if kind == "loop":
            if desc[1] in _EDGE_LOOP_ATTRS:
                edge.append((desc, expected))
            elif desc[1] in _LENGTH_LOOP_ATTRS:
                volatile.append((desc, expected))
        elif kind in _VOLATILE_KINDS:
            volatile.append((desc, expected))
        elif kind == "ns":
            namespace.append((((desc[1], desc[2]),), desc, expected))
        elif kind == "nsall":
            namespace.append((((desc[1], None),), desc, expected))
        else:  # "cmp": its outcome, from its leaves
            leaves = [desc[1][0], *(leaf for _, leaf in desc[1][1:])]
            if any(_leaf_is_volatile(leaf) for leaf in leaves):
                volatile.append((desc, expected))
            else:
                on = tuple((leaf[1], leaf[2]) for leaf in leaves if leaf[0] == "ns")
                if on:
                    namespace.append((on, desc, expected))
    return tuple(edge), tuple(volatile), tuple(namespace)


@dataclass(frozen=True, slots=True)
class Chain:
    """The previous render's message loop, from its start up to its first iteration that left
    no entry: the state it started in, its items (the objects), and per iteration the store key
    and the entry it ran with. ``namespace`` holds the keys of every namespace attribute at the
    loop's start (a key None: no exact key, never taken as unchanged)."""

    source: str
    outer: int
    recorder: tuple[Any, ...]
    namespace: dict[tuple[str, str], Any]
    items: list[Any]
    keys: list[tuple[Any, ...]]
    entries: list[Any]

    def changed(self, now: dict[tuple[str, str], Any]) -> set[tuple[str, str | None]]:
        """The namespace attributes whose key at the loop's start differs from the chain's,
        each also as ``(namespace, None)``."""
        before = self.namespace
        if now == before and None not in now.values():
            return set()
        changed: set[tuple[str, str | None]] = set()
        for pair in now.keys() | before.keys():
            key = now.get(pair)
            if key is None or key != before.get(pair):
                changed.add(pair)
                changed.add((pair[0], None))
        return changed


def holds(run: Any, reads: tuple[Read, ...]) -> bool:
    """Whether each of ``reads`` gives its recorded key in ``run`` now."""
    value = run.value
    return all(value(desc) == expected for desc, expected in reads)


def namespace_holds(run: Any, reads: tuple[NamespaceRead, ...], changed: set[tuple[str, str | None]]) -> bool:
    """Whether each of ``reads`` resting on a changed start value gives its recorded key now."""
    value = run.value
    for on, desc, expected in reads:
        for pair in on:
            if pair in changed:
                if value(desc) != expected:
                    return False
                break
    return True


def replay_chain(run: Any, printed: list[str]) -> int:
    """Replay, in ``run`` (an ``incremental_run.Run``, which imports this module), the head
    of the loop that the previous render ran while its items are the same objects, each entry
    fits the limits and its volatile reads, and its namespace reads resting on a changed
    start value, give the recorded values now; the count. Leaves what ``Run._replay_run``
    leaves for the same iterations, the output added to ``printed``."""
    chain = run.store.chain
    if chain is None or chain.outer != run.outer or chain.source != run.source or chain.recorder != run.start:
        return 0
    changed = chain.changed(run.start_namespace)
    items, old, entries = run.items, chain.items, chain.entries
    n = min(len(items), len(old))
    same = 0
    while same < n and items[same] is old[same]:
        same += 1
    d, rec, ns = run.deadline, run.recorder, run.ns
    steps, room, max_steps = d._steps, d._room, d._max_steps
    nonce, message, site = rec.nonce, rec.message, run.plan.site
    j = 0
    while j < same:
        entry = entries[j]
        if steps + 1 + entry.steps > max_steps or room < entry.built:
            break
        if entry.volatile or (changed and entry.namespace_reads) or (entry.edge and j == same - 1):
            run.index = j
            if not (
                holds(run, entry.volatile)
                and (j < same - 1 or holds(run, entry.edge))
                and (not changed or namespace_holds(run, entry.namespace_reads, changed))
            ):
                break
        steps += 1 + entry.steps
        room -= entry.built
        for name, attr, written in entry.writes:
            ns[name][attr] = written
        printed.append(message(site, items[j]))
        printed.append(nonce.join(entry.parts))
        j += 1
    if j:
        run.store.chained += j
        d._steps, d._room = steps, room
        rec.decided, rec._pending, rec.unknown, watch = entries[j - 1].recorder
        rec._watch = list(watch)
        keys = chain.keys[:j]
        run.used += keys
        run.trail_keys += keys
        run.trail_entries += entries[:j]
    return j
