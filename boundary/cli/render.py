"""``boundary render``: render a conversation and show U_end / P_end in the prompt.

Where it sits: the top: it loads a family, renders one request and prints it.

    boundary render [--family NAME | --model DIR | --template FILE --tokenizer PATH] ...

The prompt with both boundaries marked and their table go to stdout (``boundary render >
prompt.txt``); with ``--json -`` stdout carries the JSON record alone and the prompt goes to
stderr. Errors are one line on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boundary.cli.options import add_family_arguments, family_source, refuse_overwriting, template_kwargs

if TYPE_CHECKING:
    from boundary.tokenize.rendering import Rendering

DEFAULT_FAMILY = "qwen3_5"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "render",
        help="render a conversation; show the prompt with U_end and P_end marked",
        description="Render a conversation (default: a shipped tau-bench airline conversation) with a "
        f"shipped family (default: {DEFAULT_FAMILY}), a local model directory (--model DIR) or a template "
        "file and tokenizer (--template FILE --tokenizer PATH) and show the prompt with U_end / P_end "
        "marked and their token offsets.",
    )
    add_family_arguments(p, default_family=DEFAULT_FAMILY)
    p.add_argument(
        "--variant",
        help="template variant, or a model directory's named template (default: the family's default)",
    )
    p.add_argument(
        "--target",
        help="whose request handling to reproduce: 'vllm-0.33' (default), 'transformers' (the "
        "installed version) or 'transformers-X.Y'",
    )
    p.add_argument(
        "--conversation",
        type=Path,
        help="JSON file: a list of messages, or an object with 'messages' (and 'tools')",
    )
    p.add_argument(
        "--template-kwargs",
        default="{}",
        help="JSON object of template kwargs, e.g. '{\"enable_thinking\": false}'",
    )
    p.add_argument(
        "--unit",
        type=int,
        action="append",
        help="prefix_match_unit(s) to materialize at (repeatable; default: 16, 64, 528)",
    )
    p.add_argument(
        "--context", type=int, default=600, help="characters of prompt shown before U_end (default 600)"
    )
    p.add_argument("--full", action="store_true", help="show the whole prompt")
    p.add_argument(
        "--json",
        dest="json_out",
        type=Path,
        help="also write the result as JSON to this path ('-' for stdout)",
    )


def _load(path: Path | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The conversation file: ``RequestError`` naming ``path:line:column`` (bad bytes or JSON)
    or ``path`` and the field (a value of the wrong shape)."""
    from boundary.json_file import read_json_file

    if path is None:
        from boundary.shipped.datasets import default_conversation

        return default_conversation(), None
    data = read_json_file(path)
    if isinstance(data, dict):
        return data.get("messages", []), data.get("tools")
    return data, None


def run(args: argparse.Namespace) -> int:
    """The marked prompt and the boundary table on stdout (stderr when ``--json -`` takes
    stdout); options are checked before anything is loaded or rendered."""
    from rich.console import Console

    from boundary.errors import RequestError
    from boundary.render.target import resolve_target

    units = args.unit or [16, 64, 528]
    if any(u < 1 for u in units):
        raise ValueError(f"--unit must be at least 1, got {min(units)}")
    if args.context < 0:
        raise ValueError(f"--context must be at least 0, got {args.context}")
    source = family_source(args, default_family=DEFAULT_FAMILY)
    refuse_overwriting({"conversation": args.conversation, **source.input_files()}, {"--json": args.json_out})
    kwargs = template_kwargs(args.template_kwargs)
    target = resolve_target(args.target)
    messages, tools = _load(args.conversation)
    fam = source.load(args.variant)
    try:
        r = fam.render(messages, tools=tools, target=target, **kwargs)
    except RequestError as exc:  # a field of the conversation file: name the file too
        if args.conversation is None or exc.location is None or exc.location.startswith("template"):
            raise
        raise RequestError(exc.detail, location=f"{args.conversation}: {exc.location}") from None
    json_on_stdout = str(args.json_out) == "-"
    out = Console(stderr=json_on_stdout, highlight=False, soft_wrap=True)
    out.print(_marked_prompt(r, args))
    out.print(_table(fam, r, args, len(messages), units))
    if r.u_end is not None:
        suffix = r.text[r.input_end.token_char :]  # the text those tokens decode to
        out.print(f"generation-only suffix: {r.p_end - r.u_end} tokens {suffix!r}")
    if args.json_out:
        text = json.dumps(_result(fam, r, args, units))
        if json_on_stdout:
            sys.stdout.write(text + "\n")
        else:
            args.json_out.write_text(text + "\n", encoding="utf-8")
    return 0


