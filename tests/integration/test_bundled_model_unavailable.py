"""Where the bundled model cannot load, the default embedder fails open: keyword-only recall,
marked degraded with the load's error, never an index or engine that does not open."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import toolroute.providers
from toolroute import Catalog, EmbedderError, EngineConfig, ToolIndex, open_engine

CATALOG = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
    ]
)
CANNOT_LOAD = "the bundled model cannot load: "


@pytest.fixture
def broken_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails() -> None:
        raise EmbedderError("libonnxruntime.so: cannot open shared object file")

    monkeypatch.setattr(toolroute.providers, "default_embedder", fails)


@pytest.mark.usefixtures("broken_model")
def test_an_index_ranks_by_keywords_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="toolroute.runtime"):
        index = ToolIndex(CATALOG, cache=None)
    selection = index.select("email my boss")
    assert selection.tool_ids[0] == "send_email"
    assert selection.outcome == "degraded"
    assert CANNOT_LOAD in selection.reason
    assert "cannot open shared object file" in index.degraded_reason
    assert [r.getMessage() for r in caplog.records if CANNOT_LOAD in r.getMessage()]


@pytest.mark.usefixtures("broken_model")
async def test_an_engine_opens_and_serves_keyword_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="toolroute.runtime")
    async with open_engine(CATALOG, config=EngineConfig(cache=False)) as engine:
        await engine.ready()
        selection = await engine.select("weather in Rome")
        step = await engine.prepare_step([{"role": "user", "content": "email bob"}], session="s")
    assert selection.tool_ids[0] == "get_weather"
    assert selection.outcome == "degraded"
    assert CANNOT_LOAD in selection.reason
    assert step.tool_ids is not None
    assert step.tool_ids[0] == "send_email"
    said = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("warm-up finished: 0 of 2 tools embedded") for line in said), said


def test_an_onnxruntime_that_does_not_import(tmp_path: Path) -> None:
    # A wheel installed where its system library is missing: the import itself fails.
    broken = tmp_path / "site" / "onnxruntime"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        'raise ImportError("libonnxruntime.so: cannot open shared object file")\n'
    )
    script = (
        "import json, toolroute as t\n"
        "s = t.ToolIndex(t.Catalog.demo(), cache=None).select('weather in Oslo')\n"
        "print(json.dumps([s.tool_ids[0], s.outcome, s.reason]))\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first, outcome, reason = json.loads(done.stdout)
    assert first in Catalog.demo()
    assert outcome == "degraded"
    assert "ImportError: libonnxruntime.so: cannot open shared object file" in reason
