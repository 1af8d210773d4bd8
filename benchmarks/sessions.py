"""Per-request cost with sessions: transformers vs cold renders vs sessions (full and incremental).

Where it sits: outside the package, at the render and boundaries stages: a script nobody imports;
it times ``SessionCache.render`` (full and incremental template runs) against ``Family.render``
and transformers.

Five workloads, each request sent in conversation order:

- ``tau``: the tau-bench airline replay: every assistant turn of every trajectory is one
  request (the conversation before it, generation prompt on);
- ``tau-tools``: the same requests, each with the trajectories' tool schemas (inferred from
  their calls: ``boundary.shipped.datasets.tau_bench_airline_tools``);
- ``prose``: MT-bench's 80 two-turn conversations (GPT-4's reference answers where MT-bench
  ships them, seeded synthetic prose otherwise; ``boundary.experiment.workloads.mt_bench``):
  long user and assistant messages, few turns; one request before each assistant message;
- ``sharegpt``: 100 ShareGPT-like prose chats of 3-8 user turns (``mt_bench.sharegpt_like``), drawn
  at random from MT-bench's question turns, so that no conversation is one tuned to;
- ``long-agent``: the tau-bench trajectories chained into one agent conversation past 128k
  tokens, every request through one session, the requests just under 8k, 64k and 128k tokens
  timed against cold renders, transformers and the new text alone, beside two more floors that
  grow with the conversation: copying a list of the request's ids and keying its messages by
  exact content (``long_agent``).

For each request, side by side and interleaved (so machine load hits all paths alike), the
paths in an order shuffled from request to request and pass to pass (each path follows each
other path about equally often: whatever runs right after transformers pays for its allocations),
in CPU time of this process (``time.process_time``; wall time, on a shared machine mostly
other people's load, is reported beside it); ``--repeat`` passes (default 5), each with fresh
sessions, and every figure the median of the passes' figures (means, ratios, bounds):

- transformers ``apply_chat_template(tokenize=True)`` (text + ids);
- boundary cold: ``fam.render`` (validation, text, ids, U_end);
- session, full: a ``Session(incremental=False)``: the template re-run over the whole
  history every turn, only the new text tokenized;
- session, incremental: the default ``Session``: unchanged message-loop iterations replayed
  (``boundary.session.incremental.store``; the loop's unchanged head as one chain, ``incremental_chain``);
- new text alone (a floor, not a path): the tokenizer encoding only the text after what this
  request shares with the previous one of its conversation, which any session must encode;
  transformers over it bounds what a session can reach on the workload;
- the template alone (a second floor): one Jinja run of the template over the request,
  nothing tokenized: transformers' own compiled template (``_compile_jinja_template``, the
  sandboxed environment transformers renders in) rendered with the arguments
  ``apply_chat_template`` passes it, without transformers' wrapper around it. A design that
  runs the template sandboxed once per request pays at least this much (ours adds its
  checks, the marks and the loop's replay), so transformers over it bounds such a design;
- the template unsandboxed (a third floor): the same run in a plain ``jinja2.Environment``
  with transformers' settings, extensions, filters and globals: the least any design pays
  that runs the template's Jinja at all, a trusted template included.

A last bound, "one-run bound ×", holds for any design that keeps nothing across
conversations: a conversation's first request has nothing earlier to reuse, so its template
runs in full at least once; and every request encodes its new text. Transformers' time over
the unsandboxed template on first requests plus the new text alone on every request is the
most such a design could reach, were all its other work free (the report also gives it with
the sandboxed run in place of the unsandboxed one).

Each path has its own segment cache (``boundary.tokenize.segment_cache``, the ids of long segments
kept across requests), empty at the start of each pass: a segment one path encoded never
serves another path, nor the next pass.

Mismatches are counted, not raised: each session's text, ids, U_end and P_end against the
cold render, and the cold render's ids against transformers'.

The heap is frozen after the warm-up pass (``gc.freeze``, as vLLM's API server does after its
start-up, ``vllm.utils.gc_utils.freeze_gc_heap``), so the collector's full passes over the
start-up objects (torch, transformers, the tokenizers) land on no path; ``--no-gc-freeze``
keeps them.

Instruction counts: ``--only PATH`` runs one path alone over the requests, untimed, for
``valgrind --tool=callgrind``; ``--only none`` runs the same setup without rendering, so the
difference of two totals is that path's instructions. The loop runs inside
``functools.reduce``, so ``--collect-atstart=no --toggle-collect=functools_reduce`` counts it
alone (the setup varies by tens of millions of instructions from run to run). With
``--messages LO-HI`` every request still runs, in order, but only those of LO-HI messages
run inside ``functools.reduce``: the count of one length bucket, e.g. a session request at
30–40 messages against one at 5–9.

Usage: python benchmarks/sessions.py [--family qwen3_5] [--trajectories 200]
       [--workloads tau,tau-tools,prose,sharegpt,long-agent]
       [--only none|cold|full|incremental [--messages LO-HI]]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import random
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import jinja2
from transformers.utils.chat_template_utils import _compile_jinja_template

import boundary
from boundary.experiment.workloads import mt_bench
from boundary.prefixes import common_prefix_length
from boundary.render.sandbox import RenderLimits
from boundary.request.identity import content_key
from boundary.session.session import Session
from boundary.shipped.datasets import tau_bench_airline, tau_bench_airline_tools
from boundary.tokenize.segment_cache import SegmentCache

clock = time.process_time
PATHS = (
    "transformers",
    "cold",
    "session full",
    "session incremental",
    "new text alone",
    "template alone",
    "template unsandboxed",
)
NEW_TEXT, SANDBOXED, UNSANDBOXED = (
    PATHS.index(p) for p in ("new text alone", "template alone", "template unsandboxed")
)
BUCKETS = [(1, 4), (5, 9), (10, 19), (20, 39), (40, 10**9)]
Row = tuple[int, bool, list[float]]  # (messages, opens its conversation, seconds per path)


Request = tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None]  # (conversation, messages, tools)


def _requests(workload: str, trajectories: int) -> Iterator[Request]:
    """(conversation id, request, tools) in conversation order: one request per assistant turn.
    ``tau`` and ``tau-tools`` are the same requests, the second with the trajectories' tool
    schemas (inferred from their calls) passed on every request."""
    tools = tau_bench_airline_tools() if workload == "tau-tools" else None
    if workload in ("tau", "tau-tools"):
        conversations = [(f"tau-{t}", traj) for t, traj in enumerate(tau_bench_airline()[:trajectories])]
    elif workload == "sharegpt":
        conversations = [(c.name, c.messages) for c in mt_bench.sharegpt_like(100)]
    elif workload == "prose":
        conversations = [(s.name, s.messages) for s in mt_bench.scripts()]
    else:
        raise SystemExit(f"unknown workload {workload!r} (tau, tau-tools, prose, sharegpt, long-agent)")
    for name, messages in conversations:
        for i, m in enumerate(messages):
            if m["role"] == "assistant":
                yield name, messages[:i], tools


def _ids(encoded: Any) -> list[int]:
    return list(encoded["input_ids"] if isinstance(encoded, dict) or hasattr(encoded, "keys") else encoded)


def segment_caches(fam: boundary.Family) -> Callable[[str], None]:
    """``use(path)`` gives the tokenizer the segment cache (``boundary.tokenize.segment_cache``) of
    ``path``, its own and empty at first: one path's encodings never serve another's (a
    deployment takes one path), nor one pass's the next."""
    segments = fam.tokenizer.segments
    caches = {path: SegmentCache() for path in (*PATHS, "reference")}

    def use(path: str) -> None:
        if segments is not None:
            segments.cache = caches[path]

    return use


