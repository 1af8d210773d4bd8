"""``boundary audit``: which of P_end / U_end / D_end each next request of a trace reuses, and why not.

Where it sits: the top: it reads a trace, runs ``boundary.audit`` and prints the report.

    boundary audit TRACE.jsonl --family qwen3_5 [--unit N] [--template-kwargs JSON]
                   [--json PATH] [--markdown PATH] [--plot PATH]
    boundary audit TRACE.jsonl --model DIR ...              (a local model directory)
    boundary audit TRACE.jsonl --template FILE --tokenizer PATH ...
    boundary audit --tau-bench [--reasoning seeded] --family qwen3_6 ...
    boundary audit --regress tests/golden [--update]

Markdown goes to stdout (or ``--markdown``), progress and a summary table to stderr.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from boundary.cli.options import add_family_arguments, family_source, refuse_overwriting, template_kwargs


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="audit a multi-turn trace: which checkpoints the next request reuses, and why D_end does not",
        description="Audit a JSONL trace (one OpenAI chat request per line: session, messages, tools, "
        "output) for a family (shipped, a local model directory or a template file with its tokenizer): "
        "per turn U_end / P_end / D_end and which of them the next request reuses; a "
        "summary with reuse rates, reused tokens, causes, producer ages, the stability horizon and what-if "
        "re-runs.",
    )
    p.add_argument(
        "trace", nargs="?", type=Path, help="JSONL trace, '-' for stdin (omit with --tau-bench or --regress)"
    )
    add_family_arguments(p, default_family=None)
    p.add_argument(
        "--variant",
        help="template variant, or a model directory's named template (default: the family's default)",
    )
    p.add_argument(
        "--unit", type=int, default=1, help="prefix_match_unit checkpoints materialize at (default 1)"
    )
    p.add_argument("--template-kwargs", default="{}", help="JSON object, e.g. '{\"enable_thinking\": false}'")
    p.add_argument("--now", help="pin the date date-stamped templates write (ISO, e.g. 2026-05-15)")
    p.add_argument(
        "--json", dest="json_out", type=Path, help="write per-turn records and the summary ('-': stdout)"
    )
    p.add_argument("--markdown", type=Path, help="write the Markdown report here instead of stdout")
    p.add_argument("--plot", type=Path, help="write a PNG plot of reuse per checkpoint kind")
    p.add_argument(
        "--no-what-if", action="store_true", help="skip the re-runs with template options / client habits"
    )
    tau = p.add_argument_group("tau-bench airline trajectories as the trace")
    tau.add_argument(
        "--tau-bench", action="store_true", help="use the shipped tau-bench airline trajectories"
    )
    tau.add_argument(
        "--reasoning",
        choices=["none", "seeded"],
        default="none",
        help="seeded: give every assistant turn synthetic reasoning (the data has none)",
    )
    tau.add_argument("--echo-reasoning", action="store_true", help="later requests send the reasoning back")
    tau.add_argument("--seed", type=int, default=0, help="seed of the synthetic reasoning (default 0)")
    tau.add_argument("--trajectories", type=int, help="use only the first N trajectories")
    tau.add_argument("--write-trace", type=Path, help="also write the converted trace as JSONL")
    reg = p.add_argument_group("template regression")
    reg.add_argument(
        "--regress",
        type=Path,
        metavar="GOLDEN",
        help="re-render the golden corpus in GOLDEN (<family>-<case>/ folders) and report drift",
    )
    reg.add_argument("--update", action="store_true", help="with --regress: rewrite the expected files")
    reg.add_argument(
        "--add-cases",
        type=Path,
        metavar="CONVERSATIONS",
        help="with --regress: create cases from a folder of conversation files for --family "
        "(or every shipped family)",
    )


def run(args: argparse.Namespace) -> int:
    """Markdown report on stdout (or ``--markdown``), progress and the summary table on stderr;
    options are checked before the trace is read."""
    if args.regress is not None:
        return _regress(args)
    source = family_source(args, default_family=None)
    if (args.trace is None) == (not args.tau_bench):
        raise ValueError("give a TRACE file or --tau-bench (one of them)")
    refuse_overwriting(
        {"trace": args.trace, **source.input_files()},
        {
            "--json": args.json_out,
            "--markdown": args.markdown,
            "--plot": args.plot,
            "--write-trace": args.write_trace,
        },
    )
    if args.unit < 1:
        raise ValueError(f"--unit must be at least 1, got {args.unit}")
    kwargs = template_kwargs(args.template_kwargs)
    now = _now(args.now)

    from rich.console import Console

    from boundary.audit.records import AuditReport
    from boundary.audit.runner import AuditSettings
    from boundary.audit.whatif import trace_habits

    err = Console(stderr=True, highlight=False)
    fam = source.load(args.variant)
    fam.render([{"role": "user", "content": "x"}], **kwargs)  # template kwargs are checked before the run
    requests, label = _requests(args)
    settings = AuditSettings(
        unit=args.unit, variant=args.variant, template_kwargs=kwargs, habits=trace_habits(requests), now=now
    )
    base, done = _audit(fam, requests, settings, err, what_if=not args.no_what_if)
    report = AuditReport(
        family=fam.name,
        variant=args.variant or fam.default_variant,
        tokenizer=fam.tokenizer.source,
        stand_in_tokenizer=fam.tokenizer.stand_in,
        unit=args.unit,
        template_kwargs=kwargs,
        habits={"echo_reasoning": settings.habits.echo_reasoning, "arguments": settings.habits.arguments},
        trace=label,
        summary=base.summary,
        what_if=done,
        turns=base.records,
    )
    _summary_table(err, report)
    _write(report, args)
    return 0


def _requests(args: argparse.Namespace) -> tuple[list[Any], str]:
    """The trace to audit (a file, or the shipped tau-bench trajectories) and its label."""
    from boundary.trace.reader import STDIN, read_trace
    from boundary.trace.tau_bench import tau_bench_trace
    from boundary.trace.writer import write_trace

    if not args.tau_bench:
        return read_trace(args.trace), "stdin" if str(args.trace) == STDIN else str(args.trace)
    requests = tau_bench_trace(
        reasoning=args.reasoning,
        echo_reasoning=args.echo_reasoning,
        seed=args.seed,
        trajectories=args.trajectories,
    )
    reasoning = "seeded synthetic reasoning" if args.reasoning == "seeded" else "no reasoning"
    if args.write_trace:
        write_trace(args.write_trace, requests)
    return (
        requests,
        f"tau-bench airline ({reasoning}{', echoed by the client' if args.echo_reasoning else ''})",
    )


def _audit(fam: Any, requests: list[Any], settings: Any, err: Any, *, what_if: bool) -> tuple[Any, list[Any]]:
    """The audit and its what-if re-runs, with progress bars on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from boundary.audit.runner import audit_requests
    from boundary.audit.whatif import candidates, run_what_if

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(f"auditing {fam.name}", total=len(requests))
        base = audit_requests(fam, requests, settings, advance=lambda n: progress.advance(task, n))
        done = []
        for w in candidates(fam, settings, base) if what_if else []:
            task = progress.add_task(f"what if: {w.name}", total=len(requests))
            done.append(
                run_what_if(fam, requests, settings, base, w, advance=partial(progress.advance, task))
            )
    return base, done