def _marked_prompt(r: Any, args: argparse.Namespace) -> Any:
    """The prompt (from ``--context`` characters before U_end) with U_end and P_end marked."""
    from rich.text import Text

    u_char = r.input_end.char if r.u_end is not None else None
    start = 0 if args.full or u_char is None else max(0, u_char - args.context)
    shown = Text()
    if start:
        shown.append(f"... [{start:,} chars above] ...\n", style="dim")
    if u_char is None:
        shown.append(r.text[start:])
    else:
        shown.append(r.text[start:u_char])
        shown.append(f"⟦U_end token {r.u_end}⟧", style="bold black on green")
        shown.append(r.text[u_char:], style="bold yellow")
    shown.append(f"⟦P_end token {r.p_end}⟧", style="bold black on cyan")
    return shown


def _table(fam: Any, r: Any, args: argparse.Namespace, n_messages: int, units: list[int]) -> Any:
    """U_end and P_end: char, token and materialized position for each unit."""
    from rich.table import Table

    table = Table(
        title=f"{fam.spec.display_name} ({args.variant or fam.default_variant}) — "
        f"{n_messages} messages, tokenizer: {fam.tokenizer.source}"
    )
    table.add_column("boundary")
    table.add_column("char", justify="right")
    table.add_column("token", justify="right")
    for unit in units:
        table.add_column(f"unit {unit}", justify="right")
    if r.u_end is None:
        table.add_row("U_end (input_end)", "-", f"unavailable: {r.input_end.reason}", *["-"] * len(units))
    else:
        note = " (token straddles it)" if r.input_end.straddled else ""
        table.add_row(
            "U_end (input_end)",
            f"{r.input_end.char:,}",
            f"{r.u_end:,}{note}",
            *[f"{_position(r, u, 'input_end'):,}" for u in units],
        )
    table.add_row(
        "P_end (prompt_end)",
        f"{len(r.text):,}",
        f"{r.p_end:,}",
        *[f"{_position(r, u, 'prompt_end'):,}" for u in units],
    )
    return table


def _result(fam: Any, r: Any, args: argparse.Namespace, units: list[int]) -> dict[str, Any]:
    """The ``--json`` record."""
    from boundary.render.target import resolve_target

    return {
        "family": fam.name,
        "variant": args.variant or fam.default_variant,
        "target": resolve_target(args.target).name,
        "tokenizer": fam.tokenizer.source,
        "p_end": r.p_end,
        "u_end": r.u_end,
        "input_end": {
            "status": r.input_end.status.value,
            "char": r.input_end.char,
            "token": r.input_end.token,
            "straddled": r.input_end.straddled,
            "reason": r.input_end.reason,
        },
        "checkpoints": {
            str(u): {
                "input_end": None if r.u_end is None else _position(r, u, "input_end"),
                "prompt_end": _position(r, u, "prompt_end"),
            }
            for u in units
        },
        "token_ids": r.token_ids,
    }


def _position(r: Rendering, unit: int, kind: str) -> int:
    """Where checkpoint ``kind`` of ``r`` materializes for ``unit`` (U_end known to be found)."""
    checkpoint = r.checkpoint(unit, kind)
    assert checkpoint is not None
    return checkpoint.position