def _unsandboxed(source: str, template: jinja2.Template) -> jinja2.Template:
    """``source`` compiled in a plain ``jinja2.Environment`` with the settings, extensions,
    filters and globals of the sandboxed one ``template`` (its compilation) was made in."""
    sandboxed = template.environment
    env = jinja2.Environment(
        trim_blocks=sandboxed.trim_blocks,
        lstrip_blocks=sandboxed.lstrip_blocks,
        extensions=[type(e) for e in sandboxed.extensions.values()],
    )
    env.filters.update(sandboxed.filters)
    env.globals.update(sandboxed.globals)
    return env.from_string(source)


def rotated(n: int, offset: int) -> list[int]:
    """Path indices ``0..n-1`` in the order of a shuffle seeded by ``offset``: over many
    offsets each path runs right after each other path about equally often, so no path always
    follows the one whose cost it would inherit (transformers, whose allocations the next path
    pays). A cyclic rotation would not do: path ``i + 1`` would follow path ``i`` every time
    but the one when ``i`` runs last."""
    order = list(range(n))
    random.Random(offset).shuffle(order)
    return order


def run(
    fam: boundary.Family,
    hf: Any,
    workload: str,
    trajectories: int,
    kwargs: dict[str, Any],
    offset: int = 0,
) -> dict[str, Any]:
    """One pass, the paths of each request in shuffled order (``rotated(..., offset + k)`` for
    the k-th request). Per request: (messages, whether it opens its conversation, CPU seconds
    per path), the same in wall seconds, and the mismatch counts."""
    rows: list[Row] = []
    wall_rows: list[Row] = []
    mismatches = {
        "session incremental vs cold": 0,
        "session full vs cold": 0,
        "cold ids vs transformers": 0,
        "template alone text vs cold": 0,
        "template unsandboxed text vs cold": 0,
    }
    template = _compile_jinja_template(hf.chat_template)
    unsandboxed = _unsandboxed(hf.chat_template, template)
    template_kwargs = {**hf.special_tokens_map, **kwargs}  # as ``apply_chat_template`` passes them
    sessions: dict[str, tuple[Session, Session]] = {}
    previous = ""  # the text of the conversation's previous request
    reused = rendered = chained = 0
    use = segment_caches(fam)
    for k, (name, request, tools) in enumerate(_requests(workload, trajectories)):
        first = name not in sessions
        if first:
            for _, incremental in sessions.values():
                reused += incremental.stats.reused_iterations
                rendered += incremental.stats.rendered_iterations
                chained += incremental.stats.chained_iterations
            sessions = {name: (Session(fam.renderer, incremental=False), Session(fam.renderer))}
            previous = ""
        full, incremental = sessions[name]
        prepared, prepared_tools = fam.prepare(request, tools)
        use("reference")  # untimed: the text the floors need, whichever path runs first
        text = fam.render(request, tools, **kwargs).text
        new_text = text[common_prefix_length(previous, text) :]
        previous = text
        arguments = {
            "messages": prepared,
            "tools": prepared_tools,
            "documents": None,
            "add_generation_prompt": True,
        }
        arguments |= template_kwargs
        steps: list[Callable[[], Any]] = [
            functools.partial(
                hf.apply_chat_template,
                prepared,
                tools=prepared_tools,
                add_generation_prompt=True,
                tokenize=True,
                **kwargs,
            ),
            functools.partial(fam.render, request, tools, **kwargs),
            functools.partial(full.render, request, tools, **kwargs),
            functools.partial(incremental.render, request, tools, **kwargs),
            functools.partial(fam.tokenizer.encode, new_text),
            functools.partial(template.render, **arguments),
            functools.partial(unsandboxed.render, **arguments),
        ]
        out: list[Any] = [None] * len(PATHS)
        cpu, wall = [0.0] * len(PATHS), [0.0] * len(PATHS)
        for path in rotated(len(PATHS), offset + k):
            use(PATHS[path])
            c0, w0 = clock(), time.perf_counter()
            out[path] = steps[path]()
            cpu[path], wall[path] = clock() - c0, time.perf_counter() - w0
        reference, cold, whole, warm, _, alone, bare = out
        same = (cold.text, cold.token_ids, cold.u_end, cold.p_end)
        mismatches["session incremental vs cold"] += (
            warm.text,
            warm.token_ids,
            warm.u_end,
            warm.p_end,
        ) != same
        mismatches["session full vs cold"] += (whole.text, whole.token_ids, whole.u_end, whole.p_end) != same
        mismatches["cold ids vs transformers"] += _ids(reference) != cold.token_ids
        mismatches["template alone text vs cold"] += alone != cold.text
        mismatches["template unsandboxed text vs cold"] += bare != cold.text
        rows.append((len(request), first, cpu))
        wall_rows.append((len(request), first, wall))
    for _, incremental in sessions.values():
        reused += incremental.stats.reused_iterations
        rendered += incremental.stats.rendered_iterations
        chained += incremental.stats.chained_iterations
    return {
        "rows": rows,
        "wall_rows": wall_rows,
        "mismatches": mismatches,
        "reused": reused,
        "rendered": rendered,
        "chained": chained,
    }


