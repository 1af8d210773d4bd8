"""Vocabularies load only from the shipped bytes: a planted copy in tiktoken's cache changes no
id, a rank file that is not the shipped one is refused, and a tampered converted-vocabulary
cache is rebuilt, never used."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import boundary
from boundary.shipped.resources import data_dir
from boundary.tokenize.rank_files import RankFile, read_cached, write_cached
from boundary.tokenize.shipped_vocabularies import (
    _converted_tiktoken,
    rank_source,
    vocabulary_names,
    vocabulary_spec,
)

TEXT = "hello world, hello again"
SWAPPED = (b"hello", b" world")  # two tokens of TEXT whose ranks the planted copies swap


def _tampered_ranks(path: Path) -> bytes:
    """``path``'s rank file with the ranks of the two ``SWAPPED`` tokens exchanged."""
    lines = path.read_bytes().splitlines()
    where = {base64.b64decode(line.split()[0]): i for i, line in enumerate(lines)}
    a, b = (where[token] for token in SWAPPED)
    rank_a, rank_b = lines[a].split()[1], lines[b].split()[1]
    lines[a] = lines[a].split()[0] + b" " + rank_b
    lines[b] = lines[b].split()[0] + b" " + rank_a
    return b"\n".join(lines) + b"\n"


# A fresh process (tiktoken and boundary cache what they load): plants the tampered copy where
# tiktoken's loader looks first, converts with an empty boundary cache, and reports the ids
# boundary gives along with what tiktoken's own loader now reads.
CHILD = textwrap.dedent(
    """
    import hashlib, json, os, sys
    from pathlib import Path
    from tiktoken.load import load_tiktoken_bpe
    from boundary import load_family
    from boundary.shipped.resources import data_dir

    rank_file, text, tampered = sys.argv[1], sys.argv[2], Path(sys.argv[3]).read_bytes()
    cache_key = hashlib.sha1(rank_file.encode()).hexdigest()
    for folder in (os.environ["TIKTOKEN_CACHE_DIR"], os.path.join(os.environ["TMPDIR"], "data-gym-cache")):
        os.makedirs(folder, exist_ok=True)
        Path(folder, cache_key).write_bytes(tampered)
    tok = load_family("qwen3").tokenizer
    planted = load_tiktoken_bpe(rank_file)
    print(json.dumps({
        "segments": tok.encode(text).ids,
        "tokenizers": tok.backend.encode(text, add_special_tokens=False).ids,
        "planted_ranks": [planted[b"hello"], planted[b" world"]],
    }))
    """
)


def test_a_planted_copy_in_tiktokens_cache_changes_no_id(tmp_path: Path) -> None:
    tok = boundary.load_family("qwen3").tokenizer
    expected = tok.backend.encode(TEXT, add_special_tokens=False).ids
    rank_file = data_dir("vocabularies") / "qwen3" / vocabulary_spec("qwen3").file
    tampered = tmp_path / "tampered.tiktoken"
    tampered.write_bytes(_tampered_ranks(rank_file))
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken-cache"),
        "TMPDIR": str(tmp_path),
        "BOUNDARY_CACHE_DIR": str(tmp_path / "boundary-cache"),  # empty: the conversion runs
    }
    env.pop("DATA_GYM_CACHE_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(rank_file), TEXT, str(tampered)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    source = rank_source("qwen3")
    assert source is not None
    ranks = source[0].ranks()
    assert got["planted_ranks"] == [ranks[b" world"], ranks[b"hello"]]  # tiktoken reads the plant
    assert got["segments"] == got["tokenizers"] == expected  # boundary does not


def test_a_rank_file_that_is_not_the_shipped_one_is_refused(tmp_path: Path) -> None:
    spec = vocabulary_spec("qwen3")
    tampered = tmp_path / spec.file
    tampered.write_bytes(_tampered_ranks(data_dir("vocabularies") / "qwen3" / spec.file))
    with pytest.raises(boundary.TokenizerError, match="not the shipped one"):
        RankFile(tampered, spec.sha256).ranks()


def test_every_shipped_vocabulary_matches_its_recorded_sha256() -> None:
    for name in vocabulary_names():
        spec = vocabulary_spec(name)
        data = (data_dir("vocabularies") / name / spec.file).read_bytes()
        assert hashlib.sha256(data).hexdigest() == spec.sha256, name


def test_a_tampered_converted_vocabulary_cache_is_rebuilt_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOUNDARY_CACHE_DIR", str(tmp_path))
    spec = vocabulary_spec("qwen3")
    expected = _converted_tiktoken(spec).encode(TEXT, add_special_tokens=False).ids
    (cached,) = (tmp_path / "vocabularies").glob("qwen3-*.json")
    original = cached.read_bytes()
    doc = json.loads(original)
    vocab = doc["model"]["vocab"]
    vocab["hello"], vocab["Ġworld"] = vocab["Ġworld"], vocab["hello"]
    cached.write_text(json.dumps(doc))  # the record beside it still names the original bytes
    assert read_cached(cached) is None  # refused (and removed) ...
    assert _converted_tiktoken(spec).encode(TEXT, add_special_tokens=False).ids == expected
    assert cached.read_bytes() == original  # ... and rebuilt
    assert read_cached(cached) == original


def test_a_cached_file_without_its_record_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / "derived.json"
    write_cached(path, b"{}")
    assert read_cached(path) == b"{}"
    path.with_name(path.name + ".sha256").unlink()
    assert read_cached(path) is None
