"""Read a JSON file a user hands a command, with errors that name where it is bad.

Where it sits: at the edge, before requests: ``cli.render`` reads a conversation file with it,
``audit.regress`` the golden cases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from boundary.errors import RequestError


def read_json_file(path: Path) -> Any:
    """A JSON file's value; ``RequestError`` naming ``path`` (and ``line:column`` where the
    bytes or the JSON are bad)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RequestError(f"cannot read the file ({exc.strerror})", location=str(path)) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise RequestError(f"not UTF-8 (byte 0x{raw[exc.start]:02x})", location=f"{path}:{line}") from None
    except json.JSONDecodeError as exc:
        raise RequestError(f"not JSON ({exc.msg})", location=f"{path}:{exc.lineno}:{exc.colno}") from None
    except RecursionError:
        raise RequestError("not readable: JSON nested too deeply", location=str(path)) from None