def only(
    fam: boundary.Family,
    path: str,
    workload: str,
    trajectories: int,
    kwargs: dict[str, Any],
    messages: tuple[int, int] | None = None,
) -> int:
    """Render every request down ``path`` alone (``none``: nothing); the number of requests
    counted. With ``messages`` (a range of request lengths) every request is still rendered,
    in order, but only those in the range inside ``functools.reduce``, so that
    ``--toggle-collect=functools_reduce`` counts them alone."""
    requests = list(_requests(workload, trajectories))
    sessions: dict[str, Session] = {}
    counted = 0
    for name, request, tools in requests:
        if path in ("full", "incremental") and name not in sessions:
            sessions = {name: Session(fam.renderer, incremental=path == "incremental")}

        session = sessions.get(name)

        def render(
            request: list[dict[str, Any]] = request,
            tools: list[dict[str, Any]] | None = tools,
            session: Session | None = session,
        ) -> None:
            if path == "cold":
                fam.render(request, tools, **kwargs)
            elif session is not None:
                session.render(request, tools, **kwargs)

        if messages is None:
            render()
            counted += 1
        elif messages[0] <= len(request) <= messages[1]:
            functools.reduce(lambda _, __: render(), [0], 0)
            counted += 1
        else:
            render()
    return counted


