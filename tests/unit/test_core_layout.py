"""The pure core's sub-packages import each other only in the directions the design draws.

``catalog`` (tools, readers, dedup) and ``decide`` (question and answer types) stand on the
shared leaves alone; ``routing`` reads catalogues; ``recall`` and ``select`` are one stage
seen from two sides (the index applies the selection policy, explanations read the keyword
index), so they may import each other, and neither reaches into ``decide`` or ``routing``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import toolroute._core

CORE = Path(toolroute._core.__file__).parent

ALLOWED = {
    "catalog": set(),
    "decide": set(),
    "routing": {"catalog"},
    "recall": {"catalog", "select"},
    "select": {"catalog", "recall"},
}
#: Shared leaves every sub-package may import, which import no sub-package themselves.
PURE_LEAVES = {"errors", "evaluate", "events", "files", "outcome", "public", "stores", "validators"}


def _subpackages_imported(path: Path) -> set[str]:
    """The core sub-packages ``path`` imports (relative imports resolved against its place)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.ImportFrom) and node.level):
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        target = base.joinpath(*(node.module.split(".") if node.module else []))
        names = [target] if node.module else [target / alias.name for alias in node.names]
        for name in names:
            try:
                parts = name.relative_to(CORE).parts
            except ValueError:
                continue
            if parts and (CORE / parts[0]).is_dir():
                found.add(parts[0])
    return found


def test_every_subpackage_is_listed() -> None:
    present = {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert present == set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_subpackage_imports_only_the_subpackages_it_stands_on(package: str) -> None:
    wrong = {
        f"{path.relative_to(CORE)} imports {other}"
        for path in (CORE / package).glob("*.py")
        for other in _subpackages_imported(path) - {package} - ALLOWED[package]
    }
    assert wrong == set()


@pytest.mark.parametrize("leaf", sorted(PURE_LEAVES))
def test_the_pure_leaves_import_no_subpackage(leaf: str) -> None:
    assert _subpackages_imported(CORE / f"{leaf}.py") == set()


def test_the_check_sees_relative_imports_of_both_forms() -> None:
    probe = CORE / "select" / "policy.py"
    assert "catalog" in _subpackages_imported(probe)  # ``from ..catalog.catalog import …``
    assert _subpackages_imported(CORE / "protocols.py") >= {"decide"}
