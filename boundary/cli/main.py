"""``boundary`` entry point: dispatches to one module per command.

Where it sits: the top: it dispatches to the command modules.

Each command module defines ``add_parser(subparsers)`` and ``run(args) -> int`` and keeps
its heavy imports inside ``run``. Progress and tables go to stderr; machine-readable output
to stdout or ``--json``. Errors end with a one-line message and a non-zero exit, never a
traceback; an input flaw the command skips (``boundary.errors.InputWarning``) is one line on stderr
and the command goes on.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

COMMANDS = {
    "audit": "boundary.cli.audit",
    "check-template": "boundary.cli.check_template",
    "experiment": "boundary.cli.experiment",
    "render": "boundary.cli.render",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="boundary", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with _warnings_on_one_line(args.command):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from boundary.errors import BoundaryError

    try:
        return int(importlib.import_module(COMMANDS[args.command]).run(args) or 0)
    except BoundaryError as exc:
        print(f"boundary {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"boundary {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RecursionError:  # e.g. json.loads of an input file nested thousands of levels deep
        print(f"boundary {args.command}: error: input nested too deeply to read", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: one line; BOUNDARY_DEBUG=1 re-raises it
        if os.environ.get("BOUNDARY_DEBUG"):
            raise
        print(
            f"boundary {args.command}: internal error: {type(exc).__name__}: {exc} "
            "(BOUNDARY_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


@contextmanager
def _warnings_on_one_line(command: str) -> Iterator[None]:
    """While the command runs, each ``InputWarning`` is one line on stderr (``boundary audit:
    warning: trace.jsonl:9: ...``), every time; other warnings show as Python shows them."""
    from boundary.errors import InputWarning

    with warnings.catch_warnings():
        warnings.simplefilter("always", InputWarning)
        show = warnings.showwarning

        def one_line(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if issubclass(category, InputWarning):
                print(f"boundary {command}: warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        yield


if __name__ == "__main__":
    sys.exit(main())
