"""The audit report as Markdown: the reuse table, causes, producer ages, horizon, what-ifs.

Where it sits: the end of the audit: it formats ``records`` for people; nothing reads it back.
"""

from __future__ import annotations

from boundary.audit.records import AuditReport, Summary

_LABELS = {
    "prompt_end": "P_end (`prompt_end`)",
    "input_end": "U_end (`input_end`)",
    "decode_end": "D_end (`decode_end`)",
}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def reuse_table(summary: Summary) -> list[str]:
    lines = ["| checkpoint | reused by the next request | mean tokens reused |", "|---|---:|---:|"]
    for kind, k in summary.kinds.items():
        lines.append(
            f"| {_LABELS[kind]} | {_pct(k.rate)} ({k.reached}/{k.eligible}) | {k.mean_reused_tokens:,.0f} |"
        )
    lines.append(f"| best of the turn's three | | {summary.mean_best_of_turn_tokens:,.0f} |")
    lines.append(f"| best earlier checkpoint of the session | | {summary.mean_reused_tokens:,.0f} |")
    return lines


def recorded_hits_line(summary: Summary) -> str:
    """The hits the production records carry; unknown ones counted apart, never as misses."""
    h = summary.recorded_hits
    assert h is not None
    share = f" ({_pct(h.hit_tokens / h.prompt_tokens)} of their prompt tokens)" if h.prompt_tokens else ""
    line = (
        f"Recorded hits: {h.reported} of {h.records} records report one, {h.hit_tokens:,} tokens{share}, "
        f"{h.misses} of them misses; {h.unknown} unknown"
    )
    if h.unknown:
        line += " (the server did not report cached tokens: start vLLM with --enable-prompt-tokens-details)"
    if h.absent:
        line += f"; {h.absent} without a hit recorded"
    return line + "."


def to_markdown(report: AuditReport, *, title: str | None = None) -> str:
    s = report.summary
    kwargs = ", ".join(f"{k}={v}" for k, v in report.template_kwargs.items()) or "template defaults"
    lines = [
        f"### {title or f'{report.family} ({report.variant})'}",
        "",
        f"Trace `{report.trace}`: {s.sessions} sessions, {s.turns} turns "
        f"({s.turns_with_next} with a next request), "
        f"mean prompt {s.mean_prompt_tokens:,.0f} tokens; {kwargs}; unit {report.unit}; tokenizer: "
        f"{'stand-in (ids are not the model’s)' if report.stand_in_tokenizer else report.tokenizer}.",
        "",
        *reuse_table(s),
        "",
    ]
    if s.causes or s.stop_token_rewritten:
        lines += ["| why D_end did not round-trip | turns |", "|---|---:|"]
        lines += [f"| {cause} | {n} |" for cause, n in s.causes.items()]
        if s.stop_token_rewritten:
            lines.append(
                f"| (stop token written differently; excluded from D_end, not a failure) | "
                f"{s.stop_token_rewritten} |"
            )
        lines.append("")
    ages = ", ".join(f"{age}: {n}" for age, n in s.producer_age.items())
    lines.append(f"Producer age of the best checkpoint (requests back): {ages}.")
    h = s.horizon
    lines.append(
        f"Stability horizon: predicted for {h.predicted} turns; held for {h.held} of the {h.checked} with a "
        f"later request ({_pct(h.rate)}); on average at {_pct(h.mean_position_share)} of the turn, "
        f"{h.mean_slack:,.1f} tokens short of what the later requests kept."
    )
    if s.output_problems:
        lines.append(f"Outputs not read back cleanly: {s.output_problems}.")
    if s.recorded_hits is not None:
        lines.append(recorded_hits_line(s))
    if report.what_if:
        lines += [
            "",
            "| what if | D_end reused | gain | mean tokens reused | gain |",
            "|---|---:|---:|---:|---:|",
        ]
        for w in report.what_if:
            if not w.applicable or w.summary is None:
                lines.append(f"| {w.name} | not applicable: {w.reason} | | | |")
                continue
            d = w.summary.kinds["decode_end"]
            lines.append(
                f"| {w.name} | {_pct(d.rate)} | {100 * (w.decode_end_rate_gain or 0):+.1f} pts | "
                f"{w.summary.mean_reused_tokens:,.0f} | {w.reused_tokens_gain or 0:+,.0f} |"
            )
    return "\n".join(lines) + "\n"
