"""Every Python snippet in the README and the docs pages runs as written, each as its own script.

A snippet runs in a scratch folder holding ``tools.json`` (the bundled demo catalogue), with no
decision provider configured, so it needs nothing but what the README's set-up installs. A
snippet followed by an ``output`` block must print those lines, in that order (``…`` stands
for any text), so the text beside the code cannot drift from what the code does.

Draft notes under ``docs/notes/`` are not pages and are not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

import toolroute

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
NOTES = DOCS / "notes"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n?", re.S | re.M)
DEMO_CATALOG = Path(toolroute.__file__).parent / "data" / "demo_catalog.json"


@attrs.frozen
class Snippet:
    where: str  # "docs/engine.md:42"
    code: str
    output: tuple[str, ...]  # the lines it must print, in order ("…": any text)


def pages() -> list[Path]:
    docs = sorted(p for p in DOCS.rglob("*.md") if NOTES not in p.parents)
    return [README, *docs]


def snippets_of(page: Path) -> list[Snippet]:
    text = page.read_text(encoding="utf-8")
    fences = list(FENCE.finditer(text))
    found = []
    for i, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        after = fences[i + 1] if i + 1 < len(fences) else None
        expected: tuple[str, ...] = ()
        if after is not None and after.group(1) == "output" and not text[fence.end() : after.start()].strip():
            expected = tuple(line for line in after.group(2).splitlines() if line.strip())
        line = text.count("\n", 0, fence.start()) + 1
        found.append(Snippet(f"{page.relative_to(ROOT)}:{line}", fence.group(2), expected))
    return found


def snippets() -> list[Snippet]:
    """Every page's snippets; a snippet shown on two pages runs once."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    unique = []
    for page in pages():
        for snippet in snippets_of(page):
            key = (snippet.code, snippet.output)
            if key not in seen:
                seen.add(key)
                unique.append(snippet)
    return unique


def offline_env(home: Path, cache: Path) -> dict[str, str]:
    """This environment less any provider configuration, with an empty ``HOME``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_BASE_URL")) and not k.startswith("TOOLROUTE_")
    }
    return env | {"HOME": str(home), "TOOLROUTE_CACHE_DIR": str(cache)}


def printed_in_order(expected: tuple[str, ...], stdout: str) -> str | None:
    """The first expected line ``stdout`` does not print (after the ones before it), or None."""
    lines = iter(stdout.splitlines())
    for want in expected:
        pattern = re.compile(".*".join(re.escape(part) for part in want.strip().split("…")))
        if not any(pattern.fullmatch(line.strip()) for line in lines):
            return want
    return None


def test_the_readme_and_every_page_have_snippets() -> None:
    assert len(snippets_of(README)) >= 3
    assert len(snippets()) >= 15


def test_output_blocks_are_matched_line_by_line_in_order() -> None:
    assert printed_in_order(("0 applied",), "x\n0 applied\n") is None
    assert printed_in_order(("0 applied",), "0 degraded\n") == "0 applied"
    assert printed_in_order(("('a', …)", "b"), "('a', 'c')\nb\n") is None
    assert printed_in_order(("b", "('a', …)"), "('a', 'c')\nb\n") == "('a', …)"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One embedding cache for every snippet: the first embeds the demo tools, the rest read them.
    return tmp_path_factory.mktemp("cache")


@pytest.mark.slow
@pytest.mark.parametrize("snippet", snippets(), ids=lambda s: s.where)
def test_snippet_runs_as_written(snippet: Snippet, tmp_path: Path, shared_cache: Path) -> None:
    shutil.copy(DEMO_CATALOG, tmp_path / "tools.json")
    (tmp_path / "home").mkdir()
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=offline_env(tmp_path / "home", shared_cache),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{snippet.where}:\n{done.stdout}\n{done.stderr}"
    missing = printed_in_order(snippet.output, done.stdout)
    assert missing is None, f"{snippet.where}: expected a line {missing!r}, printed:\n{done.stdout}"
