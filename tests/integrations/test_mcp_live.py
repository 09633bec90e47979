"""Live MCP catalogues against real servers the tests start: mcp-server-time, mcp-server-git
(from PyPI) and the fixture server, whose tools change while it is connected.

Real processes and real time: each wait is bounded generously (``fail_after``) so that a
loaded machine cannot fail a test; how fast things are is the benchmark's business."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

from mcp import MCPError
from mcp_support import FIXTURE_SERVER, fixture_entry, installed

from toolroute import Catalog, CatalogError, EngineConfig
from toolroute._core.config import DedupConfig
from toolroute._runtime.engine import open_engine
from toolroute.events import CatalogUpdated, Delivery
from toolroute.integrations.mcp import McpConfig, open_mcp_catalog

QUICK = McpConfig(connect_s=30, health_interval_s=0.2, retry_initial_s=0.1, retry_max_s=0.3)
WAIT = 30  # seconds; generous on purpose (see the module docstring)


async def test_real_servers_listed_with_pages_clashes_and_a_server_that_never_starts(
    git_repository: str,
) -> None:
    config = {
        "mcpServers": {
            "time": {"command": installed("mcp-server-time"), "args": ["--local-timezone", "UTC"]},
            "git": {
                "command": installed("mcp-server-git"),
                "args": ["--repository", git_repository],
            },
            # 6 own tools + 7 padding tools, 3 per page: the listing takes 5 pages
            "paged": fixture_entry("--tools", "7", "--page", "3"),
            "other": fixture_entry("--name", "other"),
            "missing": {"command": "/nonexistent/mcp-server", "alwaysAllow": ["x"]},
        }
    }
    dedup = EngineConfig(cache=False, dedup=DedupConfig(enabled=True))
    async with open_mcp_catalog(config, config=QUICK) as live:
        catalog = live.catalog
        status = live.status
        async with open_engine(catalog, config=dedup, embedder=None) as engine:
            served = engine.index.catalog
    # the engine's dedup folds the second fixture's copies into the first's
    assert "paged__echo" in served
    assert not any(tool.server == "other" for tool in served)
    assert {"get_current_time", "convert_time"} <= set(catalog.ids)
    assert {"git_status", "git_log"} <= set(catalog.ids)
    assert status["git"].tools >= 10
    assert status["paged"].tools == 13
    assert "paged__tool_0006" not in catalog  # unique names keep their own id
    assert "tool_0006" in catalog
    # names on both fixtures are qualified; what the model sees stays the server's name
    assert catalog["paged__echo"].name == catalog["other__echo"].name == "echo"
    assert catalog["other__echo"].server == "other"
    assert status["missing"].state == "down"
    assert "No such file" in status["missing"].error
    assert status["time"].state == status["git"].state == "up"


async def test_list_changed_reaches_the_engine_and_calls_forward_results_errors_progress() -> None:
    async with (
        open_mcp_catalog({"mcpServers": {"fx": fixture_entry()}}, config=QUICK) as live,
        open_engine(live.catalog, config=EngineConfig(cache=False), embedder=None) as engine,
    ):
        live.follow(engine)
        async with engine.subscribe(buffer=16) as events:
            new = {"name": "brew_coffee", "description": "Brew a cup of coffee"}
            await live.call_tool("add_tool", new)
            with trio.fail_after(WAIT):
                update = await next_update(events)
            assert update.added == ("brew_coffee",)
            selection = await engine.select("brew me a coffee", max_tools=1)
            assert selection.tool_ids == ("brew_coffee",)

            await live.call_tool("remove_tool", {"name": "brew_coffee"})
            with trio.fail_after(WAIT):
                update = await next_update(events)
            assert update.removed == ("brew_coffee",)
        assert "brew_coffee" not in engine.catalog
        assert "brew_coffee" not in live.catalog

        result = await live.call_tool("echo", {"text": "hi"})
        assert result.content[0].text == "hi"  # type: ignore[union-attr]
        failed = await live.call_tool("fail", {})
        assert failed.is_error
        steps: list[float] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            steps.append(done)

        counted = await live.call_tool("count_slowly", {"n": 3}, progress=progress)
        assert counted.content[0].text == "counted 3"  # type: ignore[union-attr]
        assert steps == [1, 2, 3]
        with pytest.raises(CatalogError, match="no tool with id 'nope'"):
            await live.call_tool("nope")


async def next_update(events: AsyncIterator[Delivery]) -> CatalogUpdated:
    async for delivery in events:
        if isinstance(delivery.event, CatalogUpdated):
            return delivery.event
    raise AssertionError("the subscription ended")


async def test_crashed_server_keeps_its_tools_and_is_reconnected(tmp_path: Path) -> None:
    down = tmp_path / "down"
    config = {"mcpServers": {"fx": fixture_entry("--down-file", str(down))}}
    async with open_mcp_catalog(config, config=QUICK) as live:
        before = live.catalog
        with pytest.raises(MCPError, match="Connection closed"):  # the crash answers nothing
            await live.call_tool("crash")
        with trio.fail_after(WAIT):
            while live.status["fx"].state != "down":
                await live.wait_status_change()
        assert live.catalog == before  # last known tools still served
        assert live.status["fx"].failures >= 1
        down.unlink()  # restarts now succeed
        with trio.fail_after(WAIT):
            while live.status["fx"].state != "up":
                await live.wait_status_change()
        assert live.status["fx"].connections == 2
        result = await live.call_tool("echo", {"text": "back again"})
        assert result.content[0].text == "back again"  # type: ignore[union-attr]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# The SDK's streamable-HTTP client leaves its response generators to the garbage collector
# when its connection is cancelled under trio; nothing of ours to close.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_streamable_http_server_is_listed_and_called() -> None:
    port = free_port()
    process = await trio.lowlevel.open_process(
        [sys.executable, FIXTURE_SERVER, "--http", str(port)]
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        with trio.fail_after(WAIT):
            await _until_listening(port)
        async with open_mcp_catalog({"mcpServers": {"remote": {"url": url}}}, config=QUICK) as live:
            assert live.status["remote"].state == "up"
            assert "echo" in live.catalog
            result = await live.call_tool("echo", {"text": "over http"})
            assert result.content[0].text == "over http"  # type: ignore[union-attr]
    finally:
        process.terminate()
        with trio.move_on_after(10, shield=True):
            await process.wait()


async def _until_listening(port: int) -> None:
    while True:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            await trio.sleep(0.05)
            continue
        await stream.aclose()
        return


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"mcpServers": {"x": {"command": 3}}}, "MCP server 'x': field 'command' must be"),
        ({"mcpServers": {"x": {"url": "ftp://h"}}}, "MCP server 'x': expected 'command'"),
        ({"mcpServers": {"x": {"command": "a", "args": "b"}}}, "field 'args' must be a list"),
        ({"mcpServers": {"x": {"command": "a", "env": {"K": 1}}}}, "field 'env' must map"),
        ({"mcpServers": {"x": {"type": "sse", "url": "http://h"}}}, "SSE transport"),
        ({"tools": []}, "expected an MCP config with an 'mcpServers'"),
    ],
)
def test_malformed_configs_name_the_server_and_field(config: Any, message: str) -> None:
    from toolroute import ConfigError
    from toolroute.integrations.mcp import read_mcp_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_mcp_config(config)


def test_client_configs_are_read_unchanged(tmp_path: Path) -> None:
    from toolroute.integrations.mcp import read_mcp_config

    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(
        '{"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"],'
        ' "env": {"TZ": "UTC"}, "autoApprove": []},'
        ' "off": {"command": "x", "disabled": true},'
        ' "remote": {"url": "https://example.org/mcp", "headers": {"Authorization": "Bearer t"}}},'
        ' "globalShortcut": ""}'
    )
    time_server, remote = read_mcp_config(claude)
    assert (time_server.command, time_server.args, dict(time_server.env)) == (
        "uvx",
        ("mcp-server-time",),
        {"TZ": "UTC"},
    )
    assert remote.url == "https://example.org/mcp"
    assert remote.transport == "http"
    vscode = read_mcp_config({"servers": {"t": {"type": "stdio", "command": "uvx"}}})
    assert vscode[0].transport == "stdio"
    assert read_mcp_config(os.fspath(claude)) == (time_server, remote)
    # Saved by a Windows editor: a byte order mark and CRLF line ends.
    claude.write_bytes(claude.read_text().replace(", ", ",\r\n").encode("utf-8-sig"))
    assert read_mcp_config(claude) == (time_server, remote)
    assert isinstance(Catalog([]), Catalog)


def test_a_listing_with_a_name_twice_or_a_malformed_tool_serves_the_rest() -> None:
    import mcp_types as types

    from toolroute.integrations._mcp.live import _read

    def tool(name: str, description: str = "d") -> types.Tool:
        return types.Tool(name=name, description=description, input_schema={"type": "object"})

    listed = {
        "a": (tool("x", "first"), tool("y"), tool("x", "second"), tool("  ")),
        "b": (tool("x"),),
    }
    catalog, skipped = _read(listed)
    assert catalog.ids == ("a__x", "y", "b__x")
    assert catalog["a__x"].description == "first"
    assert skipped == {"a": 2}


async def test_a_group_from_the_callers_own_nursery_passes_through_as_it_came() -> None:
    mine = ValueError("the caller's own mistake")
    with pytest.raises(BaseExceptionGroup) as caught:
        async with open_mcp_catalog([], config=QUICK), trio.open_nursery():
            raise mine
    assert caught.value.exceptions == (mine,)  # the caller's group, not one more around it
