"""Dependencies point one way: no import cycle anywhere in ``boundary/``.

The graph is read statically from the source (``ast``), so imports inside functions and under
``if TYPE_CHECKING:`` count like module-level ones: a cycle hidden behind either is still a
cycle in the design. Importing ``a.b.c`` also runs ``a/b/__init__.py``, so an edge to a
package's ``__init__`` is counted too (except from inside that package).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import boundary

PACKAGE = Path(boundary.__file__).resolve().parent


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the package directory ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join([*parts[:keep], *([node.module] if node.module else [])])
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    edges = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):  # the module and the packages it runs on the way
            module = ".".join(parts[:i])
            if module in known and module != name and not name.startswith(module + "."):
                edges.add(module)
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imported(name, path, known) for name, path in known.items()}


def test_boundary_has_no_import_cycle() -> None:
    found = cycles(import_graph(PACKAGE))
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_features_never_import_the_family_facade() -> None:
    graph = import_graph(PACKAGE)
    below = [
        "boundary.renderer",
        "boundary.session.session",
        "boundary.verify.roundtrip",
        "boundary.verify.horizon",
        "boundary.outputs",
    ]
    for name in below:
        assert "boundary.family.facade" not in graph[name], name
    assert {"boundary.shipped.spec", "boundary.family.registry", "boundary.renderer"} <= graph[
        "boundary.family.facade"
    ]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_cycle_hidden_in_a_function_or_under_type_checking_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    _write(
        pkg,
        {
            "__init__.py": "",
            "a.py": "def f():\n    from pkg import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n",
            "c.py": "from . import a\n",
        },
    )
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_importing_a_submodule_runs_its_package_init(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    _write(
        pkg,
        {
            "__init__.py": "",
            "low.py": "import pkg.sub.leaf\n",
            "sub/__init__.py": "from pkg.sub.user import x\n",
            "sub/leaf.py": "",
            "sub/user.py": "from pkg import low\nx = 1\n",
        },
    )
    assert cycles(import_graph(pkg)) == [["pkg.low", "pkg.sub", "pkg.sub.user"]]
    assert "pkg.sub" not in import_graph(pkg)["pkg.sub.user"]  # from inside the package: no edge


def test_the_vllm_tests_skip_with_the_reason_when_vllm_is_absent() -> None:
    hide_vllm = (
        "import sys; sys.modules['vllm'] = None; import pytest; "
        "sys.exit(pytest.main(['-q', '-rs', '-p', 'no:xdist', '-p', 'no:cacheprovider', "
        "'tests/vllm/test_vllm_scheduler.py', 'tests/outputs/test_vllm_differential.py', "
        "'tests/vllm/test_vllm_decode_end.py']))"
    )
    root = PACKAGE.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "integrations" / "vllm")])}
    done = subprocess.run(
        [sys.executable, "-c", hide_vllm], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr  # collects; nothing fails
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert any("test_vllm_scheduler.py" in line for line in skips)  # a module importing vLLM at its top
    assert any("test_vllm_decode_end.py:" in line for line in skips)  # a test marked vllm
    assert all(line.endswith("vLLM is not installed (scripts/test and CI install it)") for line in skips)
