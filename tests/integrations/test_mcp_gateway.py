"""``toolroute mcp``, the routed gateway, end to end: the MCP SDK's own client is the host,
the upstreams are real servers (mcp-server-time, mcp-server-git, the fixture server).

Real processes and real time; waits are bounded generously (see test_mcp_live)."""

from __future__ import annotations

import functools
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp_support import MALFORMED_SERVER, fixture_entry, installed

from toolroute import ConfigError, EngineConfig
from toolroute._gateway.listing import Activations
from toolroute._gateway.run import open_gateway, serve_http
from toolroute.config import DedupConfig
from toolroute.integrations.mcp import McpConfig

WAIT = 30
QUICK = McpConfig(health_interval_s=0.2, retry_initial_s=0.1, retry_max_s=0.3)


class Host:
    """What an MCP host sees: the notifications the gateway sends it."""

    def __init__(self) -> None:
        self.list_changed = 0
        self._changed = trio.Event()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed += 1
            self._changed.set()

    async def next_list_changed(self) -> None:
        with trio.fail_after(WAIT):
            await self._changed.wait()
        self._changed = trio.Event()


def names(listing: types.ListToolsResult) -> list[str]:
    return [tool.name for tool in listing.tools]


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_a_host_searches_activates_and_calls_upstream_tools_through_the_gateway(
    tmp_path: Path, git_repository: str
) -> None:
    config = tmp_path / "claude_desktop_config.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {
                        "command": installed("mcp-server-time"),
                        "args": ["--local-timezone", "UTC"],
                    },
                    "git": {
                        "command": installed("mcp-server-git"),
                        "args": ["--repository", git_repository],
                    },
                    "fx": fixture_entry(),
                }
            }
        )
    )
    gateway = StdioServerParameters(
        command=installed("toolroute"),
        args=["mcp", "--config", str(config), "--embedder", "hashing"],
    )
    host = Host()
    async with Client(gateway, mode="legacy", message_handler=host.on_message) as client:
        assert names(await client.list_tools()) == ["search_tools", "call_tool"]

        found = await client.call_tool("search_tools", {"query": "current time in a timezone"})
        assert not found.is_error
        assert "get_current_time" in [t["name"] for t in json.loads(text(found))["tools"]]
        await host.next_list_changed()
        listing = await client.list_tools()
        assert "get_current_time" in names(listing)
        listed = next(t for t in listing.tools if t.name == "get_current_time")
        assert "timezone" in listed.input_schema["properties"]  # the upstream's own schema

        now = await client.call_tool("get_current_time", {"timezone": "UTC"})
        assert '"timezone": "UTC"' in text(now)
        status = await client.call_tool(
            "call_tool", {"name": "git_status", "arguments": {"repo_path": git_repository}}
        )
        assert not status.is_error
        assert "branch" in text(status).lower()

        failed = await client.call_tool("fail", {})  # never activated: still reachable
        assert failed.is_error
        assert "on purpose" in text(failed)
        steps: list[float] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            steps.append(done)

        counted = await client.call_tool("count_slowly", {"n": 3}, progress_callback=progress)
        assert text(counted) == "counted 3"
        assert steps == [1, 2, 3]
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error
        assert "search_tools" in text(unknown)

        # An upstream's own list_changed reaches the host, and search finds the new tool.
        before = host.list_changed
        new = {"name": "brew_coffee", "description": "Brew a cup of coffee"}
        await client.call_tool("call_tool", {"name": "add_tool", "arguments": new})
        await host.next_list_changed()
        assert host.list_changed > before
        found = await client.call_tool("search_tools", {"query": "brew coffee", "max_tools": 1})
        assert [t["name"] for t in json.loads(text(found))["tools"]] == ["brew_coffee"]


