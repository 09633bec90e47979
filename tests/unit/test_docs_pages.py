"""The user's pages: the README's shape, the site's nav, and no private module on a user page.

The architecture page is for contributors and may name private modules; every other page under
``docs/`` and the README is a user page. Drafts under ``docs/notes/`` are not pages.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import toolroute
import toolroute.providers

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
NOTES = DOCS / "notes"
CONTRIBUTORS_PAGE = DOCS / "architecture.md"
GLOSSARY = DOCS / "glossary.md"
MKDOCS = ROOT / "mkdocs.yml"

#: Words a user meets in reasons, config names or benchmark output, so the glossary must
#: define them (the others are dropped from the pages instead).
JARGON = ("fast tier", "fallback ladder", "adaptive cut", "anchor", "toolpick", "NeuroLink")


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if NOTES not in p.parents)


def user_pages() -> list[Path]:
    return [README, *(p for p in pages() if p != CONTRIBUTORS_PAGE)]


def private_names() -> set[str]:
    """Every private module and package name of the installed tree (``_core``, ``_http`` …)."""
    names = set()
    for package in (toolroute, toolroute.providers):
        root = Path(package.__file__).parent
        for path in root.rglob("_*"):
            name = path.stem if path.suffix == ".py" else path.name
            if (path.is_dir() or path.suffix == ".py") and not name.startswith("__"):
                names.add(name)
    return names


def private_mentions(text: str, names: set[str]) -> list[str]:
    words = "|".join(sorted(map(re.escape, names)))
    pattern = re.compile(rf"(?<!\w)(?:{words})(?!\w)|toolroute\._(?!_)\w+")
    return sorted(set(pattern.findall(text)))


def test_the_private_names_are_read_from_the_installed_tree() -> None:
    names = private_names()
    assert {"_core", "_runtime", "_cli", "_http"} <= names
    assert "__init__" not in names


def test_the_mention_check_finds_private_modules_and_only_them() -> None:
    names = {"_core", "_http"}
    assert private_mentions("see `_core/index.py` and toolroute._runtime.engine", names) == [
        "_core",
        "toolroute._runtime",
    ]
    assert private_mentions("`_http.py`; but `all_tools_ceiling` and __init__", names) == ["_http"]
    assert private_mentions("toolroute.__version__ is public", names) == []


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_user_page_names_a_private_module(page: Path) -> None:
    found = private_mentions(page.read_text(encoding="utf-8"), private_names())
    assert not found, f"{page.relative_to(ROOT)} names private modules: {found}"


def test_the_readme_is_short_and_keeps_the_two_setup_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    # CI runs the second command; the first is what a newcomer types.
    assert "pip install -e . && toolroute demo" in text
    assert "pip install -e '.[test]' && pytest" in text


def test_every_local_link_of_the_readme_exists() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\((?!https?://|#)([^)#]+)", text)
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing


def test_the_nav_lists_every_page_and_no_note() -> None:
    config = MKDOCS.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s+- [^:]+: (\S+\.md)$", config, re.M))
    assert listed == {str(p.relative_to(DOCS)) for p in pages()}
    assert re.search(r"^exclude_docs: \|\n\s+notes/$", config, re.M)


def test_the_glossary_defines_the_jargon_the_pages_use() -> None:
    headings = {
        h.strip().lower()
        for h in re.findall(r"^#{2,4} (.+)$", GLOSSARY.read_text(encoding="utf-8"), re.M)
    }
    terms = {part.strip() for h in headings for part in re.split(r",", h)}
    for term in JARGON:
        used = any(term.lower() in p.read_text(encoding="utf-8").lower() for p in user_pages())
        if used:
            assert term.lower() in terms, f"{term!r} is used but the glossary has no entry"
