"""The head of the message loop that the last render ran, replayed as one chain.

Where it sits: inside the session stage, under ``boundary.session.incremental.run``: a ``Run`` takes the
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

from bisect import bisect_right
from dataclasses import dataclass, field
from operator import is_
from typing import Any

from boundary.render.marks import CLOSE, Splice

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


@dataclass(slots=True)
class Chain:
    """The previous render's message loop, from its start up to its first iteration that left
    no entry: the state it started in, its items (the objects), and per iteration the store key
    and the entry it ran with. ``namespace`` holds the keys of every namespace attribute at the
    loop's start (a key None: no exact key, never taken as unchanged). ``steps[j]`` and
    ``built[j]`` are what iterations ``0..j`` cost, their loop steps included; ``events`` the
    iterations with writes or reads a chain replay checks. ``text`` is the head's raw output
    under ``nonce`` and ``ends[j]`` where iteration ``j``'s ends in it, kept only for a loop
    over the messages themselves, each a distinct object (so iteration ``j``'s message mark
    names message ``j``); else None. ``plain`` is what reading ``text``'s marks gives
    (``marks.Splice``)."""

    source: str
    outer: int
    recorder: tuple[Any, ...]
    namespace: dict[tuple[str, str], Any]
    items: list[Any]
    keys: list[tuple[Any, ...]]
    entries: list[Any]
    steps: list[int]
    built: list[int]
    events: list[int]
    nonce: str
    text: str | None
    ends: list[int]
    # the head's text without its marks and where each iteration ends in it (the next one
    # starts there); None unless ``text`` is kept and its only marks are the message marks
    plain: str | None = None
    plain_ends: list[int] = field(default_factory=list)

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


def is_event(entry: Any) -> bool:
    """Whether a chain replay must visit this iteration: it writes, or has reads to check."""
    return bool(entry.writes or entry.volatile or entry.namespace_reads)


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
    leaves for the same iterations, the output added to ``printed`` (and kept as
    ``run.head_text``)."""
    chain = run.store.chain
    if chain is None or chain.outer != run.outer or chain.source != run.source or chain.recorder != run.start:
        return 0
    items, entries = run.items, chain.entries
    same = list(map(is_, items, chain.items))
    p = same.index(False) if False in same else len(same)
    if p and entries[p - 1].edge:  # the one iteration whose next item may have changed
        run.index = p - 1
        if not holds(run, entries[p - 1].edge):
            p -= 1
    d, rec, ns = run.deadline, run.recorder, run.ns
    p = min(
        p, bisect_right(chain.steps, d._max_steps - d._steps, 0, p), bisect_right(chain.built, d._room, 0, p)
    )
    changed = chain.changed(run.start_namespace)
    for e in chain.events:
        if e >= p:
            break
        entry = entries[e]
        if entry.volatile or (changed and entry.namespace_reads):
            run.index = e
            if not (
                holds(run, entry.volatile)
                and (not changed or namespace_holds(run, entry.namespace_reads, changed))
            ):
                p = e
                break
        for name, attr, written in entry.writes:
            ns[name][attr] = written
    if not p:
        return 0
    if chain.text is not None and run.positional:
        text = chain.text[: chain.ends[p - 1]].replace(chain.nonce, rec.nonce)
        run.head_text, run.head_ends = text, chain.ends[:p]
        run.head_pieces += [None] * p  # their output is ``head_text``
    else:
        nonce, message, site = rec.nonce, rec.message, run.plan.site
        pieces = [message(site, items[j]) + nonce.join(entries[j].parts) for j in range(p)]
        text = "".join(pieces)
        run.head_pieces += pieces
    printed.append(text)
    run.chained = p
    run.store.chained += p
    d._steps += chain.steps[p - 1]
    d._room -= chain.built[p - 1]
    rec.decided, rec._pending, rec.unknown, watch = entries[p - 1].recorder
    rec._watch = list(watch)
    keys = chain.keys[:p]
    run.used += keys
    run.trail_keys += keys
    run.trail_entries += entries[:p]
    return p


