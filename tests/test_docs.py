"""The README and ``docs/`` stay true to the code: a short README, paths and dotted names that
exist, command-line flags the commands take, and fuzz counts that are the fuzzer's.

Everything is read statically (the source and the argument parser), so the check needs neither
vLLM nor a render.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from pathlib import Path

import pytest

from boundary.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "integrations" / "vllm"
PAGES = sorted([ROOT / "README.md", PLUGIN / "README.md", *(ROOT / "docs").rglob("*.md")])


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 155


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_path_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|md|toml|patch))`", text))
    bases = [ROOT, page.parent, PLUGIN]
    missing = [p for p in sorted(named) if not any((base / p).exists() for base in bases)]
    assert missing == []


def module_file(dotted: str) -> Path | None:
    """The source of a dotted module of ``boundary`` or ``boundary_vllm``, or None."""
    base = PLUGIN if dotted.startswith("boundary_vllm") else ROOT
    path = base.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def defined_names(source: Path) -> set[str]:
    """Names a module defines or imports at its top level (classes' members included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_dotted_name_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = []
    for dotted in sorted(set(re.findall(r"`((?:boundary|boundary_vllm)(?:\.\w+)+)", text))):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            source = module_file(".".join(parts[:i]))
            if source is not None:
                if i < len(parts) and parts[i] not in defined_names(source):
                    missing.append(dotted)
                break
        else:
            missing.append(dotted)
    assert missing == []


def subcommand_flags() -> dict[str, set[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: {flag for action in command._actions for flag in action.option_strings}
        for name, command in sub.choices.items()
    }


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_flag_a_page_gives_a_command_is_one_it_takes(page: Path) -> None:
    flags = subcommand_flags()
    wrong = []
    text = page.read_text(encoding="utf-8")
    for command, rest in re.findall(r"boundary (render|audit|experiment)([^`|\n]*)", text):
        given = re.findall(r"--[a-z0-9-]+", rest)
        wrong += [f"{command} {flag}" for flag in given if flag not in flags[command]]
    assert wrong == []


def fuzz_draws() -> tuple[int, int]:
    """(templates drawn by the ``slow`` fuzz tests, by the unmarked ones), from the source."""
    tree = ast.parse((ROOT / "tests" / "test_template_fuzz.py").read_text(encoding="utf-8"))
    sizes = {
        t.id: kw.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        for t in node.targets
        if isinstance(t, ast.Name)
        for kw in node.value.keywords
        if kw.arg == "max_examples" and isinstance(kw.value, ast.Constant)
    }
    slow = fast = 0
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        marks = {ast.unparse(d) for d in node.decorator_list}
        inner = [
            kw.value.value
            for sub in ast.walk(node)
            if isinstance(sub, ast.Call) and ast.unparse(sub.func) == "settings"
            for kw in sub.keywords
            if kw.arg == "max_examples" and isinstance(kw.value, ast.Constant)
        ]
        drawn = sum(sizes[m] for m in marks if m in sizes) + sum(inner)
        if "pytest.mark.slow" in marks:
            slow += drawn
        else:
            fast += drawn
    return slow, fast


def test_the_fuzz_counts_the_docs_give_are_the_fuzzers() -> None:
    slow, fast = fuzz_draws()
    assert slow > 0 and fast > 0
    table = {
        row.split("|")[1].strip(): row.split("|")[-2].strip()
        for row in (ROOT / "docs" / "testing.md").read_text(encoding="utf-8").splitlines()
        if row.startswith("| `") and row.count("|") == 5
    }
    assert table['`pytest -m "not slow"`'] == f"{fast:,}"
    assert table["`pytest -m slow`"] == f"{slow:,}"
    assert table["`scripts/test` (and CI: `.ci/run`)"] == f"{slow + fast:,}"
    rendering = " ".join((ROOT / "docs" / "rendering.md").read_text(encoding="utf-8").split())
    assert f"How many run: {slow + fast:,} under `scripts/test`" in rendering
    assert f'{fast:,} under `pytest -m "not slow"`, {slow:,} under `pytest -m slow`' in rendering


# What a user page must not carry: the project's bookkeeping. Issue numbers ("issue 12", "#12"),
# commit hashes of this repository (7-40 hex digits that git resolves to a commit; a sha256 of a
# template or vocabulary is 64 digits and provenance, so it is spared) and dated runs (an ISO date
# or a clock time in UTC): a measured figure says which run and machine, not when.
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+\b|(?<![\w&/])#\d+\b")
HEX = re.compile(r"(?<![0-9a-fA-F])[0-9a-f]{7,40}(?![0-9a-fA-F])")
DATED = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\b\d{1,2}:\d\d(?:[–-]\d{1,2}:\d\d)? UTC\b")


def is_commit(candidate: str) -> bool:
    """Whether git resolves ``candidate`` to a commit of this repository (True without git)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-e", f"{candidate}^{{commit}}"],
            capture_output=True,
            check=False,
        )
    except OSError:
        return True
    if done.returncode == 128 and b"not a git repository" in done.stderr:
        return True
    return done.returncode == 0


def bookkeeping(text: str) -> list[str]:
    """The issue references, commit hashes and dated runs ``text`` mentions."""
    found = [m.group() for m in ISSUE.finditer(text)]
    found += [
        m.group() for m in HEX.finditer(text) if re.search(r"[a-f]", m.group()) and is_commit(m.group())
    ]
    return found + [m.group() for m in DATED.finditer(text)]


def test_bookkeeping_is_found_where_it_is() -> None:
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=9", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    text = (
        "Fixed in issue 12 (#34), measured 2026-12-04 21:02–21:07 UTC at 10:15 UTC; "
        f"tree {head}. Template sha256 {'ab' * 32}; 1073741824 bytes; see [below](#render-targets)."
    )
    expected = ["issue 12", "#34", "2026-12-04", "21:02–21:07 UTC", "10:15 UTC"]
    if head:
        expected.insert(2, head)
    assert sorted(bookkeeping(text)) == sorted(expected)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_page_carries_issue_numbers_commit_hashes_or_dated_runs(page: Path) -> None:
    assert bookkeeping(page.read_text(encoding="utf-8")) == []


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub gives ``page``: lower case, punctuation dropped, spaces to '-'."""
    found = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert broken == []
