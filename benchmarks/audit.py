"""Audit throughput on tau-bench: boundary's audit vs rendering each turn twice with transformers.

Where it sits: outside the package, at the report end: a script nobody imports; it times
``boundary.audit.runner`` (the whole flow up to the audit's report) against transformers.

The trace is the tau-bench airline trajectories (one request per assistant turn, its output
the assistant message that follows, with seeded synthetic reasoning). In the same run:

- reference: per turn, ``apply_chat_template(tokenize=True)`` of the request and of the next
  request of its session (what a naive audit needs to compare ``prompt + generated`` with the
  next request), messages prepared beforehand;
- boundary: ``boundary.audit.runner.audit_requests`` over the whole trace (validation,
  rendering with U_end, the model's output written and read back, D_end settled against the
  next request with its cause, reuse of every earlier checkpoint, stability horizon).

Reported: turns per second for each, best of ``--repeat`` full passes, and the ratio. Each
pass starts with an empty segment cache (``boundary.tokenize.segment_cache``).

Usage: python benchmarks/audit.py [--family qwen3_5] [--trajectories 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time

import boundary
from boundary.audit.runner import AuditSettings, audit_requests
from boundary.tokenize.segment_cache import SegmentCache
from boundary.trace.records import sessions
from boundary.trace.tau_bench import tau_bench_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_5")
    ap.add_argument("--variant")
    ap.add_argument("--template-kwargs", default="{}")
    ap.add_argument("--trajectories", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    kwargs = json.loads(args.template_kwargs)

    fam = boundary.load_family(args.family, variant=args.variant)
    trace = tau_bench_trace(reasoning="seeded", trajectories=args.trajectories)
    hf = fam.tokenizer.to_transformers(fam.template(args.variant))
    pairs = []  # (request, next request of the session or None), prepared for the template
    for session in sessions(trace).values():
        prepared = [fam.prepare(r.messages, r.tools) for r in session]
        pairs += [(p, prepared[i + 1] if i + 1 < len(prepared) else None) for i, p in enumerate(prepared)]

    def reference() -> None:
        for (msgs, tools), nxt in pairs:
            hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=True, **kwargs)
            if nxt is not None:
                hf.apply_chat_template(
                    nxt[0], tools=nxt[1], add_generation_prompt=True, tokenize=True, **kwargs
                )

    settings = AuditSettings(variant=args.variant, template_kwargs=kwargs)

    def ours() -> None:
        if fam.tokenizer.segments is not None:  # no segment kept from the pass before
            fam.tokenizer.segments.cache = SegmentCache()
        audit_requests(fam, trace, settings)

    audit_requests(fam, trace[:50], settings)  # warm caches (compiled templates) on both sides
    for (msgs, tools), _ in pairs[:20]:
        hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=True, **kwargs)
    best = {"ref": float("inf"), "ours": float("inf")}
    for _ in range(args.repeat):
        for name, fn in (("ref", reference), ("ours", ours)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    n = len(trace)
    label = f"{fam.name} ({args.variant or fam.default_variant}), {kwargs or 'template defaults'}"
    print(
        f"{n} turns ({len(sessions(trace))} sessions) from {args.trajectories} tau-bench trajectories, "
        f"family {label}, best of {args.repeat}"
    )
    print("| path | turns/s | ms/turn |")
    print("|---|---:|---:|")
    print(
        f"| transformers: render + tokenize each turn and its next request | {n / best['ref']:,.1f} | "
        f"{best['ref'] / n * 1e3:.2f} |"
    )
    print(f"| boundary audit (full analysis) | {n / best['ours']:,.1f} | {best['ours'] / n * 1e3:.2f} |")
    print(f"ratio: {best['ref'] / best['ours']:.2f}x")


if __name__ == "__main__":
    main()