class BrokenSearch:
    """An engine whose search fails, everything else as the real one."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def select(self, query: str, **options: Any) -> Any:
        raise RuntimeError("the index is broken")


async def test_bad_arguments_are_errors_and_when_search_fails_every_tool_is_listed() -> None:
    servers = {
        "mcpServers": {"fx": fixture_entry("--tools", "3"), "copy": fixture_entry("--tools", "3")}
    }
    dedup = EngineConfig(cache=False, dedup=DedupConfig(enabled=True))
    async with open_gateway(
        servers, engine_config=dedup, embedder=None, mcp_config=QUICK
    ) as gateway:
        host = Host()
        async with Client(gateway.server, mode="legacy", message_handler=host.on_message) as client:
            # the model's mistakes: errors it can act on, nothing activated
            missing = await client.call_tool("search_tools", {"text": "x"})
            assert missing.is_error
            assert "expects {'query'" in text(missing)
            too_many = await client.call_tool("search_tools", {"query": "x", "max_tools": 500})
            assert "max_tools must be an integer from 1 to 50, got 500" in text(too_many)
            no_name = await client.call_tool("call_tool", {"arguments": {}})
            assert "call_tool expects {'name'" in text(no_name)
            assert names(await client.list_tools()) == ["search_tools", "call_tool"]

            gateway.engine = BrokenSearch(gateway.engine)  # type: ignore[assignment]
            found = await client.call_tool("search_tools", {"query": "anything"})
            assert not found.is_error
            assert "unavailable" in json.loads(text(found))["hint"]
            await host.next_list_changed()
            listing = names(await client.list_tools())
            # every tool once: the copy server's duplicates are folded into fx's
            assert listing == ["search_tools", "call_tool", *gateway.served.ids]
            assert len(gateway.served) == 9
            assert len(gateway.live.catalog) == 18
            assert "fx__echo" in listing
            assert "copy__echo" not in listing
            # ... and still reachable by name
            echoed = await client.call_tool("copy__echo", {"text": "still here"})
            assert text(echoed) == "still here"


async def test_an_upstream_tool_named_like_the_gateways_own_is_listed_and_called_as_server__name() -> (
    None
):
    servers = {"mcpServers": {"fx": fixture_entry()}}
    async with open_gateway(
        servers, engine_config=EngineConfig(cache=False), embedder=None, mcp_config=QUICK
    ) as gateway:
        host = Host()
        async with Client(gateway.server, mode="legacy", message_handler=host.on_message) as client:
            for own in ("search_tools", "call_tool"):
                added = {"name": own, "description": f"The fixture's own {own}"}
                await client.call_tool("call_tool", {"name": "add_tool", "arguments": added})
            with trio.fail_after(WAIT):
                while "call_tool" not in gateway.served.ids:
                    await host.next_list_changed()

            found = await client.call_tool(
                "search_tools", {"query": "the fixture's own", "max_tools": 2}
            )
            assert not found.is_error  # the gateway's own search, not the fixture's tool
            found_names = [t["name"] for t in json.loads(text(found))["tools"]]
            assert {"fx__search_tools", "fx__call_tool"} <= set(found_names)
            assert not {"search_tools", "call_tool"} & set(found_names)
            listing = names(await client.list_tools())
            assert len(listing) == len(set(listing))  # no name twice
            assert listing[:2] == ["search_tools", "call_tool"]
            assert {"fx__search_tools", "fx__call_tool"} <= set(listing)

            called = await client.call_tool("fx__search_tools", {"text": "upstream"})
            assert text(called) == "search_tools: {'text': 'upstream'}"  # the fixture's tool
            through = await client.call_tool(
                "call_tool", {"name": "fx__call_tool", "arguments": {"text": "too"}}
            )
            assert text(through) == "call_tool: {'text': 'too'}"


async def test_a_server_crashing_mid_call_is_an_error_result_naming_it() -> None:
    servers = {"mcpServers": {"fx": fixture_entry()}}
    async with (
        open_gateway(
            servers, engine_config=EngineConfig(cache=False), embedder=None, mcp_config=QUICK
        ) as gateway,
        Client(gateway.server, mode="legacy") as client,
    ):
        crashed = await client.call_tool("crash", {})  # the server exits, answering nothing
        assert crashed.is_error
        assert text(crashed).startswith(
            "MCP server 'fx' closed the connection during the call (Connection closed)"
        )
        with trio.fail_after(WAIT):  # reconnected; the same client calls it again
            while gateway.live.status["fx"].connections < 2:
                await gateway.live.wait_status_change()
        echoed = await client.call_tool("echo", {"text": "same client, server back"})
        assert text(echoed) == "same client, server back"


async def test_a_malformed_upstream_result_is_an_error_result_naming_the_server() -> None:
    servers = {
        "mcpServers": {
            "fx": fixture_entry(),
            "bad": {"command": sys.executable, "args": [MALFORMED_SERVER]},
        }
    }
    async with (
        open_gateway(
            servers, engine_config=EngineConfig(cache=False), embedder=None, mcp_config=QUICK
        ) as gateway,
        Client(gateway.server, mode="legacy") as client,
    ):
        garbled = await client.call_tool("garble", {})  # not "Invalid request parameters"
        assert garbled.is_error
        assert text(garbled).startswith("MCP server 'bad' answered with a malformed result (")
        assert "content" in text(garbled)  # where it is malformed
        assert text(await client.call_tool("echo", {"text": "others fine"})) == "others fine"
        assert gateway.live.status["bad"].state == "up"


# The SDK's streamable-HTTP client leaves its response generators to the garbage collector
# when its connection is cancelled under trio; nothing of ours to close.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_the_gateway_serves_streamable_http_and_2026_clients() -> None:
    servers = {"mcpServers": {"fx": fixture_entry()}}
    async with (
        open_gateway(
            servers, engine_config=EngineConfig(cache=False), embedder=None, mcp_config=QUICK
        ) as gateway,
        trio.open_nursery() as nursery,
    ):
        # A client on the 2026-07-28 protocol learns of the change through its subscription.
        async with Client(gateway.server) as modern:
            assert modern.protocol_version == "2026-07-28"
            async with modern.listen(tools_list_changed=True) as subscription:
                await modern.call_tool("search_tools", {"query": "echo text back"})
                with trio.fail_after(WAIT):
                    event = await subscription.__anext__()
            assert type(event).__name__ == "ToolsListChanged"
            assert "echo" in names(await modern.list_tools())

        url = await nursery.start(_serving, gateway)
        host = Host()
        async with Client(url, mode="legacy", message_handler=host.on_message) as client:
            found = await client.call_tool("search_tools", {"query": "echo text back"})
            assert "echo" in [t["name"] for t in json.loads(text(found))["tools"]]
            await host.next_list_changed()
            assert "echo" in names(await client.list_tools())
            assert text(await client.call_tool("echo", {"text": "over http"})) == "over http"
        nursery.cancel_scope.cancel()


#: An upstream whose one tool waits until cancelled, writing "started", then "cancelled", to
#: the file its ``record`` argument names.
WAITING_SERVER = """
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

