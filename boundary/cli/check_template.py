"""``boundary check-template``: hold a chat template to a corpus, for a template maintainer's CI.

Where it sits: the top: it loads a family, runs ``boundary.audit.template_check`` and writes
``boundary.audit.template_report``'s report.

    boundary check-template TEMPLATE --tokenizer PATH [--like NAME] [--previous FILE]
    boundary check-template --model DIR [--golden DIR [--update]] [--json PATH]
    boundary check-template --family qwen3_5 [--conversations FILE] [--no-builtin]

Exit status: 0 when nothing changed, 1 when a request's text, U_end or verdict changed against
``--previous`` or ``--golden``, or boundary's text or ids differ from transformers'; 2 on
bad input. Markdown goes to stdout (or ``--markdown``), a one-line summary to stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boundary.cli.options import FamilySource, add_family_arguments, family_source, refuse_overwriting
from boundary.cli.options import template_kwargs as parse_template_kwargs

if TYPE_CHECKING:
    from boundary.audit.template_check import TemplateCheck
    from boundary.audit.template_corpus import CorpusEntry
    from boundary.family.facade import Family


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check-template",
        help="check a chat template over a corpus: U_end, append-only history, round trips, changes",
        description="Render every request of a corpus (built in: tau-bench, BFCL, MT-bench and edge "
        "cases; plus --conversations) through a template and report per request kind whether U_end "
        "is FOUND (or UNAVAILABLE and why), whether history renders append-only, how each answer "
        "round-trips, and whether text and ids equal transformers'. Against --previous or --golden: "
        "every request whose text, U_end or verdict changed (exit 1).",
    )
    p.add_argument("template_file", nargs="?", type=Path, metavar="TEMPLATE", help="the template (Jinja)")
    add_family_arguments(p, default_family=None)
    p.add_argument("--variant", help="template variant, or a model directory's named template")
    p.add_argument("--template-kwargs", default="{}", help="JSON object of template kwargs")
    p.add_argument(
        "--target",
        help="whose request handling to reproduce: 'vllm-0.33' (default), 'transformers' or "
        "'transformers-X.Y'",
    )
    p.add_argument(
        "--conversations",
        type=Path,
        metavar="FILE",
        help="your conversations: a JSON list or JSONL, each a message list or an object with "
        "'messages' (and 'tools', 'name')",
    )
    p.add_argument("--no-builtin", action="store_true", help="leave the built-in corpus out")
    p.add_argument(
        "--previous",
        type=Path,
        metavar="FILE",
        help="the template's previous version (same tokenizer): report what changed",
    )
    p.add_argument(
        "--golden", type=Path, metavar="DIR", help="compare with the check stored in DIR (see --update)"
    )
    p.add_argument("--update", action="store_true", help="with --golden: store this check there")
    p.add_argument("--json", dest="json_out", type=Path, help="write the records and changes ('-': stdout)")
    p.add_argument("--markdown", type=Path, help="write the Markdown report here instead of stdout")


def run(args: argparse.Namespace) -> int:
    from boundary.audit.template_check import check
    from boundary.audit.template_corpus import builtin_corpus
    from boundary.audit.template_report import changes, markdown, records

    source = _source(args)
    kwargs = parse_template_kwargs(args.template_kwargs)
    if args.update and args.golden is None:
        raise ValueError("--update goes with --golden DIR")
    if args.no_builtin and args.conversations is None:
        raise ValueError("--no-builtin leaves nothing to check: give --conversations FILE")
    golden = None if args.golden is None else args.golden / f"{_slug(source.label)}.json"
    inputs = {**source.input_files(), "--previous": args.previous, "--conversations": args.conversations}
    refuse_overwriting(inputs, {"--json": args.json_out, "--markdown": args.markdown, "--golden": golden})
    if args.previous is not None and not args.previous.is_file():
        raise ValueError(f"--previous {args.previous}: no such file")
    corpus = ([] if args.no_builtin else builtin_corpus()) + (
        [] if args.conversations is None else read_conversations(args.conversations)
    )
    names = [e.name for e in corpus]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"--conversations: names given twice (or a built-in's): {', '.join(twice[:5])}")
    fam = source.load(args.variant)
    options: dict[str, Any] = {"variant": args.variant, "target": args.target, **kwargs}
    started = time.perf_counter()
    result = check(fam, corpus, compare_with_transformers=True, **options)
    elapsed = time.perf_counter() - started
    now = records(result)
    diffs = {}
    if args.previous is not None:
        previous = _previous(source, args.previous, args.variant)
        before = check(previous, corpus, compare_with_transformers=True, **options)
        diffs["previous template"] = changes(records(before), now)
    if golden is not None and not args.update:
        diffs["golden check"] = changes(_read_golden(golden), now)
    header = [
        f"{' '.join(source.flags())}; target {args.target or 'vllm-0.33'}; "
        f"{len(corpus)} conversations ({'your ' if args.no_builtin else 'built-in'}"
        f"{'' if args.conversations is None or args.no_builtin else ' + ' + str(args.conversations)}); "
        f"{len(result.requests)} requests checked in {elapsed:.1f} s.",
    ]
    target = args.target or "vllm-0.33"
    report = markdown(result, title=source.label, header=header, target=target, diffs=diffs)
    json_to_stdout = args.json_out is not None and str(args.json_out) == "-"
    _write(args.markdown, report, stderr=json_to_stdout)
    if args.json_out is not None:
        found = {k: [asdict(c) for c in v] for k, v in diffs.items()}
        _write(args.json_out, _json({"template": source.label, "records": now, "changes": found}))
    if golden is not None and args.update:
        golden.parent.mkdir(parents=True, exist_ok=True)
        _write(golden, _json({"template": source.label, "records": now}))
    changed = sum(len(v) for v in diffs.values())  # requests
    print(_summary(result, changed, elapsed), file=sys.stderr)
    return 1 if changed or result.target_mismatches else 0


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False)


def _source(args: argparse.Namespace) -> FamilySource:
    if args.template_file is not None:
        if args.template is not None:
            raise ValueError("TEMPLATE and --template: give the template once")
        args.template = args.template_file
    return family_source(args, default_family=None)


def _previous(source: FamilySource, previous: Path, variant: str | None) -> Family:
    """The previous version of the template, with the same tokenizer and conventions."""
    if source.template is not None:
        return FamilySource(template=previous, tokenizer=source.tokenizer, like=source.like).load(variant)
    from boundary.family.facade import Family

    fam = source.load(variant)
    replaced = fam.renderer.select_variant(variant, None)
    templates = {**fam.templates, replaced: previous.read_text(encoding="utf-8")}
    return Family(fam.spec, templates, fam.tokenizer, default_variant=fam.default_variant)


def read_conversations(path: Path) -> list[CorpusEntry]:
    """Conversations from a JSON document (one conversation, or a list of them) or JSONL (one
    a line): each a message list or an object with ``messages`` (and ``tools``, ``name``);
    ``ValueError`` naming the line or item."""
    from boundary.audit.template_corpus import CorpusEntry

    text = path.read_text(encoding="utf-8")
    try:  # one JSON document: a conversation, or a list of them
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list) and whole and all(isinstance(m, dict) and "role" in m for m in whole):
        items, where = [(1, list(whole))], "item"
    elif isinstance(whole, (list, dict)):
        listed: list[Any] = whole if isinstance(whole, list) else [whole]
        items, where = list(enumerate(listed, 1)), "item"
    else:
        items, where = [], "line"
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append((n, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
    out = []
    for n, item in items:
        entry = {"messages": item} if isinstance(item, list) else item
        if not isinstance(entry, dict) or not isinstance(entry.get("messages"), list):
            raise ValueError(f"{path}: {where} {n}: expected a message list or an object with 'messages'")
        tools = entry.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise ValueError(f"{path}: {where} {n}: 'tools' must be a list")
        out.append(CorpusEntry(str(entry.get("name") or f"{path.stem}-{n}"), entry["messages"], tools))
    return out


def _read_golden(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ValueError(f"--golden: no stored check at {path} (store one with --update)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError(f"--golden: {path} is not a stored check (no 'records' list)")
    return list(data["records"])


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label) or "template"


def _write(path: Path | None, text: str, *, stderr: bool = False) -> None:
    """``text`` to ``path``, or to stdout (stderr when stdout carries the JSON) for None / ``-``."""
    text = text if text.endswith("\n") else text + "\n"
    if path is None or str(path) == "-":
        (sys.stderr if stderr else sys.stdout).write(text)
    else:
        path.write_text(text, encoding="utf-8")


def _summary(result: TemplateCheck, changed: int, elapsed: float) -> str:
    follow_ups = sum(1 for r in result.requests if r.previous is not None)
    return (
        f"boundary check-template: {len(result.requests)} requests in {elapsed:.1f} s; "
        f"U_end unavailable {len(result.missing_u_end)}, render errors {len(result.errors)}; "
        f"{len(result.rewrites)} of {follow_ups} follow-ups rewrite history; "
        f"{len(result.target_mismatches)} differ from transformers; {changed} requests changed"
    )
