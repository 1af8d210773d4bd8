"""Workloads: real conversations rendered with a family's real template into request streams.

Where it sits: the experiment's request stage: it feeds conversations through render and
boundaries into a stream; ``boundary.cli.experiment`` and ``benchmarks/replay.py`` call it.

    stream = build_stream("tau_bench", WorkloadOptions(family="qwen3_5", client="dropped"), cost)

Shipped: ``tau_bench`` (airline tool loops, one shared system policy), ``mt_bench`` (two-turn
chats), ``bfcl`` (multi-turn function calling, synthesised assistant turns and tool results),
``synthetic`` (token-level sessions for scale). Anything else is read as a trace file in the
audit's JSONL format (``-``: stdin). Rendered sessions are cached on disk (``BOUNDARY_CACHE_DIR``)
under a key of everything that shapes them; arrival times are assigned after loading: a trace's
recorded ``arrival_s`` by default (``arrivals.recorded``), else synthesised
(``arrivals.interleave``: shipped workloads, traces without times, or ``arrivals="synthesised"``);
the stream's provenance says which (``arrivals.source``) and why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import boundary
from boundary.experiment.arrivals import THINK_TIME_SECONDS, TOOL_LATENCY_SECONDS, interleave, recorded
from boundary.experiment.cost import PrefillCostModel
from boundary.experiment.stream import Stream, StreamRequest
from boundary.experiment.workloads import bfcl, mt_bench, synthetic, tau_bench
from boundary.experiment.workloads.rendering import native_output, render_session
from boundary.experiment.workloads.script import (
    ClientBehaviour,
    SessionScript,
    SystemPromptMode,
    with_own_system_prompt,
    with_reasoning,
)
from boundary.experiment.workloads.trace import render_trace
from boundary.shipped.resources import cache_dir
from boundary.trace.reader import STDIN, open_trace, read_trace
from boundary.trace.records import TraceRequest

SHIPPED = ("tau_bench", "mt_bench", "bfcl", "synthetic")


class WorkloadOptions(BaseModel):
    """How to turn a workload into requests. ``reasoning``: add seeded synthetic reasoning to
    every assistant turn when the template thinks (``enable_thinking`` not false);
    ``client``: whether the client sends that reasoning back in history; ``sessions``: use
    the first N sessions only; ``arrivals``: ``recorded`` replays a trace's own arrival times
    when every line has one (else they are synthesised, and the stream says so);
    ``synthesised`` always re-synthesises them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: str = "qwen3_5"
    variant: str | None = None
    template_kwargs: dict[str, Any] = Field(default_factory=dict)
    client: ClientBehaviour = "dropped"
    system_prompt: SystemPromptMode = "shared"
    reasoning: bool = True
    reasoning_words: tuple[int, int] = (40, 240)
    seed: int = 0
    sessions: int | None = Field(None, gt=0)
    bfcl_categories: tuple[str, ...] = ("base",)
    synthetic_sessions: int = Field(200, gt=0)
    synthetic_history: Literal["drop_before_last_user", "append_only"] = "drop_before_last_user"
    concurrency: float = Field(16.0, gt=0)
    arrivals: Literal["recorded", "synthesised"] = "recorded"


Progress = Callable[[str], None]


def _scripts(workload: str, options: WorkloadOptions) -> list[SessionScript]:
    if workload == "tau_bench":
        return tau_bench.scripts()
    if workload == "mt_bench":
        return mt_bench.scripts(options.seed)
    if workload == "bfcl":
        return bfcl.scripts(options.bfcl_categories, options.seed)
    raise ValueError(f"unknown workload {workload!r}")


def _thinks(fam: boundary.Family, options: WorkloadOptions) -> bool:
    if not fam.spec.reasoning_tags:
        return False
    declared = fam.spec.template_kwargs.get("enable_thinking")
    default = declared.default if declared is not None else True
    return options.template_kwargs.get("enable_thinking", default) is not False


