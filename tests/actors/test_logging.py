"""One logger per layer, and no request text in the log (at INFO or at any level)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from toolroute import Catalog
from toolroute._core.config import EngineConfig, EventConfig, SelectionDefaults
from toolroute._runtime.engine import open_engine

ROOT = Path(__file__).parents[2]
LAYER_LOGGERS = {
    "toolroute.runtime",
    "toolroute.decisions",
    "toolroute.asyncio",
    "toolroute.integrations",
    "toolroute.serve",
}
CATALOG = Catalog.from_mcp_servers(
    {
        "github": {"tools": [{"name": "create_issue", "description": "Open a GitHub issue"}]},
        "slack": {"tools": [{"name": "post_message", "description": "Post to a Slack channel"}]},
    }
)
SECRET = "forward the salary spreadsheet of Dana Scully"


def logger_names() -> dict[str, str]:
    """Every ``logging.getLogger("...")`` in the installed code: name → where."""
    found = {}
    for path in [*ROOT.joinpath("engine").rglob("*.py"), *ROOT.joinpath("providers").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
            ):
                (arg,) = node.args
                assert isinstance(arg, ast.Constant), f"{path}:{node.lineno}: a computed name"
                found[arg.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_every_logger_is_one_of_the_layer_loggers() -> None:
    names = logger_names()
    assert set(names) <= LAYER_LOGGERS, {n: w for n, w in names.items() if n not in LAYER_LOGGERS}
    assert {"toolroute.runtime", "toolroute.decisions"} <= set(names)


async def test_the_runtime_log_names_requests_but_never_their_text(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    config = EngineConfig(
        cache=False,
        selection=SelectionDefaults(route_servers=True),
        events=EventConfig(include_queries=True),  # the events carry the text; the log must not
    )
    caplog.set_level(logging.DEBUG, logger="toolroute")
    async with open_engine(CATALOG, config=config, embedder=None, decider=None) as engine:
        step = await engine.prepare_step(SECRET, session="conv-1")
        await engine.select(SECRET)
        await engine.update(remove=["post_message"])
    runtime = [r for r in caplog.records if r.name == "toolroute.runtime"]
    fail_open = [r for r in runtime if r.levelno == logging.INFO and "fail open" in r.getMessage()]
    assert len(fail_open) == 1
    assert step.request_id in fail_open[0].getMessage()
    assert "session=conv-1" in fail_open[0].getMessage()
    assert any("catalogue version 1" in r.getMessage() for r in runtime)
    for record in caplog.records:
        text = record.getMessage()
        assert "salary" not in text
        assert "Scully" not in text
