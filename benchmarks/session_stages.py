"""Where a session request's time goes, stage by stage, at 5–9 messages against 30–40.

Where it sits: outside the package, at the render stage: a script nobody imports, beside
``benchmarks/sessions.py`` (whose requests it sends); it times the stages of
``Session.render``.

Runs the default (incremental) ``Session`` over tau-bench trajectories in conversation order,
as ``benchmarks/sessions.py`` does, and times each stage of a request with
``time.perf_counter`` around the function that does it, only while a request of the bucket
renders: validating and keying the messages (``Session._prepare``, of which finding the seen
ones is ``SeenPrefix.common``), the template run (``template_run._run``, of which the loop's
unchanged head is ``incremental_chain.replay_chain`` and the other replayed iterations
``Run._replay_run``), reading the marks, keeping the iterations for the next request
(``Incremental._keep``) and encoding (``Session._encode``). One warm-up pass, then one timed
pass; the heap frozen after the warm-up, as in ``sessions.py``; each pass starts with an empty
segment cache (``boundary.tokenize.segment_cache``). The stages nest, so they do
not add up to the total; the timer itself costs about 0.1 µs a stage.

Usage: python benchmarks/session_stages.py [--family qwen3_5] [--trajectories 60]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sessions import _requests  # type: ignore[import-not-found]

import boundary
from boundary.render import template_run
from boundary.request.identity import SeenPrefix
from boundary.session.incremental import run as incremental_run
from boundary.session.incremental import store as incremental
from boundary.session.incremental.run import Run
from boundary.session.session import Session
from boundary.tokenize.segment_cache import SegmentCache

BUCKETS = ((5, 9), (30, 40))
STAGES: list[tuple[Any, str, str]] = [
    (Session, "render", "the whole request (Session.render)"),
    (Session, "_prepare", "validating and keying the messages (Session._prepare)"),
    (SeenPrefix, "common", "  finding the messages seen before (SeenPrefix.common)"),
    (template_run, "_run", "the template run (template_run._run)"),
    (incremental_run, "replay_chain", "  the loop's unchanged head (incremental_chain.replay_chain)"),
    (Run, "_replay_run", "  other replayed iterations (Run._replay_run)"),
    (incremental, "read_marks", "reading the marks (marks.read_marks)"),
    (incremental.Incremental, "_keep", "keeping iterations and the chain (Incremental._keep)"),
    (Session, "_encode", "encoding the text (Session._encode)"),
]


def _timed(owner: Any, name: str, label: str, spent: dict[str, float], on: list[bool]) -> None:
    real: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        if not on[0]:
            return real(*args, **kwargs)
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - start

    setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_5")
    ap.add_argument("--trajectories", type=int, default=60)
    args = ap.parse_args()
    fam = boundary.load_family(args.family)
    requests = list(_requests("tau", args.trajectories))
    spent: dict[str, float] = defaultdict(float)
    on = [False]
    for owner, name, label in STAGES:
        _timed(owner, name, label, spent, on)

    def one_pass(bucket: tuple[int, int]) -> int:
        if fam.tokenizer.segments is not None:  # no segment seen in an earlier pass
            fam.tokenizer.segments.cache = SegmentCache()
        sessions: dict[str, Session] = {}
        counted = 0
        for name, request in requests:
            if name not in sessions:
                sessions = {name: Session(fam.renderer)}
            on[0] = bucket[0] <= len(request) <= bucket[1]
            sessions[name].render(request)
            counted += on[0]
        on[0] = False
        return counted

    one_pass((0, -1))  # warm-up: compile, caches
    gc.collect()
    gc.freeze()
    per_request: dict[tuple[int, int], dict[str, float]] = {}
    for bucket in BUCKETS:
        spent.clear()
        n = one_pass(bucket)
        per_request[bucket] = {label: seconds / n * 1e6 for label, seconds in spent.items()}
    low, high = (per_request[b] for b in BUCKETS)
    print(
        f"family {fam.name}, {args.trajectories} tau-bench trajectories; µs a request, incremental session\n"
    )
    print("| stage | 5–9 messages | 30–40 messages | grows by |\n|---|---:|---:|---:|")
    for _, _, label in STAGES:
        print(f"| {label.strip()} | {low[label]:.1f} | {high[label]:.1f} | {high[label] - low[label]:+.1f} |")


if __name__ == "__main__":
    main()
