"""Where the shipped data lives: ``templates/``, ``vocabularies/`` and ``datasets/``.

Where it sits: loading, before the data flow: the registry and the tokenizer read shipped files
through it.

An installed wheel carries them under ``boundary/_data/``; a source checkout (editable
install) has them beside the package. Nothing here ever reads outside those two places.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # boundary/, from boundary/shipped/resources.py
_SOURCE_TREE = {
    "templates": _PACKAGE.parent / "templates",
    "vocabularies": _PACKAGE.parent / "vocabularies",
    "datasets": _PACKAGE.parent / "fixtures" / "datasets",
}


@cache
def data_dir(kind: str) -> Path:
    """The directory holding shipped ``kind`` data (one of the keys of ``_SOURCE_TREE``; cached,
    one path per kind)."""
    installed = _PACKAGE / "_data" / kind
    if installed.is_dir():
        return installed
    source = _SOURCE_TREE[kind]
    if source.is_dir():
        return source
    raise FileNotFoundError(f"boundary's {kind} data is missing (looked in {installed} and {source})")


def cache_dir() -> Path:
    """A per-user directory for derived files (converted vocabularies); ``BOUNDARY_CACHE_DIR`` overrides."""
    root = os.environ.get("BOUNDARY_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "boundary"
