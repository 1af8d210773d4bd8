"""The package reads as a map: every module says where it sits in the flow, and none is named
like a test.

The flow is request -> render -> boundaries -> checkpoints -> engine | report; each module's
docstring has a ``Where it sits:`` paragraph placing it there and naming what calls it.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

import boundary

PACKAGE = Path(boundary.__file__).resolve().parent
MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_has_modules_to_check() -> None:
    assert len(MODULES) > 50


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_every_module_docstring_says_where_it_sits(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc, "no module docstring"
    paragraphs = [p for p in doc.split("\n\n") if p.startswith("Where it sits: ")]
    assert len(paragraphs) == 1, "no 'Where it sits: ...' paragraph (or more than one)"
    assert len(paragraphs[0]) > len("Where it sits: ") + 20  # says something


def test_no_module_in_the_package_is_named_like_a_test_file() -> None:
    # pytest's default python_files: a module matching them is collected as a test file
    named_like_tests = [
        str(p.relative_to(PACKAGE.parent))
        for p in MODULES
        if fnmatch.fnmatch(p.name, "test_*.py") or fnmatch.fnmatch(p.name, "*_test.py")
    ]
    assert named_like_tests == []
