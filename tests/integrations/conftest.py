"""Fixtures of the MCP tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def git_repository(tmp_path: Path) -> str:
    """A one-commit git repository for mcp-server-git."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    (repo / "README").write_text("hello\n")
    for command in (["init", "-q"], ["add", "README"], ["commit", "-q", "-m", "first"]):
        subprocess.run(["git", *command], cwd=repo, env=env, check=True)
    return str(repo)
