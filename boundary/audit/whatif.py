"""What-if re-runs: a template option or a client habit that would make D_end round-trip,
measured by running the trace again with it.

Where it sits: after the audit runner, whose runs it repeats with one setting changed.

Template options come from the family's history rewrites (``unless`` kwargs that switch a
rewrite off, e.g. Qwen3.6 ``preserve_thinking``). Client habits rewrite the trace the way
such a client would have sent it: later requests carry the turn as the model wrote it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from boundary.audit.records import Summary, WhatIf
from boundary.audit.runner import AuditRun, AuditSettings, audit_requests, chat_messages
from boundary.errors import BoundaryError
from boundary.family.facade import Family
from boundary.trace.records import TraceRequest, sessions
from boundary.verify.roundtrip import ClientHabits


def trace_habits(requests: Sequence[TraceRequest]) -> ClientHabits:
    """The habits a trace shows: reasoning echoed when any history turn carries it."""
    echoed = any(
        m.get("role") == "assistant" and (m.get("reasoning_content") or m.get("reasoning"))
        for r in requests
        for m in r.messages or ()
    )
    return ClientHabits(echo_reasoning=echoed)


def with_turns_as_written(
    requests: Sequence[TraceRequest],
    parsed: dict[tuple[str, int], dict[str, Any]],
    *,
    reasoning: bool,
    arguments: bool,
) -> list[TraceRequest]:
    """The trace as a client that sends each turn back as parsed would have sent it:
    ``reasoning`` echoes ``reasoning_content``; ``arguments`` sends tool-call arguments as the
    JSON text the model wrote."""
    out: list[TraceRequest] = []
    for name, session in sessions(requests).items():
        if any(r.is_production for r in session):  # token ids as recorded: no client rewrites them
            out += session
            continue
        turns = [(len(chat_messages(r)), parsed.get((name, k))) for k, r in enumerate(session)]
        for j, request in enumerate(session):
            messages = [dict(m) for m in chat_messages(request)]
            for n, message in turns[:j]:
                if message is None or n >= len(messages) or messages[n].get("role") != "assistant":
                    continue
                messages[n] = _as_written(messages[n], message, reasoning=reasoning, arguments=arguments)
            out.append(request.model_copy(update={"messages": messages}))
    return out


def _as_written(
    sent: dict[str, Any], parsed: dict[str, Any], *, reasoning: bool, arguments: bool
) -> dict[str, Any]:
    message = dict(sent)
    if reasoning and parsed.get("reasoning_content"):
        message["reasoning_content"] = parsed["reasoning_content"]
    calls, written = message.get("tool_calls") or [], parsed.get("tool_calls") or []
    if arguments and len(calls) == len(written):
        message["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": w["function"]["arguments"]}}
            for c, w in zip(calls, written, strict=True)
        ]
    return message


def candidates(family: Family, settings: AuditSettings, run: AuditRun) -> list[WhatIf]:
    """The options and habits worth a re-run for this family and trace (none for a production
    trace: its token ids are replayed as recorded, no option or habit changes them)."""
    if run.production:
        return []
    out = _template_options(family, settings)
    reasoning = any(m.get("reasoning_content") for m in run.parsed.values())
    calls = any(m.get("tool_calls") for m in run.parsed.values())
    if reasoning and not settings.habits.echo_reasoning:
        out.append(
            WhatIf(
                name="echo reasoning_content",
                kind="client_habit",
                setting={"echo_reasoning": True},
                doc="the client sends each turn's reasoning_content back",
                applicable=True,
            )
        )
    if calls and settings.habits.arguments != "string":
        out.append(
            WhatIf(
                name="arguments as written",
                kind="client_habit",
                setting={"arguments": "string"},
                doc="the client sends tool-call arguments back as the JSON text the model wrote",
                applicable=True,
            )
        )
    if reasoning and not settings.habits.echo_reasoning:
        for option in [w for w in out if w.kind == "template_option"]:
            out.append(
                WhatIf(
                    name=f"{option.name} + echo reasoning_content",
                    kind="client_habit",
                    setting={**option.setting, "echo_reasoning": True},
                    doc=f"{option.doc}; and the client sends reasoning_content back",
                    applicable=True,
                )
            )
    if len([w for w in out if w.kind == "client_habit" and "arguments" in w.setting]) == 1 and reasoning:
        out.append(
            WhatIf(
                name="turn as written",
                kind="client_habit",
                setting={"echo_reasoning": True, "arguments": "string"},
                doc="the client sends the parsed turn back verbatim (reasoning and arguments)",
                applicable=True,
            )
        )
    return out


def _template_options(family: Family, settings: AuditSettings) -> list[WhatIf]:
    """The template kwargs that switch off one of the family's history rewrites (its
    ``unless`` column), each once, unless the run already sets it."""
    out: list[WhatIf] = []
    seen: set[tuple[str, Any]] = set()
    for rewrite in family.spec.history_rewrites:
        for key, value in rewrite.unless.items():
            if (key, value) in seen or settings.template_kwargs.get(key) == value:
                continue
            seen.add((key, value))
            out.append(
                WhatIf(
                    name=f"{key}={value}",
                    kind="template_option",
                    setting={key: value},
                    doc=f"switches off: {rewrite.doc}",
                    applicable=True,
                )
            )
    return out


def run_what_if(
    family: Family,
    requests: Sequence[TraceRequest],
    settings: AuditSettings,
    base: AuditRun,
    what_if: WhatIf,
    *,
    advance: Callable[[int], None] | None = None,
) -> WhatIf:
    """Re-run the audit with one option or habit and measure the gain over ``base``."""
    if what_if.kind == "template_option":
        changed = replace(settings, template_kwargs={**settings.template_kwargs, **what_if.setting})
        trace = list(requests)
    else:
        options = {k: v for k, v in what_if.setting.items() if k not in ("echo_reasoning", "arguments")}
        settings = replace(settings, template_kwargs={**settings.template_kwargs, **options})
        echo = bool(what_if.setting.get("echo_reasoning"))
        as_written = what_if.setting.get("arguments") == "string"
        habits = ClientHabits(
            echo_reasoning=echo or settings.habits.echo_reasoning,
            arguments="string" if as_written else settings.habits.arguments,
        )
        changed = replace(settings, habits=habits)
        trace = with_turns_as_written(requests, base.parsed, reasoning=echo, arguments=as_written)
    try:
        run = audit_requests(family, trace, changed, advance=advance)
    except BoundaryError as exc:
        return what_if.model_copy(
            update={"applicable": False, "reason": f"the template refuses it ({exc.detail})"}
        )
    return what_if.model_copy(
        update={
            "summary": run.summary,
            "decode_end_rate_gain": _gain(run.summary, base.summary, "rate"),
            "reused_tokens_gain": round(run.summary.mean_reused_tokens - base.summary.mean_reused_tokens, 3),
        }
    )


def _gain(new: Summary, old: Summary, field: str) -> float:
    gain: float = round(getattr(new.kinds["decode_end"], field) - getattr(old.kinds["decode_end"], field), 4)
    return gain
