"""pytest configuration; shared helpers live in tests/support.py.

Without vLLM installed the suite still collects and runs: tests marked ``vllm`` are skipped
with the reason, and modules that import vLLM at the top skip themselves
(``pytest.importorskip``). CI installs vLLM and runs them all.
"""

from __future__ import annotations

import importlib.util

import pytest

VLLM_MISSING = "vLLM 0.33.0 is not installed (scripts/test and CI install it)"


def _vllm_installed() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or no spec
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _vllm_installed():
        return
    skip = pytest.mark.skip(reason=VLLM_MISSING)
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(skip)
