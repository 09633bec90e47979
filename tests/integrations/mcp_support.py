"""Shared pieces of the MCP tests: the fixture server's command, real servers from PyPI."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURE_SERVER = str(Path(__file__).parents[1] / "fixtures" / "mcp" / "fixture_server.py")
MALFORMED_SERVER = str(Path(__file__).parents[1] / "fixtures" / "mcp" / "malformed_server.py")


def fixture_entry(*args: str) -> dict[str, Any]:
    """An ``mcpServers`` entry that starts the fixture server with ``args``."""
    return {"command": sys.executable, "args": [FIXTURE_SERVER, *args]}


def installed(command: str) -> str:
    """The path of a server command installed beside the test interpreter (or skip)."""
    beside = Path(sys.executable).parent / command
    found = str(beside) if beside.exists() else shutil.which(command)
    if found is None:
        pytest.skip(f"{command} is not installed (pip install '.[mcp,test]')")
    return found