def _ms(xs: list[float]) -> str:
    return f"{statistics.mean(xs) * 1e3:.3f}"


def one_run_bound(rows: list[Row], template: int = UNSANDBOXED) -> float:
    """Transformers' time over the least that a design keeping nothing across conversations
    spends: the template (the run in column ``template``) on each conversation's first
    request, the new text alone on every request."""
    least = sum(t[template] for _, first, t in rows if first) + sum(t[NEW_TEXT] for _, _, t in rows)
    return sum(t[0] for _, _, t in rows) / least


def growth(rows: list[Row], path: int, beyond: int | None = None) -> float | None:
    """Mean cost of ``path`` at 30–40 messages over its mean at 5–9 (None: a bucket is empty);
    with ``beyond``, of what ``path`` costs more than that path."""

    def cost(t: list[float]) -> float:
        return t[path] - (t[beyond] if beyond is not None else 0.0)

    mid = [cost(t) for n, _, t in rows if 5 <= n <= 9]
    late = [cost(t) for n, _, t in rows if 30 <= n <= 40]
    return statistics.mean(late) / statistics.mean(mid) if mid and late else None


def first_request_cost(rows: list[Row], path: int) -> float:
    """``path``'s time over the cold render's on the requests that open their conversation (a
    session's first request, nothing earlier to reuse)."""
    cold = PATHS.index("cold")
    return sum(t[path] for _, first, t in rows if first) / sum(t[cold] for _, first, t in rows if first)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def report(workload: str, passes: list[dict[str, Any]]) -> None:
    """Each figure is the median over passes of that pass's figure (per-pass means, per-pass
    ratios): one slow or fast pass moves nothing."""
    rows_by_pass: list[list[Row]] = [p["rows"] for p in passes]
    n = len(rows_by_pass[0])
    print(
        f"\n### {workload}: {n} requests, {len(passes)} passes, paths shuffled per request; "
        "CPU ms/request, median of the passes' means (speed-up = transformers / path, median of "
        "the passes' ratios)\n"
    )
    print(
        "| messages | requests | "
        + " | ".join(PATHS)
        + " | cold × | session full × | session incremental × | bound × | template bound ×"
        + " | unsandboxed bound × | one-run bound × |"
    )
    print("|---|---:|" + "---:|" * (2 * len(PATHS)))
    for lo, hi in [*BUCKETS, (1, 10**9)]:
        sel = [[r for r in rows if lo <= r[0] <= hi] for rows in rows_by_pass]
        if not sel[0]:
            continue
        label = "all" if (lo, hi) == (1, 10**9) else (f"{lo}–{hi}" if hi < 10**9 else f"{lo}+")
        means, speed = [], []
        for k in range(len(PATHS)):
            means.append(statistics.median(statistics.mean(t[k] for _, _, t in s) for s in sel))
            if k:
                ratios = [sum(t[0] for _, _, t in s) / sum(t[k] for _, _, t in s) for s in sel]
                speed.append(f"{statistics.median(ratios):.1f}×")
        speed.append(f"{statistics.median(one_run_bound(s) for s in sel):.1f}×")
        print(
            f"| {label} | {len(sel[0])} | "
            + " | ".join(f"{m * 1e3:.3f}" for m in means)
            + " | "
            + " | ".join(speed)
            + " |"
        )
    for k, path in enumerate(PATHS):
        ratio = _median([growth(rows, k) for rows in rows_by_pass])
        if ratio is not None:
            print(f"\n{path}: a request at 30–40 messages costs {ratio:.2f}× one at 5–9", end="")
    sandboxed = statistics.median(one_run_bound(rows, SANDBOXED) for rows in rows_by_pass)
    print(
        f"\none-run bound with the template run sandboxed, as transformers runs it: {sandboxed:.1f}×", end=""
    )
    incremental = PATHS.index("session incremental")
    firsts = statistics.median(first_request_cost(rows, incremental) for rows in rows_by_pass)
    print(f"\na conversation's first request, session incremental over cold: {firsts:.2f}×", end="")
    beyond = _median([growth(rows, incremental, NEW_TEXT) for rows in rows_by_pass])
    if beyond is not None:
        print(f"\nsession incremental beyond the new text alone: {beyond:.2f}×", end="")
    wall = [
        statistics.median(
            sum(t[0] for _, _, t in p["wall_rows"]) / sum(t[k] for _, _, t in p["wall_rows"]) for p in passes
        )
        for k in range(1, len(PATHS))
    ]
    print(
        "\nwall-clock speed-ups (all requests): "
        + ", ".join(f"{path} {w:.1f}×" for path, w in zip(PATHS[1:], wall, strict=True))
    )
    mismatches = {key: sum(p["mismatches"][key] for p in passes) for key in passes[0]["mismatches"]}
    print(f"\nmismatches (all passes): {mismatches}")
    result = passes[0]
    total = result["reused"] + result["rendered"]
    if total:
        print(
            "message-loop iterations replayed by the incremental sessions: "
            f"{result['reused'] / total:.0%} of {total} "
            f"({result['chained'] / total:.0%} as the unchanged head of the loop, in one chain)"
        )


