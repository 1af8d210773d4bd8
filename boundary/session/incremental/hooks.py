"""The hooks the rewritten template calls: the filters ``boundary.session.incremental.rewrite`` names,
each answered by the ``Run`` of the render in progress (``RUN``).

Where it sits: inside the session stage, between the rewritten template
(``boundary.session.incremental.plan``) and one render's run (``boundary.session.incremental.run``);
``boundary.session.incremental.store`` installs ``FILTERS`` and sets ``RUN`` around each render.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import jinja2
from jinja2.runtime import LoopContext

from boundary.session.incremental import rewrite as ip
from boundary.session.incremental.run import Run

RUN: ContextVar[Run] = ContextVar("boundary_incremental_run")


def _iter(seq: Any, *values: Any) -> Iterator[Any]:
    return RUN.get().iterate(seq, values)


@jinja2.pass_environment
def _scan(env: jinja2.Environment, seq: Any, ns: Any, attr: str) -> Iterator[Any]:
    """A guarded scan's items (``incremental_plan._guard``): yielded while ``ns.attr`` is true
    when the next iteration would start; then the steps of the iterations left are charged,
    as their loop steps would have been, and the loop ends."""
    items = seq if type(seq) is list else list(seq)
    for i, item in enumerate(items):
        try:
            stop = not env.getattr(ns, attr)
        except Exception:  # the template's own test raises it, the same way
            stop = False
        if stop:
            run = RUN.get()
            run.store.scan_skipped += len(items) - i
            d = run.deadline
            d._steps += len(items) - i
            if d._steps > d._max_steps:
                d._ticked()
            return
        yield item


def _enter(_: int, item: Any) -> str:
    return RUN.get().enter(item)


def _miss(_: int) -> bool:
    return RUN.get().missing


def _leave(_: int) -> str:
    return RUN.get().leave()


def _loop(_: int, attr: str) -> Any:
    run = RUN.get()
    value = run.loop_attr(attr)
    if run.open is not None:
        run.record(("loop", attr), value)
    return value


def _loop_value(_: int, attr: str) -> Any:
    return RUN.get().loop_attr(attr)


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


def _loop_all(_: int) -> LoopContext:
    run = RUN.get()
    if run.open is not None:
        run.record_key(("loopall",))
    return run.loop_context()


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


FILTERS: dict[str, Any] = {
    ip.ITER: _iter,
    ip.SCAN: _scan,
    ip.ENTER: _enter,
    ip.MISS: _miss,
    ip.LEAVE: _leave,
    ip.LOOP: _loop,
    ip.LOOP_VALUE: _loop_value,
    ip.NS: _ns,
    ip.NS_WRITE: _ns_write,
    ip.ITEM: _item,
    ip.LENGTH: _length,
    ip.LOOP_ALL: _loop_all,
    ip.NS_ALL: _ns_all,
    ip.SEQ_ALL: _seq_all,
    ip.COMPARE: _compare,
}
