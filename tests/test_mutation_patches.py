"""The broken-on-purpose patches of ``scripts/mutation-check`` still apply to this tree, so
the check in docs/testing.md can be rerun (a refactor that moves a patched line must update
its patch)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATCHES = sorted((ROOT / "scripts" / "mutations").glob("*.patch"))


@pytest.mark.skipif(
    not (ROOT / ".git").exists() or shutil.which("git") is None,
    reason="needs a git checkout of the repository",
)
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.stem)
def test_mutation_patch_applies(patch: Path) -> None:
    run = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_every_patch_is_named_in_the_check() -> None:
    script = (ROOT / "scripts" / "mutation-check").read_text()
    assert PATCHES
    for patch in PATCHES:
        assert f'"{patch.stem}"' in script, patch.stem
