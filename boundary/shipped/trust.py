"""Which template sources are trusted: exactly the shipped template files, by sha256.

Where it sits: loading, beside the registry it reads: ``boundary.render.template_run`` asks it, once
per compile, whether a source may run in ``boundary.render.sandbox.trusted.TrustedSandbox``.

A source is trusted when the sha256 of its UTF-8 bytes equals that of a file
``templates/<family>/<file>`` of the package's own data (hashed once, at first use) and the
family's ``family.toml`` records that same sha256 for a variant of that file: a file whose
bytes do not match its record, or a variant with no record, trusts nothing. Nothing else
counts: not where a source was read from, not its name, not a family — a shipped template with
one byte changed is untrusted, and a user's copy of a shipped file, byte for byte, is trusted.
"""

from __future__ import annotations

import hashlib
from functools import cache

from boundary.errors import TemplateLoadError
from boundary.family.registry import family_spec
from boundary.shipped.resources import data_dir


@cache
def _file_digests() -> dict[str, tuple[str, str]]:
    """sha256 (hex) -> (family, file name) of every ``templates/<family>/*.jinja`` file; read
    once (one entry per shipped template)."""
    try:
        root = data_dir("templates")
    except FileNotFoundError:
        return {}
    digests: dict[str, tuple[str, str]] = {}
    for path in sorted(root.glob("*/*.jinja")):
        try:
            digests[hashlib.sha256(path.read_bytes()).hexdigest()] = (path.parent.name, path.name)
        except OSError:
            continue
    return digests


def shipped_as(source: str) -> str | None:
    """``<family>/<file>`` of the shipped template ``source`` is byte for byte, or None."""
    try:
        data = source.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: no file decodes to them
        return None
    digest = hashlib.sha256(data).hexdigest()
    found = _file_digests().get(digest)
    if found is None:
        return None
    family, file = found
    try:
        variants = family_spec(family).variants
    except TemplateLoadError:
        return None
    recorded = any(v.file == file and v.sha256 is not None and v.sha256.lower() == digest for v in variants)
    return f"{family}/{file}" if recorded else None
