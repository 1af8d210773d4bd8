"""Import boundaries: boundary never imports vLLM; boundary_vllm refuses any vLLM but the pinned one."""

from __future__ import annotations

import subprocess
import sys

import pytest
from boundary_vllm.pin import VLLM_VERSION, VllmVersionError, check_vllm


def test_import_boundary_does_not_import_vllm():
    code = "import sys, boundary, boundary.cache, boundary.outputs; sys.exit('vllm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_frontend_side_does_not_import_vllm():
    code = "import sys, boundary_vllm, boundary_vllm.client; sys.exit('vllm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_another_vllm_version_is_refused_with_the_reason():
    with pytest.raises(VllmVersionError) as err:
        check_vllm("0.34.0", required=False)
    assert f"pinned to vllm=={VLLM_VERSION}" in str(err.value) and "found vllm==0.34.0" in str(err.value)


def test_a_missing_vllm_is_refused_only_where_the_engine_side_needs_it():
    check_vllm(None, required=False)
    with pytest.raises(VllmVersionError, match="not installed"):
        check_vllm(None, required=True)
    check_vllm(VLLM_VERSION, required=True)


def test_a_frontend_with_another_vllm_builds_requests_and_only_the_engine_side_refuses():
    code = (
        "import importlib.metadata as m; real = m.version; "
        "m.version = lambda name: '0.34.0' if name == 'vllm' else real(name); "
        "import boundary_vllm, boundary_vllm.client, boundary_vllm.hints\n"
        "try:\n    import boundary_vllm.scheduler\nexcept boundary_vllm.VllmVersionError as e:\n"
        "    print('refused:', e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "refused: boundary_vllm is pinned to vllm==0.33.0" in done.stdout
