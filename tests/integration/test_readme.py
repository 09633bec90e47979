"""Every Python snippet in the README runs as written, each as its own script.

A snippet runs in a scratch folder holding ``tools.json`` (the bundled demo catalogue), with no
decision provider configured, so it needs nothing but what the README's set-up installs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import toolroute

README = Path(__file__).parents[2] / "README.md"
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
DEMO_CATALOG = Path(toolroute.__file__).parent / "data" / "demo_catalog.json"


def snippets() -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in SNIPPET.finditer(text)]


def offline_env(home: Path) -> dict[str, str]:
    """This environment less any provider configuration, with an empty ``HOME``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_BASE_URL")) and not k.startswith("TOOLROUTE_")
    }
    return env | {"HOME": str(home), "TOOLROUTE_CACHE_DIR": str(home / "cache")}


def test_the_readme_has_snippets() -> None:
    assert len(snippets()) >= 4


@pytest.mark.slow
@pytest.mark.parametrize(("line", "code"), snippets(), ids=lambda v: f"line{v}" if isinstance(v, int) else "")
def test_readme_snippet_runs_as_written(line: int, code: str, tmp_path: Path) -> None:
    shutil.copy(DEMO_CATALOG, tmp_path / "tools.json")
    (tmp_path / "home").mkdir()
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=offline_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"README line {line}:\n{done.stdout}\n{done.stderr}"
