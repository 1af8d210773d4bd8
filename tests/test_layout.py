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
import importlib
import re
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


LAYOUT = ROOT / "docs" / "layout.md"
TOP_LEVEL_LIMIT = 10


def _layout_rows() -> dict[str, str]:
    """``docs/layout.md``'s table rows by the path in their first cell."""
    rows = {}
    for line in LAYOUT.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and cells[0].startswith("`"):
            rows[cells[0].split("`")[1]] = line
    return rows


def test_the_top_level_keeps_at_most_ten_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_LIMIT, top


def test_the_layout_page_names_every_package_and_module() -> None:
    rows = _layout_rows()
    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = init.parent
        if package == PACKAGE:
            continue
        key = f"{package.relative_to(ROOT).as_posix()}/"
        if key not in rows:
            missing.append(key)
            continue
        for module in sorted(package.glob("*.py")):
            if module.name != "__init__.py" and f"`{module.stem}`" not in rows[key]:
                missing.append(f"{key}{module.name}")
    for module in sorted(PACKAGE.glob("*.py")):
        if module.relative_to(ROOT).as_posix() not in rows:
            missing.append(module.relative_to(ROOT).as_posix())
    assert missing == [], "not on docs/layout.md: " + ", ".join(missing)


def test_every_path_the_layout_page_names_exists() -> None:
    text = LAYOUT.read_text(encoding="utf-8")
    named = set(
        re.findall(
            r"`((?:boundary|integrations|templates|vocabularies|fixtures|benchmarks|docs|scripts|tests)/[^`]*)`",
            text,
        )
    )
    assert named, "no paths found"
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_a_request_reaches_ids_and_u_end_through_five_modules_or_fewer() -> None:
    text = LAYOUT.read_text(encoding="utf-8")
    section = text.split("## A request's path", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. `([a-z_.A-Z]+)`", section, flags=re.M)
    modules = []
    for dotted in steps:  # each names an object that exists: module.attr[.attr]
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            modules.append(".".join(parts[:cut]))
            break
        else:
            raise AssertionError(f"{dotted} does not resolve")
    assert 1 < len(steps) == len(modules) <= 5
    assert modules[0] == "boundary.family.facade" and modules[-1] == "boundary.tokenize.encode"