def _write(report: Any, args: argparse.Namespace) -> None:
    """The Markdown report, the plot and the JSON record where the options say."""
    from boundary.audit.markdown import to_markdown

    markdown = to_markdown(report)
    if args.markdown:
        args.markdown.write_text(markdown, encoding="utf-8")
    elif str(args.json_out) != "-":
        sys.stdout.write(markdown)
    if args.plot:
        from boundary.audit.plot import write_plot

        write_plot(report, args.plot)
    if args.json_out:
        text = report.model_dump_json()
        if str(args.json_out) == "-":
            sys.stdout.write(text + "\n")
        else:
            args.json_out.write_text(text + "\n", encoding="utf-8")


def _now(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--now: not an ISO date or time: {text!r}") from None


def _summary_table(err: Any, report: Any) -> None:
    from rich.table import Table

    s = report.summary
    table = Table(
        title=f"{report.family} ({report.variant}): {s.turns} turns, {s.turns_with_next} with a next request"
    )
    table.add_column("checkpoint")
    table.add_column("reused by next", justify="right")
    table.add_column("mean tokens reused", justify="right")
    for kind, k in s.kinds.items():
        table.add_row(kind, f"{100 * k.rate:.1f}%", f"{k.mean_reused_tokens:,.0f}")
    table.add_row("best earlier (any turn)", "", f"{s.mean_reused_tokens:,.0f}")
    err.print(table)
    if s.recorded_hits is not None:
        from boundary.audit.markdown import recorded_hits_line

        err.print(recorded_hits_line(s), markup=False)


def _regress(args: argparse.Namespace) -> int:
    """The golden corpus's cases are shipped families' (``<family>-<case>/``): only ``--family``
    narrows them; ``--model`` and ``--template`` are refused."""
    from boundary.audit.regress import add_cases, check_corpus, write_expected
    from boundary.family.facade import family_names, family_spec

    source = (
        family_source(args, default_family=None)
        if args.family or args.model or args.template or args.tokenizer
        else None
    )
    if source is not None and source.name is None:
        raise ValueError(
            f"--regress re-renders golden cases of shipped families; {source.flags()[0]} cannot be checked "
            "against them (use --family NAME, or none for every family)"
        )
    families = [args.family] if args.family else None
    if args.add_cases:
        names = families or [n for n in family_names() if family_spec(n).default_variant]
        made = add_cases(args.regress, args.add_cases, names)
        print(f"boundary audit: {made} new cases in {args.regress}", file=sys.stderr)
    if args.update or args.add_cases:
        written = write_expected(args.regress, families=families)
        print(f"boundary audit: wrote expected files for {written} cases in {args.regress}", file=sys.stderr)
        return 0
    checked, drifts = check_corpus(args.regress, families=families)
    for drift in drifts:
        print(f"drift: {drift}")
    verdict = f"{len(drifts)} drifts in {checked} cases" if drifts else f"no drift in {checked} cases"
    print(f"boundary audit --regress {args.regress}: {verdict}", file=sys.stderr)
    return 1 if drifts else 0