def next_chain(run: Any, raw: str) -> Chain | None:
    """The chain ``run``'s render leaves: its loop from the start up to the first iteration
    that left no entry (``run.trail_entries``, with their parts filled in), its text taken
    from the chain it replayed and from the pieces of the iterations after."""
    if run.loops != 1 or run.disabled is not None or run.outer is None:
        return None
    keys, entries = run.trail_keys, run.trail_entries
    try:
        head = keys.index(None)
    except ValueError:
        head = len(keys)
    old, p = run.store.chain, run.chained
    if p:
        steps, built = old.steps[:p], old.built[:p]
        events = old.events[: bisect_right(old.events, p - 1)]
        total_steps, total_built = steps[-1], built[-1]
    else:
        steps, built, events, total_steps, total_built = [], [], [], 0, 0
    for j in range(p, head):
        entry = entries[j]
        total_steps += 1 + entry.steps
        total_built += entry.built
        steps.append(total_steps)
        built.append(total_built)
        if is_event(entry):
            events.append(j)
    text, ends, plain, plain_ends = _head_text(run, raw, head, old, p)
    return Chain(
        run.source,
        run.outer,
        run.start,
        run.start_namespace,
        run.items[:head],
        keys[:head],
        entries[:head],
        steps,
        built,
        events,
        run.recorder.nonce,
        text,
        ends,
        plain,
        plain_ends,
    )


def _head_text(
    run: Any, raw: str, head: int, old: Chain | None, p: int
) -> tuple[str | None, list[int], str | None, list[int]]:
    """The next chain's ``text``, ``ends``, ``plain`` and ``plain_ends``:
    the head taken from the chain replayed (its first ``p`` iterations), then the pieces of
    the iterations after it, up to ``head``."""
    text: str | None = None
    ends: list[int] = []
    plain: str | None = None
    plain_ends: list[int] = []
    if run.positional:
        first = p if run.head_ends is not None else 0  # the pieces before it: ``head_text``
        pieces = [run.head_text] if first else []
        ends = list(run.head_ends) if first else []
        at = ends[-1] if first else 0
        plain_pieces: list[str] | None = []
        if first and old is not None and old.plain is not None:
            plain_ends = old.plain_ends[:p]
            plain_pieces = [old.plain[: plain_ends[-1]]]
        elif first:
            plain_pieces = None
        plain_at = plain_ends[-1] if plain_ends else 0
        nonce, site = run.recorder.nonce, run.plan.site
        for j, piece in enumerate(run.head_pieces[first:head], start=first):
            piece = raw[piece[0] : piece[1]] if type(piece) is tuple else piece
            pieces.append(piece)
            at += len(piece)
            ends.append(at)
            if plain_pieces is not None:
                mark = f"{nonce}m{site}.{j}{CLOSE}"
                if piece.startswith(mark) and piece.find(nonce, len(mark)) < 0:
                    plain_pieces.append(piece[len(mark) :])
                    plain_at += len(piece) - len(mark)
                    plain_ends.append(plain_at)
                else:  # a mark of another kind inside: the head is read mark by mark
                    plain_pieces = None
        text = "".join(pieces)
        if plain_pieces is not None:
            plain = "".join(plain_pieces)
        else:
            plain_ends = []
    return text, ends, plain, plain_ends


def head_splice(run: Any, raw: str) -> Splice | None:
    """The stretch of ``raw`` that ``run``'s chain printed, as read before (``marks.Splice``),
    when its text without marks is known: then reading the marks skips it."""
    chain, p = run.store.chain, run.chained
    if not p or run.head_ends is None or chain is None or chain.plain is None:
        return None
    if not raw.startswith(run.head_text, run.loop_start):
        return None  # pragma: no cover  (the head is printed where the loop starts)
    return Splice(
        run.loop_start,
        len(run.head_text),
        chain.plain[: chain.plain_ends[p - 1]],
        f"m{run.plan.site}",
        [0, *chain.plain_ends[: p - 1]],
    )
