"""The suite collects and runs with only boundary's base and test extras installed.

Users run ``pytest`` after ``pip install '.[test]'``: no vLLM, no torch, nor anything else only
the ``vllm`` extra (or ``integrations/vllm/cpu-test-requirements.txt``) brings. The test builds
that environment from the one it runs in: a directory linking only the distributions the base
and test requirements need (read from ``pyproject.toml``, followed through each distribution's
own requirements), put on the path of a Python started without its site-packages (``-S``).
Everything else installed here — vllm, torch, prometheus_client, ... — is then neither
importable nor visible to ``importlib.metadata``, as on a machine where it was never installed.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def base_and_test_distributions() -> tuple[dict[str, metadata.Distribution], set[str]]:
    """The installed distributions by name, and the names the base and test extras need."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    todo = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]]
    needed: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in needed or name not in installed:
            continue
        needed.add(name)
        extras = req.extras or {""}
        for spec in installed[name].requires or []:
            sub = Requirement(spec)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                todo.append(sub)
    return installed, needed


def top_levels(dist: metadata.Distribution) -> set[str]:
    """The entries a distribution puts directly into its site directory (its dist-info too)."""
    return {
        f.parts[0]
        for f in dist.files or []
        if f.parts[0] not in ("..", "__pycache__") and not f.parts[0].endswith(".pth")
    }


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[str]]:
    """Environment variables for a ``python -S`` that sees only the base and test extras, and
    the top-level modules of every other installed distribution (which it must not see)."""
    installed, needed = base_and_test_distributions()
    site = tmp_path_factory.mktemp("base-site")
    for name in needed - {"boundary"}:  # boundary itself comes from this checkout
        dist = installed[name]
        for top in top_levels(dist):
            link = site / top
            if not link.exists():
                link.symlink_to(Path(str(dist.locate_file(top))))
    hidden = sorted(
        {
            top.split(".")[0]
            for name, dist in installed.items()
            if name not in needed and name != "boundary"
            for top in top_levels(dist)
            if not top.endswith((".dist-info", ".egg-info")) and top.split(".")[0].isidentifier()
        }
    )
    path = os.pathsep.join([str(site), str(ROOT), str(ROOT / "integrations" / "vllm")])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    return {**env, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}, hidden


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_base_environment_has_none_of_what_only_the_vllm_extra_brings(
    base_env: tuple[dict[str, str], list[str]],
) -> None:
    env, hidden = base_env
    assert {"vllm", "torch", "prometheus_client"} <= set(hidden)
    probe = (
        "import importlib.util, importlib.metadata, sys\n"
        f"hidden = {hidden!r}\n"
        "print([m for m in hidden if importlib.util.find_spec(m) is not None])\n"
        "import jinja2, tokenizers, transformers, pydantic, tiktoken, pytest, hypothesis\n"
        "print(importlib.metadata.version('transformers'))\n"
    )
    done = run(env, "-c", probe)
    assert done.returncode == 0, done.stderr[-3000:]
    importable, version = done.stdout.splitlines()
    assert importable == "[]"
    assert version == metadata.version("transformers")


def test_the_whole_suite_collects_with_only_the_base_and_test_extras(
    base_env: tuple[dict[str, str], list[str]],
) -> None:
    env, _ = base_env
    done = run(env, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "error" not in out.splitlines()[-1].lower(), out[-4000:]
    assert "tests/test_render.py::" in out and "tests/test_template_fuzz.py::" in out


def test_tests_run_with_only_the_base_and_test_extras(base_env: tuple[dict[str, str], list[str]]) -> None:
    env, _ = base_env
    done = run(
        env,
        "-m",
        "pytest",
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "tests/test_prefixes.py",
        "tests/test_offsets.py",
        "tests/vllm/test_vllm_counters.py",
        "tests/vllm/test_vllm_scheduler.py",
        "tests/vllm/test_vllm_ledger.py",
        "tests/vllm/test_vllm_policy_rules.py",
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert any("prometheus_client is not installed" in line for line in skips), out[-4000:]
    assert any("vLLM is not installed" in line for line in skips), out[-4000:]
    # marked ``vllm`` (conftest skips it) and importing the plugin only inside its tests
    assert any("test_vllm_policy_rules.py" in line for line in skips), out[-4000:]
    assert " passed" in out.splitlines()[-1], out[-4000:]