def rendered_sessions(
    workload: str,
    options: WorkloadOptions,
    *,
    family: boundary.Family | None = None,
    use_cache: bool = True,
    progress: Progress | None = None,
    trace: list[TraceRequest] | None = None,
) -> Stream:
    """Every session's requests, rendered, with no arrival times (``rid`` -1). ``family``
    renders them in place of the shipped ``options.family`` (a model directory's, say; then
    ``options.family`` is its name). ``trace``: the requests of ``workload`` (a trace path or
    stdin) already read, as stdin must be when its header was wanted too; else they are read
    here."""
    say = progress or (lambda _msg: None)
    if workload == "synthetic":
        return _synthetic_stream(options)
    fam = family or boundary.load_family(options.family, variant=options.variant)
    formatter = native_output
    render = {"variant": options.variant, **options.template_kwargs}
    provenance: dict[str, Any] = {
        "workload": workload
        if workload in SHIPPED
        else ("stdin" if workload == STDIN else Path(workload).name),
        "output_source": "boundary.outputs.format_output",
        "template": fam.default_variant if options.variant is None else options.variant,
        "tokenizer": fam.tokenizer.source,
        "boundary_version": boundary.__version__,
        **options.model_dump(mode="json", exclude={"concurrency", "arrivals"}),
    }
    scripts: list[SessionScript] = []
    if workload not in SHIPPED:
        provenance["trace_sha"], trace = _trace_key(workload, trace)
    else:
        scripts = _shipped_scripts(workload, fam, options, provenance)
    # The cache key covers every input that shapes a rendered stream, not just the options.
    provenance["template_sha"] = _template_digest(fam, options.variant)
    provenance["tokenizer_sha"] = _tokenizer_digest(fam)
    provenance["code_sha"] = _code_digest()
    stream = Stream(provenance["workload"], provenance)
    cached = cache_dir() / "experiment" / f"{stream.key()}.jsonl"
    if use_cache and cached.is_file():
        say(f"rendered sessions from cache {cached}")
        return Stream.load(cached)
    if workload not in SHIPPED:
        lines = read_trace(workload) if trace is None else trace
        say(f"rendering {len(lines)} trace requests with {fam.name}")
        sessions = first_sessions(render_trace(fam, lines, render, formatter), options.sessions)
        stream.requests = [r for session in sessions.values() for r in session]
        provenance.update(_records_held(lines))  # saved with the stream; the key is the file's digest
    else:
        provenance["skipped_model_calls"] = _render_scripts(stream, fam, scripts, options, render, say)
    if use_cache:
        stream.save(cached)
    return stream


def _render_scripts(
    stream: Stream,
    fam: boundary.Family,
    scripts: list[SessionScript],
    options: WorkloadOptions,
    render: dict[str, Any],
    say: Progress,
) -> int:
    """Render every script's model calls into ``stream``; the calls skipped."""
    skipped = 0
    for k, script in enumerate(scripts):
        if k % 20 == 0:
            say(f"rendering session {k + 1}/{len(scripts)} with {fam.name}")
        result = render_session(
            fam,
            script,
            client=options.client,
            render=render,
            formatter=native_output,
            rewrite_head=options.system_prompt == "head_rewrite",
        )
        stream.requests.extend(result.requests)
        skipped += result.skipped
    return skipped


def first_sessions(
    sessions: dict[str, list[StreamRequest]], count: int | None
) -> dict[str, list[StreamRequest]]:
    """The first ``count`` sessions in the order the trace opens them (all: None), as
    ``--sessions`` takes them from every workload."""
    return sessions if count is None else dict(list(sessions.items())[:count])


def _synthetic_stream(options: WorkloadOptions) -> Stream:
    """The synthetic workload: token sessions made directly, nothing rendered or cached."""
    if options.system_prompt == "head_rewrite":
        raise ValueError("system_prompt head_rewrite needs a rendered workload, not synthetic")
    made = synthetic.sessions(
        options.synthetic_sessions,
        seed=options.seed,
        client=options.client,
        history=options.synthetic_history,
        shared_system=options.system_prompt == "shared",
    )
    requests = [r for session in list(made)[: options.sessions] for r in session]
    return Stream(
        "synthetic",
        {"workload": "synthetic", "output_source": "synthetic tokens", **options.model_dump(mode="json")},
        requests,
    )


def _shipped_scripts(
    workload: str, fam: boundary.Family, options: WorkloadOptions, provenance: dict[str, Any]
) -> list[SessionScript]:
    """A shipped workload's session scripts as the options shape them (first N sessions,
    synthetic reasoning, per-session system prompts); records what was synthesised and the
    scripts' digest in ``provenance``."""
    scripts = _scripts(workload, options)
    if options.sessions is not None:
        scripts = scripts[: options.sessions]
    synthesised = sorted({s for script in scripts for s in script.synthesised})
    if options.reasoning and _thinks(fam, options):
        scripts = [with_reasoning(s, options.seed, options.reasoning_words) for s in scripts]
        synthesised.append("reasoning")
    if options.system_prompt == "per_session":
        scripts = [with_own_system_prompt(s, options.seed) for s in scripts]
    provenance["synthesised"] = synthesised
    provenance["scripts_sha"] = _json_digest([[s.name, s.messages, s.tools] for s in scripts])
    return scripts


