"""The routed MCP gateway: one MCP server in front of the servers of an ``mcpServers``
config.

A client first sees two tools, ``search_tools`` and ``call_tool``. ``search_tools`` ranks
every upstream tool with the engine and adds the tools found to that client's list
(``notifications/tools/list_changed`` tells it to list again); ``call_tool`` reaches any
upstream tool for clients that do not refresh. A call to an upstream tool, listed or not, is
forwarded to the server that owns it, and its result, error and progress come back as the
server sent them.

Fail-open: when search fails (the engine raised, or its result failed open), that client's
list becomes every tool, and every tool stays callable by name whatever the list shows.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio
from mcp import MCPError
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import ToolsListChanged
from pydantic import ValidationError

from .. import __version__
from .._core.catalog.catalog import Catalog
from .._core.errors import CatalogError
from .._core.events import CatalogUpdated
from .._core.outcome import Outcome
from .._core.recall.index import brief
from ..integrations.mcp import LiveCatalog, McpServerUnavailable
from .listing import (
    CALL,
    OWN_TOOLS,
    SEARCH,
    Activations,
    call_arguments,
    catalogue_id,
    client_name,
    error_result,
    listed_tool,
    search_arguments,
    search_reply,
)

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.models import InitializationOptions
    from mcp.server.session import ServerSession

    from .._runtime.facade import Engine

#: How long one client may take to accept a list-changed notice before it is forgotten
#: (until it lists again), so that a client that stopped reading holds up no other.
NOTIFY_S = 5.0
#: The one connection of a stdio gateway (HTTP connections are told apart by session id).
STDIO = "stdio"

INSTRUCTIONS = (
    f"This server routes to the tools of many MCP servers. Call {SEARCH} with the task in "
    f"plain words to find the right tools; they are then added to your tool list. Tools not "
    f"in the list can be called with {CALL}."
)


class Gateway:
    """The gateway's MCP server over a live catalogue and an engine that follows it.

    Args:
        live: the upstream servers' tools and connections.
        engine: the engine that ranks them (following ``live``).
        limit: tools a connection sees beside the gateway's own (the oldest found leaves).
    """

    def __init__(self, live: LiveCatalog, engine: Engine, *, limit: int = 64) -> None:
        self.live = live
        self.engine = engine
        self.activations = Activations(limit=limit)
        self._sessions: dict[str, ServerSession] = {}
        self._bus = InMemorySubscriptionBus()
        self.server: Server[Any] = Server(
            "toolroute",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self._bus),
        )

    def initialization_options(self) -> InitializationOptions:
        return self.server.create_initialization_options(NotificationOptions(tools_changed=True))

    @property
    def served(self) -> Catalog:
        """The tools the gateway offers: the engine's catalogue after dedup."""
        return self.engine.index.catalog

    async def run_notifier(self) -> None:
        """Tell every client to list again whenever the upstream catalogue changed (once
        the engine serves the new one, so the listing they fetch is the new one)."""
        async with self.engine.subscribe(buffer=64) as deliveries:
            async for delivery in deliveries:
                if isinstance(delivery.event, CatalogUpdated) or delivery.dropped:
                    await self._notify_all()

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        connection = _connection(ctx)
        self._remember(connection, ctx.session)
        served = self.served
        tools = [*OWN_TOOLS]
        for tool_id in self.activations.listing(connection, served):
            try:
                name = client_name(served[tool_id])
                tools.append(listed_tool(name, self.live.definition(tool_id)))
            except CatalogError:  # its server's list changed since the engine's snapshot
                continue
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name == SEARCH:
            return await self._search(ctx, params.arguments)
        if params.name == CALL:
            parsed = call_arguments(params.arguments)
            if isinstance(parsed, str):
                return error_result(parsed)
            name, arguments = parsed
            return await self._forward(ctx, name, arguments)
        return await self._forward(ctx, params.name, params.arguments)

    async def _search(
        self, ctx: ServerRequestContext[Any], arguments: dict[str, Any] | None
    ) -> types.CallToolResult:
        parsed = search_arguments(arguments)
        if isinstance(parsed, str):
            return error_result(parsed)  # the model's mistake: it can correct the call
        query, count = parsed
        connection = _connection(ctx)
        self._remember(connection, ctx.session)
        found: tuple[str, ...] = ()
        failure = ""
        try:
            selection = await self.engine.select(query, max_tools=count, adaptive=False)
        except Exception as exc:  # search is down: fail open, never fewer tools
            failure = brief(exc)
        else:
            found = selection.tool_ids
            if selection.outcome is Outcome.FAILED_OPEN:
                failure = selection.reason or "search failed open"
        if failure:
            changed = self.activations.show_everything(connection)
        else:
            changed = self.activations.activate(connection, found)
        if changed:
            await self._notify(ctx)
        return search_reply(found, self.served, listed=True, failed_open=failure)

    async def _forward(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any] | None
    ) -> types.CallToolResult:
        token = ctx.meta.get("progress_token") if ctx.meta else None
        relay = None
        if token is not None:
            session, request = ctx.session, str(ctx.request_id) if ctx.request_id else None

            async def relay(progress: float, total: float | None, message: str | None) -> None:
                await session.send_progress_notification(
                    token, progress, total=total, message=message, related_request_id=request
                )

        tool_id = catalogue_id(name, self.live.catalog)
        try:
            return await self.live.call_tool(tool_id, arguments, progress=relay)
        except CatalogError as exc:
            return error_result(f"{exc}; find tools with {SEARCH}")
        except McpServerUnavailable as exc:
            return error_result(str(exc))
        except MCPError as exc:
            if exc.code != types.CONNECTION_CLOSED:
                raise  # the upstream's protocol error, passed on as it came
            # Not the server's answer but its connection breaking (a crash mid-call): said
            # as what it is, not as this client's own connection closing.
            return error_result(
                f"{self._server(tool_id)} closed the connection during the call "
                f"({exc.message}); the gateway reconnects it, so the call can be tried again"
            )
        except ValidationError as exc:
            # The server's answer is not a tool result. Raised, the SDK would tell the client
            # its own request's parameters were invalid.
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"])) or "result"
            return error_result(
                f"{self._server(tool_id)} answered with a malformed result "
                f"({where}: {first['msg']})"
            )

    def _server(self, tool_id: str) -> str:
        """``MCP server 'name'`` for the server of ``tool_id``, for a message."""
        try:
            return f"MCP server {self.live.catalog[tool_id].server!r}"
        except KeyError:  # its server's list changed during the call
            return f"the MCP server of {tool_id!r}"

    def _remember(self, connection: str, session: ServerSession) -> None:
        """Keep the latest session of ``connection`` to notify it later; as many
        connections as the activations keep, the least recently seen forgotten first."""
        self._sessions.pop(connection, None)
        self._sessions[connection] = session
        while len(self._sessions) > self.activations.connections:
            del self._sessions[next(iter(self._sessions))]

    async def _notify(self, ctx: ServerRequestContext[Any]) -> None:
        # On this request's stream (streamable HTTP) and on the bus for 2026-07-28 clients.
        request = str(ctx.request_id) if ctx.request_id is not None else None
        # Suppressed: the client left; its next listing is fresh anyway.
        with contextlib.suppress(MCPError, trio.BrokenResourceError, trio.ClosedResourceError):
            await ctx.session.send_notification(types.ToolListChangedNotification(), request)
        await self._bus.publish(ToolsListChanged())

    async def _notify_all(self) -> None:
        # Side by side, each bounded: a client that stopped reading holds up only itself.
        async with trio.open_nursery() as nursery:
            for connection, session in list(self._sessions.items()):
                nursery.start_soon(self._notify_one, connection, session)
        await self._bus.publish(ToolsListChanged())

    async def _notify_one(self, connection: str, session: ServerSession) -> None:
        gone = False
        with trio.move_on_after(NOTIFY_S) as waited:
            try:
                await session.send_tool_list_changed()
            except (MCPError, trio.BrokenResourceError, trio.ClosedResourceError):
                gone = True
        if (gone or waited.cancelled_caught) and self._sessions.get(connection) is session:
            del self._sessions[connection]  # forgotten until it lists again


def _connection(ctx: ServerRequestContext[Any]) -> str:
    """The client connection a request came on: its streamable-HTTP session id, or the one
    stdio connection."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is not None:
        session = headers.get("mcp-session-id")
        if session:
            return str(session)
    return STDIO
