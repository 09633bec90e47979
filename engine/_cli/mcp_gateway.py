"""``toolroute mcp``: serve the routed MCP gateway over the servers of an ``mcpServers``
config (stdio for an MCP client's config line, or streamable HTTP)."""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from .._core.errors import ConfigError, ToolrouteError
from .inputs import positive_float, positive_int


def add_mcp_command(commands: Any) -> None:
    """Register ``toolroute mcp`` on the command parser's sub-parsers."""
    mcp = commands.add_parser(
        "mcp",
        help="serve a routed MCP gateway in front of the servers of an mcpServers config",
        description=(
            "One MCP server in front of many: clients see search_tools and call_tool, and the "
            "tools they find. The config is an MCP client's own file ({'mcpServers': {...}})."
        ),
    )
    mcp.add_argument("--config", required=True, help="the mcpServers JSON file")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="(stdio)")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP host (127.0.0.1)")
    mcp.add_argument("--port", type=int, default=8000, help="HTTP port (8000)")
    mcp.add_argument(
        "--embedder", choices=("minilm", "hashing", "none"), default="minilm", help="(minilm)"
    )
    mcp.add_argument(
        "--dedup", action="store_true", help="fold near-identical tools of different servers"
    )
    mcp.add_argument(
        "--max-active",
        type=positive_int,
        default=64,
        help="tools a client's list holds besides the gateway's own (64)",
    )
    mcp.add_argument(
        "--connect-timeout",
        type=positive_float,
        default=30.0,
        help="seconds a server has to start and list its tools before it is down (30)",
    )
    mcp.set_defaults(run=run_mcp)


def run_mcp(args: argparse.Namespace) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        print(
            "toolroute: error: 'toolroute mcp' needs the mcp extra: pip install 'toolroute[mcp]'",
            file=sys.stderr,
        )
        return 2
    import trio

    from .._core.config import DedupConfig, EngineConfig
    from .._gateway.run import open_gateway, serve_http, serve_stdio
    from ..integrations.mcp import McpConfig, read_mcp_config

    servers = read_mcp_config(args.config)  # a mistake in the file fails here, in one line
    if not servers:  # said before a model loads
        raise ConfigError(
            f"MCP config {args.config!r} lists no servers: expected at least one enabled "
            "server under 'mcpServers' (or 'servers'), got none"
        )
    embedder: Any
    if args.embedder == "none":
        embedder = None
    elif args.embedder == "hashing":
        from ..providers import HashingEmbedder

        embedder = HashingEmbedder()
    else:
        from ..providers import default_embedder

        embedder = default_embedder()
    config = EngineConfig(dedup=DedupConfig(enabled=args.dedup))

    async def serve() -> None:
        async with open_gateway(
            servers,
            engine_config=config,
            embedder=embedder,
            mcp_config=McpConfig(connect_s=args.connect_timeout),
            limit=args.max_active,
        ) as gateway:
            if args.transport == "stdio":
                await serve_stdio(gateway)
                return
            async with trio.open_nursery() as nursery:
                serving = functools.partial(serve_http, gateway, host=args.host, port=args.port)
                url = await nursery.start(serving)
                print(f"toolroute mcp: serving {url}", file=sys.stderr)

    try:
        trio.run(_until_signalled, serve)
    except BaseExceptionGroup as group:  # the gateway fails inside the signal watch's nursery
        error = _one_error(group)
        if error is group:
            raise
        raise error from group
    print("toolroute mcp: stopped", file=sys.stderr, flush=True)
    return 0


async def _until_signalled(serve: Callable[[], Awaitable[None]]) -> None:
    """Run ``serve`` until it returns (the stdio client left) or SIGINT or SIGTERM comes;
    a signal cancels it, and leaving the gateway closes every upstream server."""
    import trio

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for received in signals:
                    nursery.cancel_scope.cancel(f"{signal.Signals(received).name}: stop")
                    return

            nursery.start_soon(stop_on_signal)
            await serve()
            nursery.cancel_scope.cancel("served")


def _one_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The mistake inside ``group`` when every failure in it is a ``ToolrouteError`` (said in
    one line); otherwise the group itself."""
    mistakes, others = group.split(ToolrouteError)
    if mistakes is None or others is not None:
        return group
    first: BaseException = mistakes
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first
