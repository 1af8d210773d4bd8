"""Vocabulary files read only from the shipped bytes, verified by sha256.

Where it sits: below ``segments`` (tiktoken segments) and ``shipped_vocabularies`` (conversion,
the converted-vocabulary cache); it imports only ``errors``.

tiktoken's loader (``tiktoken.load.load_tiktoken_bpe``, which transformers' ``TikTokenConverter``
calls too) reads a copy cached under ``$TMPDIR/data-gym-cache/<sha1 of the path>`` (or
``TIKTOKEN_CACHE_DIR``) instead of the file it is given whenever one exists, with no check:
a planted copy there changes every id. Nothing here goes through it. A vocabulary file is read
from its own path, its sha256 compared with the one recorded beside it
(``vocabularies/<name>/vocabulary.toml``), and only then parsed; a mismatch is a
``TokenizerError``, never a silent use.

Derived files boundary caches on disk (converted vocabularies) are written with their sha256
beside them (``<file>.sha256``) and read back only when it matches (``read_cached``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from boundary.errors import TokenizerError


@dataclass(frozen=True, slots=True)
class RankFile:
    """A tiktoken rank file and the sha256 (hex) its bytes must have."""

    path: Path
    sha256: str

    def read(self) -> bytes:
        """The file's bytes, after checking them against ``sha256``."""
        return read_verified(self.path, self.sha256)

    def ranks(self) -> dict[bytes, int]:
        """The token -> rank map, parsed from the verified bytes as tiktoken parses them."""
        return parse_ranks(self.read(), location=str(self.path))


def read_verified(path: Path, sha256: str) -> bytes:
    """``path``'s bytes; ``TokenizerError`` unless their sha256 is ``sha256``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"cannot read the vocabulary file: {exc}", location=str(path)) from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256.lower():
        raise TokenizerError(
            f"sha256 {actual} is not the recorded {sha256}: the file is not the shipped one",
            location=str(path),
        )
    return data


def parse_ranks(data: bytes, *, location: str) -> dict[bytes, int]:
    """``base64(token) rank`` lines (tiktoken's format) as a token -> rank map."""
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise TokenizerError(f"line {number} is not `base64 rank`", location=location) from None
    return ranks


def read_cached(path: Path) -> bytes | None:
    """A cached derived file's bytes, or None when it is missing or its recorded sha256
    (``<path>.sha256``, written by ``write_cached``) is missing or does not match; a file that
    does not match is removed, so the caller rebuilds it."""
    record = _record(path)
    try:
        data = path.read_bytes()
        expected = record.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if hashlib.sha256(data).hexdigest() == expected:
        return data
    for stale in (path, record):
        stale.unlink(missing_ok=True)
    return None


def write_cached(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and its sha256 to ``<path>.sha256``, each atomically, the
    record last (a reader sees no record, or the one of the bytes beside it)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _replace(path, data)
    _replace(_record(path), hashlib.sha256(data).hexdigest().encode("ascii"))


def _record(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _replace(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


__all__ = ["RankFile", "parse_ranks", "read_cached", "read_verified", "write_cached"]
