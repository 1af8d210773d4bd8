"""The code reads as a map: every module says where it sits in the flow, and none in the
packages is named like a test.

The flow is request -> render -> boundaries -> checkpoints -> engine | report; each module's
docstring has a ``Where it sits:`` paragraph placing it there and naming what calls it. That
holds for ``boundary/``, the vLLM plugin (``integrations/vllm/boundary_vllm/``, its GPU check
and example) and ``benchmarks/``.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

import boundary

PACKAGE = Path(boundary.__file__).resolve().parent
ROOT = PACKAGE.parent
PLUGIN = ROOT / "integrations" / "vllm"
MODULES = sorted(PACKAGE.rglob("*.py"))
PLUGIN_MODULES = sorted((PLUGIN / "boundary_vllm").rglob("*.py"))
SCRIPTS = sorted(
    [*(ROOT / "benchmarks").glob("*.py"), *PLUGIN.glob("*.py"), *(PLUGIN / "examples").glob("*.py")]
)
EVERY_MODULE = [*MODULES, *PLUGIN_MODULES, *SCRIPTS]


def test_the_package_has_modules_to_check() -> None:
    assert len(MODULES) > 50
    assert len(PLUGIN_MODULES) > 20
    assert {p.name for p in SCRIPTS} >= {"render.py", "engine.py", "gpu_check.py", "chat_client.py"}


@pytest.mark.parametrize("path", EVERY_MODULE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_docstring_says_where_it_sits(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc, "no module docstring"
    paragraphs = [p for p in doc.split("\n\n") if p.startswith("Where it sits: ")]
    assert len(paragraphs) == 1, "no 'Where it sits: ...' paragraph (or more than one)"
    assert len(paragraphs[0]) > len("Where it sits: ") + 20  # says something


def test_no_module_in_the_package_is_named_like_a_test_file() -> None:
    # pytest's default python_files: a module matching them is collected as a test file
    named_like_tests = [
        str(p.relative_to(ROOT))
        for p in [*MODULES, *PLUGIN_MODULES]
        if fnmatch.fnmatch(p.name, "test_*.py") or fnmatch.fnmatch(p.name, "*_test.py")
    ]
    assert named_like_tests == []