LONG_SIZES = (8_000, 64_000, 128_000)
LONG_PATHS = ("transformers", "cold", "session incremental", "new text alone", "ids copied", "messages keyed")
# floors, not paths: the new text encoded; copying a list of the request's ids (a session hands
# out a list of its own each request); the request's exact-content key (one pickle of it)
LONG_FLOORS = ("new text alone", "ids copied", "messages keyed")


def long_agent_conversation(fam: boundary.Family, tokens: int) -> list[dict[str, Any]]:
    """One agent conversation past ``tokens`` tokens: the tau-bench trajectories chained, the
    first one's system policy once, then every trajectory's turns (user, assistant, tool calls
    and results) one after another."""
    trajectories = tau_bench_airline()
    messages = [trajectories[0][0]]
    for trajectory in trajectories:
        messages += [m for m in trajectory if m["role"] != "system"]
        if len(fam.render(messages).token_ids) > tokens:
            return messages
    raise SystemExit(f"the tau-bench trajectories chained stay under {tokens} tokens")


def long_agent(fam: boundary.Family, hf: Any, kwargs: dict[str, Any], repeat: int, window: int = 10) -> None:
    """Per-request cost as an agent conversation grows to 128k tokens: every request (one per
    assistant turn) goes through one session in order, and the ``window`` requests just under
    each of ``LONG_SIZES`` tokens are also rendered cold, by transformers and as the new text
    alone, the paths shuffled per request; ``repeat`` passes with a fresh session each, every
    figure the median of the passes' means (CPU time). Beside them, the floors that grow with
    the conversation for any session that hands out a list of ids of its own and keys the
    messages by exact content (``LONG_FLOORS``), and what the session costs beyond them."""
    conversation = long_agent_conversation(fam, LONG_SIZES[-1])
    requests = [conversation[:i] for i, m in enumerate(conversation) if m["role"] == "assistant"]
    warm = Session(fam.renderer)
    sizes = [len(warm.render(r, **kwargs).token_ids) for r in requests]
    timed = {size: [k for k, n in enumerate(sizes) if n <= size][-window:] for size in LONG_SIZES}
    in_window = {k: size for size, ks in timed.items() for k in ks}
    cost: dict[tuple[int, str], list[float]] = {}
    for rep in range(repeat):
        session, previous = Session(fam.renderer), ""
        per: dict[tuple[int, str], list[float]] = {}
        for k, request in enumerate(requests):
            if k not in in_window:
                previous = session.render(request, **kwargs).text
                continue
            prepared, _ = fam.prepare(request)
            reference = fam.render(request, **kwargs)
            text, ids = reference.text, list(reference.token_ids)
            new_text = text[common_prefix_length(previous, text) :]
            previous = text
            steps = {
                "transformers": functools.partial(
                    hf.apply_chat_template, prepared, add_generation_prompt=True, tokenize=True, **kwargs
                ),
                "cold": functools.partial(fam.render, request, **kwargs),
                "session incremental": functools.partial(session.render, request, **kwargs),
                "new text alone": functools.partial(fam.tokenizer.encode, new_text),
                "ids copied": ids.copy,
                "messages keyed": functools.partial(content_key, request),
            }
            for i in rotated(len(LONG_PATHS), rep + k):
                c0 = clock()
                steps[LONG_PATHS[i]]()
                per.setdefault((in_window[k], LONG_PATHS[i]), []).append(clock() - c0)
        for key, values in per.items():
            cost.setdefault(key, []).append(statistics.mean(values))
    print(
        f"\n### long-agent: one tau-bench chain of {len(conversation)} messages, {len(requests)} requests "
        f"through one session; {window} requests timed at each size, {repeat} passes, CPU ms/request "
        "(median of the passes' means)\n"
    )
    print("| tokens (≤) | " + " | ".join(LONG_PATHS) + " | cold × | session × | session beyond the floors |")
    print("|---:|" + "---:|" * (len(LONG_PATHS) + 3))
    for size in LONG_SIZES:
        ms = {path: statistics.median(cost[(size, path)]) for path in LONG_PATHS}
        row = " | ".join(f"{ms[p] * 1e3:.2f}" for p in LONG_PATHS)
        cold, sess = ms["transformers"] / ms["cold"], ms["transformers"] / ms["session incremental"]
        beyond = ms["session incremental"] - sum(ms[p] for p in LONG_FLOORS)
        print(f"| {size} | {row} | {cold:.1f}× | {sess:.1f}× | {beyond * 1e3:.2f} |")
    for path in ("session incremental", *LONG_FLOORS):
        ratio = statistics.median(cost[(LONG_SIZES[-1], path)]) / statistics.median(
            cost[(LONG_SIZES[0], path)]
        )
        print(
            f"\n{path}: a request at {LONG_SIZES[-1]} tokens costs {ratio:.2f}× one at {LONG_SIZES[0]}",
            end="",
        )
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_5")
    ap.add_argument("--variant")
    ap.add_argument("--trajectories", type=int, default=200)
    ap.add_argument("--workloads", default="tau,tau-tools,prose,sharegpt,long-agent")
    ap.add_argument("--template-kwargs", default="{}")
    ap.add_argument(
        "--repeat", type=int, default=5, help="passes; each figure is the median of the passes' (default 5)"
    )
    ap.add_argument("--only", choices=["none", "cold", "full", "incremental"])
    ap.add_argument(
        "--messages", help="with --only: count only requests of LO-HI messages (e.g. 30-40); all still run"
    )
    ap.add_argument(
        "--no-gc-freeze", action="store_true", help="leave the start-up heap to the collector's full passes"
    )
    args = ap.parse_args()
    kwargs = json.loads(args.template_kwargs)
    if args.only:  # under valgrind a render runs far past the default max_seconds
        limits = RenderLimits(max_seconds=3600.0)
        fam = boundary.load_family(args.family, variant=args.variant, limits=limits)
        warm_up = [{"role": "user", "content": "warm up"}]  # compile outside the difference
        fam.render(warm_up)
        Session(fam.renderer).render(warm_up)
        if not args.no_gc_freeze:
            gc.collect()
            gc.freeze()
        bucket = tuple(int(x) for x in args.messages.split("-")) if args.messages else None
        for workload in args.workloads.split(","):
            if bucket is None:
                # inside functools.reduce: ``--collect-atstart=no --toggle-collect=functools_reduce``
                # counts the rendering loop alone, without the setup
                count = functools.reduce(
                    lambda _, __: only(fam, args.only, workload, args.trajectories, kwargs), [0], 0
                )
            else:
                count = only(fam, args.only, workload, args.trajectories, kwargs, (bucket[0], bucket[1]))
            print(workload, args.only, count, "requests")
        return
    fam = boundary.load_family(args.family, variant=args.variant)
    hf = fam.tokenizer.to_transformers(fam.template(args.variant))
    print(
        f"family {fam.name} ({args.variant or fam.default_variant}), kwargs {kwargs or '{}'}, "
        f"{args.trajectories} tau-bench trajectories"
    )
    for workload in args.workloads.split(","):
        if workload == "long-agent":
            long_agent(fam, hf, kwargs, args.repeat)
            continue
        run(fam, hf, workload, 1, kwargs)  # warm-up: compile, caches
        if not args.no_gc_freeze:
            gc.collect()
            gc.freeze()
        passes = [run(fam, hf, workload, args.trajectories, kwargs, offset=k) for k in range(args.repeat)]
        report(workload, passes)


if __name__ == "__main__":
    main()
