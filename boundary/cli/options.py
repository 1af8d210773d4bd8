"""Option values shared by the commands.

Where it sits: the top, with the commands: option parsing only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


# Alike in shape to the request models' JSON-object check of tool-call arguments, by design: the
# two report in their own terms (an option's column here, a message field's char there).
def template_kwargs(text: str) -> dict[str, Any]:
    """``--template-kwargs``: a JSON object of template variables."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--template-kwargs: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"--template-kwargs: expected a JSON object, got {type(value).__name__}")
    return value


def refuse_overwriting(inputs: Mapping[str, Path | None], outputs: Mapping[str, Path | None]) -> None:
    """``ValueError`` naming the option and the file when an output option (``{"--json": path}``)
    names an input (``{"trace": path}``): the same file by ``os.path.samefile`` where both exist,
    else the same resolved path. Options not given and ``-`` are never compared. Called before
    anything is read or written, so a report never replaces what it was made from."""
    for flag, out in outputs.items():
        for what, given in inputs.items():
            if out is not None and given is not None and _same_file(given, out):
                raise ValueError(
                    f"{flag} {out}: the same file as the {what} ({given}); refusing to overwrite it"
                )


def _same_file(a: Path, b: Path) -> bool:
    if "-" in (str(a), str(b)):  # stdin or stdout
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them is not there (yet)
        return a.resolve() == b.resolve()