SCHEMA = {"type": "object", "properties": {"record": {"type": "string"}}, "required": ["record"]}


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    tool = types.Tool(name="wait_here", description="Wait until cancelled", input_schema=SCHEMA)
    return types.ListToolsResult(tools=[tool])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    record = Path(params.arguments["record"])
    record.write_text("started")
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        record.write_text("cancelled")
        raise
    raise AssertionError


async def main() -> None:
    server = Server("waiter", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


anyio.run(main)
"""


async def _recorded(record: Path, expected: str) -> None:
    path = trio.Path(record)
    with trio.fail_after(WAIT):
        while not await path.exists() or await path.read_text() != expected:  # noqa: ASYNC110
            await trio.sleep(0.02)


# The SDK's streamable-HTTP client leaves its response generators to the garbage collector
# when its connection is cancelled under trio; nothing of ours to close.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_client_that_cancels_a_call_over_http_cancels_it_upstream(tmp_path: Path) -> None:
    import httpx

    servers = {"mcpServers": {"w": _server_that(tmp_path, WAITING_SERVER)}}
    async with (
        open_gateway(
            servers, engine_config=EngineConfig(cache=False), embedder=None, mcp_config=QUICK
        ) as gateway,
        trio.open_nursery() as nursery,
    ):
        url = await nursery.start(_serving, gateway)
        # A 2025 client sends notifications/cancelled; a 2026-07-28 one closes the stream.
        for mode in ("legacy", "auto"):
            record = tmp_path / f"{mode}.txt"
            async with Client(url, mode=mode) as client:  # type: ignore[arg-type]
                async with trio.open_nursery() as calls:
                    calls.start_soon(client.call_tool, "wait_here", {"record": str(record)})
                    await _recorded(record, "started")
                    calls.cancel_scope.cancel()
                await _recorded(record, "cancelled")  # not left to run to its end
        # A 2025 client that ends its session (DELETE) while a call is in flight.
        record = tmp_path / "delete.txt"
        headers = {"accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
            hello["clientInfo"] = {"name": "test", "version": "0"}
            opened = await http.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
            )
            http.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
            http.headers["mcp-protocol-version"] = "2025-06-18"
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await http.post(url, json=initialized)
            call = {"name": "wait_here", "arguments": {"record": str(record)}}
            body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
            async with trio.open_nursery() as calls:
                calls.start_soon(functools.partial(http.post, url, json=body))
                await _recorded(record, "started")
                assert (await http.delete(url)).status_code == 200
                await _recorded(record, "cancelled")
                calls.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


async def _serving(gateway: Any, *, task_status: trio.TaskStatus[str]) -> None:
    await serve_http(gateway, port=0, task_status=task_status)


class Session:
    """A client connection's session as the notifier sees it: it takes the notice, never
    reads again, or has gone."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.notified = 0

    async def send_tool_list_changed(self) -> None:
        if self.behaviour == "stalled":
            await trio.sleep_forever()
        if self.behaviour == "gone":
            raise trio.BrokenResourceError
        self.notified += 1


async def test_a_client_that_stopped_reading_holds_up_no_other_notice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from toolroute._gateway.server import NOTIFY_S, Gateway

    gateway = Gateway(live=Any, engine=Any)  # type: ignore[arg-type]  # the notifier uses neither
    sessions = {name: Session(name) for name in ("stalled", "reading", "gone")}
    gateway._sessions.update(sessions)  # type: ignore[arg-type]
    started = trio.current_time()
    with trio.fail_after(NOTIFY_S * 2):
        await gateway._notify_all()
    assert sessions["reading"].notified == 1
    assert trio.current_time() - started == pytest.approx(NOTIFY_S)  # bounded, not for ever
    assert list(gateway._sessions) == ["reading"]  # the others are forgotten till they list
    await gateway._notify_all()
    assert sessions["reading"].notified == 2


def test_activations_keep_the_newest_within_the_limit_in_catalogue_order() -> None:
    from toolroute import Catalog, Tool

    served = Catalog([Tool(n, n) for n in "abcdef"])
    active = Activations(limit=3)
    assert active.activate("c1", ["e", "b"])
    assert not active.activate("c1", ["b"])  # already shown: no list_changed
    assert active.activate("c1", ["a", "f"])  # e is the oldest and leaves
    assert active.listing("c1", served) == ("a", "b", "f")
    assert active.listing("c2", served) == ()
    assert active.show_everything("c2")
    assert active.listing("c2", served) == served.ids


def test_the_command_reports_a_malformed_config_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolroute._cli.main import main

    config = tmp_path / "servers.json"
    config.write_text('{"mcpServers": {"time": {"command": ["uvx"]}}}')
    assert main(["mcp", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert error.strip() == (
        "toolroute: error: MCP server 'time': field 'command' must be a non-empty string, "
        "got ['uvx']"
    )


def test_a_port_in_use_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolroute._cli.main import main

    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"fx": fixture_entry()}}))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = ["mcp", "--config", str(config), "--embedder", "none"]
        assert main([*command, "--transport", "http", "--port", str(port)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"toolroute: error: cannot listen on 127.0.0.1:{port}: "), error
    assert len(error.strip().splitlines()) == 1, error


# -- the command's start and stop ------------------------------------------------------------

#: Loose: a loaded machine starts Python, the gateway and its upstreams slowly.
PROCESS_S = 120


def _gateway_command(config: Path, *args: str) -> list[str]:
    return [installed("toolroute"), "mcp", "--config", str(config), "--embedder", "none", *args]


def _server_that(tmp_path: Path, code: str) -> dict[str, Any]:
    script = tmp_path / "server.py"
    script.write_text(code)
    return {"command": sys.executable, "args": [str(script)]}


#: Servers that never come up, by what they do at start.
FAILING_AT_START = {"crash": "import sys\nsys.exit(3)\n", "hang": "import time\ntime.sleep(600)\n"}


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        pytest.param({"servers": {}}, "lists no servers", id="empty-servers"),
        pytest.param({"mcpServers": {}}, "lists no servers", id="empty-mcpServers"),
        pytest.param(
            {"mcpServers": {"x": {"command": "a", "disabled": True}}},
            "lists no servers",
            id="all-disabled",
        ),
        pytest.param(
            {"mcpServers": {"x": {"command": "/nonexistent/bin"}}},
            "no MCP server came up with a tool to route: 'x' failed to start (FileNotFoundError: ",
            id="missing-command",
        ),
        pytest.param(
            "crash",
            "no MCP server came up with a tool to route: 'x' failed to start (",
            id="crash-at-start",
        ),
        pytest.param(
            "hang",  # held only as long as --connect-timeout says (30 s by default)
            "'x' failed to start (TimeoutError: did not start and list its tools within 0.5 s)",
            id="hang-at-start",
        ),
    ],
)
def test_a_config_that_brings_up_no_tool_is_one_line_and_exit_2(
    tmp_path: Path, servers: object, expected: str
) -> None:
    if isinstance(servers, str):
        servers = {"mcpServers": {"x": _server_that(tmp_path, FAILING_AT_START[servers])}}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps(servers))
    done = subprocess.run(
        _gateway_command(config, "--connect-timeout", "0.5"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PROCESS_S,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("toolroute: error: ")
    assert expected in lines[0]
    if "lists no servers" in expected:
        assert f"MCP config {str(config)!r} lists no servers" in lines[0]
        assert "'mcpServers'" in lines[0]


def test_no_tools_reason_names_each_server_and_why() -> None:
    from toolroute._gateway.run import no_tools_reason
    from toolroute.integrations.mcp import ServerStatus

    status = {
        "a": ServerStatus(name="a", state="up"),
        "b": ServerStatus(name="b", state="down", error="OSError: " + "x" * 500),
    }
    reason = no_tools_reason(status)
    assert reason.startswith("no MCP server came up with a tool to route: 'a' listed no tools; ")
    assert "'b' failed to start (OSError: xxx" in reason
    assert len(reason) < 300  # a long error is cut: the line stays readable
    assert "lists no servers" in no_tools_reason({})


async def test_the_gateway_raises_no_tools_as_itself_and_serves_a_partly_broken_fleet(
    tmp_path: Path,
) -> None:
    missing = {"command": str(tmp_path / "no-such-server")}
    with pytest.raises(ConfigError, match=r"'x' failed to start \(FileNotFoundError"):
        async with open_gateway({"mcpServers": {"x": missing}}, embedder=None, mcp_config=QUICK):
            pytest.fail("a gateway without tools opened")

    fleet = {"mcpServers": {"fx": fixture_entry(), "x": missing}}
    config = EngineConfig(cache=False)
    async with open_gateway(fleet, engine_config=config, embedder=None, mcp_config=QUICK) as gw:
        assert "echo" in gw.served.ids  # fail-open: the good server's tools are served
        assert gw.live.status["x"].state == "down"


class GatewayProcess:
    """``toolroute mcp`` in a process of its own; its stderr lines collected by a thread."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.errors: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.errors.append(line.rstrip("\n"))

    def wait_for_error_line(self, start: str) -> str:
        deadline = time.monotonic() + PROCESS_S
        while time.monotonic() < deadline and self.process.poll() is None:
            found = [line for line in self.errors if line.startswith(start)]
            if found:
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"no line starting {start!r}: {self.errors}")

    def stop(self) -> int:
        """SIGINT, then the exit status (the process killed if it does not exit)."""
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(PROCESS_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(PROCESS_S)
            for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
                if pipe is not None:
                    pipe.close()


def test_sigint_stops_the_http_gateway_cleanly(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"fx": fixture_entry()}}))
    gateway = GatewayProcess(_gateway_command(config, "--transport", "http", "--port", "0"))
    gateway.wait_for_error_line("toolroute mcp: serving http://")
    assert gateway.stop() == 0, gateway.errors
    assert gateway.errors[-1] == "toolroute mcp: stopped"
    assert not any("Traceback" in line for line in gateway.errors)


def test_sigint_stops_the_stdio_gateway_cleanly(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"fx": fixture_entry()}}))
    gateway = GatewayProcess(_gateway_command(config))
    assert gateway.process.stdin is not None
    assert gateway.process.stdout is not None
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    gateway.process.stdin.write(json.dumps(initialize) + "\n")
    gateway.process.stdin.flush()
    answer = json.loads(gateway.process.stdout.readline())  # serving: it answered
    assert answer["id"] == 1
    assert gateway.stop() == 0, gateway.errors
    assert gateway.errors == ["toolroute mcp: stopped"]
