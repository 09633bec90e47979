"""Run the gateway: connect the upstream servers, open an engine that follows them, serve
MCP over stdio or streamable HTTP until the client leaves (stdio) or the task is cancelled."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import trio
from mcp.server.stdio import stdio_server

from .._core.config import EngineConfig
from .._core.errors import ConfigError
from .._runtime.engine import open_engine
from ..integrations.mcp import McpConfig, ServerStatus, open_mcp_catalog
from .server import Gateway

if TYPE_CHECKING:
    from .._core.protocols import Embedder

Transport = Literal["stdio", "http"]
_DEFAULT: Any = object()


@contextlib.asynccontextmanager
async def open_gateway(
    servers: object,
    *,
    engine_config: EngineConfig | None = None,
    embedder: Embedder | None = _DEFAULT,
    mcp_config: McpConfig | None = None,
    limit: int = 64,
) -> AsyncIterator[Gateway]:
    """A ``Gateway`` over the servers of ``servers`` (an ``mcpServers`` config), its engine
    following their tools; the notifier runs until the block ends.

    Raises:
        ConfigError: the config is malformed or lists no server, or no server came up
            with a tool (the message names each server and why). Servers that are down
            while another serves tools are retried, not raised (fail-open).
    """
    options: dict[str, Any] = {} if embedder is _DEFAULT else {"embedder": embedder}
    async with open_mcp_catalog(servers, config=mcp_config) as live:
        if not len(live.catalog):
            raise ConfigError(no_tools_reason(live.status))
        async with (
            open_engine(live.catalog, config=engine_config, **options) as engine,
            trio.open_nursery() as nursery,
        ):
            live.follow(engine)
            gateway = Gateway(live, engine, limit=limit)
            nursery.start_soon(gateway.run_notifier)
            try:
                yield gateway
            finally:
                nursery.cancel_scope.cancel("the gateway closed")


#: How much of a server's error the no-tools message quotes.
_REASON_CHARS = 160


def no_tools_reason(status: Mapping[str, ServerStatus]) -> str:
    """Why the servers of ``status`` offer no tool, in one line naming each server."""
    if not status:
        return (
            "the MCP config lists no servers: expected at least one enabled server under "
            "'mcpServers', got none"
        )
    parts = []
    for name, server in status.items():
        if server.state == "up":
            parts.append(f"{name!r} listed no tools")
        elif server.error:
            error = server.error
            if len(error) > _REASON_CHARS:
                error = error[: _REASON_CHARS - 1] + "…"
            parts.append(f"{name!r} failed to start ({error})")
        else:
            parts.append(f"{name!r} did not answer")
    return f"no MCP server came up with a tool to route: {'; '.join(parts)}"


async def serve_stdio(gateway: Gateway) -> None:
    """Serve one client over this process's stdin and stdout until it closes them.

    **Cancellation:** cancelling stops at once, even while stdin is a terminal that
    nobody types into (its pending read is abandoned, not waited for).
    """
    stdin: Any = StdinLines(sys.stdin.fileno())
    async with stdio_server(stdin=stdin) as (read, write):
        await gateway.server.run(read, write, gateway.initialization_options())


class StdinLines:
    """The lines of file descriptor ``fd`` (UTF-8, undecodable bytes replaced), for the
    MCP stdio transport.

    The transport's own reader waits for a worker thread's ``readline``, which a
    cancellation cannot interrupt: a stop would wait for the next line or end of input.
    Here each read is a raw ``os.read`` in a thread that a cancellation abandons (no buffer
    lock held, so the interpreter can exit while it is blocked).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending = b""
        self._ended = False

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while b"\n" not in self._pending and not self._ended:
            chunk = await trio.to_thread.run_sync(
                os.read, self._fd, _READ_BYTES, abandon_on_cancel=True
            )
            self._ended = not chunk
            self._pending += chunk
        if not self._pending:
            raise StopAsyncIteration
        line, end, self._pending = self._pending.partition(b"\n")
        return (line + end).decode("utf-8", "replace")


_READ_BYTES = 1 << 16


async def serve_http(
    gateway: Gateway,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` (hypercorn on trio) until
    cancelled; ``started`` with the URL once it listens (``port=0`` picks a free one).

    Raises:
        ConfigError: it cannot listen there (the port is in use, the address is not this
            machine's, or the like).
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    app: Any = gateway.server.streamable_http_app(host=host)  # an ASGI app, as hypercorn takes
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None  # stdout and stderr stay the operator's
    config.errorlog = None
    try:  # said in one line here; from inside hypercorn it comes nested in groups
        for listener in await trio.open_tcp_listeners(port, host=host):
            await listener.aclose()
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(functools.partial(serve, app, config, mode="asgi"))
        task_status.started(f"{binds[0]}/mcp")
