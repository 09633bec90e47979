"""Run the gateway: connect the upstream servers, open an engine that follows them, serve
MCP over stdio or streamable HTTP until the client leaves (stdio) or the task is cancelled."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

import trio
from mcp.server.stdio import stdio_server

from .._core.config import EngineConfig
from .._runtime.engine import open_engine
from ..integrations.mcp import McpConfig, open_mcp_catalog
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
    following their tools; the notifier runs until the block ends."""
    options: dict[str, Any] = {} if embedder is _DEFAULT else {"embedder": embedder}
    async with (
        open_mcp_catalog(servers, config=mcp_config) as live,
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


async def serve_stdio(gateway: Gateway) -> None:
    """Serve one client over this process's stdin and stdout until it closes them."""
    async with stdio_server() as (read, write):
        await gateway.server.run(read, write, gateway.initialization_options())


async def serve_http(
    gateway: Gateway,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` (hypercorn on trio) until
    cancelled; ``started`` with the URL once it listens (``port=0`` picks a free one)."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    app: Any = gateway.server.streamable_http_app(host=host)  # an ASGI app, as hypercorn takes
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None  # stdout and stderr stay the operator's
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(functools.partial(serve, app, config, mode="asgi"))
        task_status.started(f"{binds[0]}/mcp")