def build_stream(
    workload: str,
    options: WorkloadOptions,
    cost: PrefillCostModel,
    *,
    family: boundary.Family | None = None,
    use_cache: bool = True,
    progress: Progress | None = None,
    trace: list[TraceRequest] | None = None,
) -> Stream:
    """The workload as a stream in arrival order (``rid`` = position); ``family`` and ``trace``
    as for ``rendered_sessions``."""
    rendered = rendered_sessions(
        workload, options, family=family, use_cache=use_cache, progress=progress, trace=trace
    )
    sessions: dict[str, list[StreamRequest]] = {}
    for r in rendered.requests:
        sessions.setdefault(r.session, []).append(r)
    has_times = bool(rendered.requests) and all(r.recorded_arrival is not None for r in rendered.requests)
    timing: dict[str, Any] = {"decode_seconds_per_token": cost.decode_seconds_per_token}
    if has_times and options.arrivals == "recorded":
        schedule = recorded(list(sessions.values()), cost)
        requests = schedule.requests
        timing |= {
            "source": "recorded",
            "rule": "the trace's arrival_s from its earliest; a request whose session's previous "
            "request has not finished by then (uncontended) arrives at that finish, counted as delayed",
            "delayed_requests": schedule.delayed,
            "delay_seconds": schedule.delay_seconds,
        }
    else:
        requests = interleave(
            list(sessions.values()), cost, concurrency=options.concurrency, seed=options.seed
        )
        timing |= {
            "source": "synthesised",
            "why": "asked for with --synthesise-arrivals"
            if has_times
            else "the workload records no arrival times"
            if workload in SHIPPED
            else "the trace has no arrival_s",
            "session_starts": "Poisson, rate = concurrency / mean session duration (Little's law)",
            "tool_latency_mean_seconds": TOOL_LATENCY_SECONDS,
            "think_time_mean_seconds": THINK_TIME_SECONDS,
            "client_delays": "exponential",
        }
    provenance = {
        **rendered.provenance,
        "concurrency": options.concurrency,
        "arrival_model": cost.model.name,
        "arrivals": timing,
    }
    return Stream(rendered.name, provenance, requests)


def _records_held(lines: list[TraceRequest]) -> dict[str, Any]:
    """What a trace's lines hold, for the report: ``records`` (``production``, ``chat`` or
    ``production and chat``); for production records only, the output source says nothing
    was rendered."""
    production = sum(line.is_production for line in lines)
    if production == len(lines):
        return {
            "records": "production",
            "output_source": "the recorded token ids (production records: nothing rendered)",
        }
    return {"records": "chat" if production == 0 else "production and chat"}


def _trace_key(workload: str, requests: list[TraceRequest] | None) -> tuple[str, list[TraceRequest] | None]:
    """A trace file's digest, read in chunks; for stdin, which can be read only once, the
    digest of its requests (``requests`` when already read), and the requests."""
    digest = hashlib.sha256()
    if workload == STDIN:
        requests = read_trace(STDIN) if requests is None else requests
        for request in requests:
            digest.update(request.model_dump_json(exclude_none=True).encode() + b"\n")
        return digest.hexdigest()[:16], requests
    with open_trace(workload) as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:16], None


def _json_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _template_digest(fam: boundary.Family, variant: str | None) -> str:
    """The digest of every template a request may render with (``Renderer.select_variant``):
    ``variant`` when named; else the default and, where the family has one, ``tool_use``."""
    names = [variant or fam.default_variant]
    if variant is None and "tool_use" in fam.templates and names[0] != "tool_use":
        names.append("tool_use")
    digest = hashlib.sha256(fam.templates.get(names[0], "").encode())
    for name in names[1:]:
        digest.update(b"\0" + fam.templates[name].encode())
    return digest.hexdigest()[:16]


@cache
def _tokenizer_digest(fam: boundary.Family) -> str:
    return hashlib.sha256(fam.tokenizer.backend.to_str().encode()).hexdigest()[:16]


@cache
def _code_digest() -> str:
    """The boundary sources that render, format and verify a stream: a changed renderer,
    output format or verifier must not be served an old stream."""
    root = Path(boundary.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
