"""One upstream MCP server: connect, list its tools, follow ``list_changed``, reconnect.

``Upstream.run`` is a long-running task. It connects (stdio or streamable HTTP, the
handshake-era protocol, whose ``notifications/tools/list_changed`` arrive on the
connection), lists every page of tools, and then keeps two children: one relists when the
server announces a change, one pings the server so a crash is noticed while nothing else is
asked of it. When the connection fails the last known tools stay (``status`` says the
server is down and why) and it reconnects after a growing pause. A server that never starts
is reported the same way; it never stops the others.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs
import mcp_types as types
import trio
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.shared.dispatcher import ProgressFnT

from ..._core.errors import ToolrouteError
from ..._core.validators import is_number, rule
from .config import McpServerConfig

#: ``tools/list`` pages a listing may take before it is cut (a server whose cursor never ends).
MAX_PAGES = 1000

_positive = rule(lambda v: is_number(v) and v > 0, "a positive number of seconds")

ServerState = Literal["starting", "up", "down"]


class McpServerUnavailable(ToolrouteError):
    """A call went to an MCP server that is down (crashed, or never started)."""


@attrs.frozen(kw_only=True)
class McpConfig:
    """How live MCP catalogues connect and reconnect (every field in seconds).

    Attributes:
        connect_s: a server must start and list its tools within this, or it is down.
        health_interval_s: how often a quiet connection is pinged (a crash is noticed within
            about this).
        retry_initial_s, retry_max_s: the pause before the first reconnection, doubled
            after each failed one up to ``retry_max_s``.
    """

    connect_s: float = attrs.field(default=30.0, validator=_positive)
    health_interval_s: float = attrs.field(default=1.0, validator=_positive)
    retry_initial_s: float = attrs.field(default=0.5, validator=_positive)
    retry_max_s: float = attrs.field(default=30.0, validator=_positive)


@attrs.frozen(kw_only=True)
class ServerStatus:
    """What a live catalogue knows of one server.

    Attributes:
        name: the server's name in the config.
        state: ``starting`` (first connection under way), ``up``, or ``down`` (crashed or
            never started; its last known tools are still served, and it is retried).
        tools: how many tools it had when last listed.
        error: why it is down (empty when up).
        connections: how many times it connected; more than one means it was reconnected.
        failures: failed connections and crashes so far.
        retry_in_s: the pause before the next reconnection (``0`` unless down).
    """

    name: str
    state: ServerState
    tools: int = 0
    error: str = ""
    connections: int = 0
    failures: int = 0
    retry_in_s: float = 0.0


def retry_pause(failures: int, config: McpConfig) -> float:
    """The pause before reconnecting after ``failures`` consecutive failures (≥ 1)."""
    return min(config.retry_max_s, config.retry_initial_s * 2.0 ** max(0, failures - 1))


class Upstream:
    """One server of the config, its last known tools and its connection.

    Args:
        spec: the server's config entry.
        config: deadlines and retry pauses.
        changed: called (synchronously, in the trio thread) after ``tools`` or ``status``
            changed.
    """

    def __init__(
        self, spec: McpServerConfig, config: McpConfig, changed: Callable[[], None]
    ) -> None:
        self.spec = spec
        self.tools: tuple[types.Tool, ...] = ()
        self.status = ServerStatus(name=spec.name, state="starting")
        self._config = config
        self._changed = changed
        self._client: Client | None = None
        self._came_up = False
        self._started = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect and stay connected; ``started`` once the first connection listed its tools
        or failed (so a caller can wait for every server's first answer)."""
        failures = 0  # consecutive: a connection that came up starts the count again
        while True:
            self._came_up = False
            try:
                await self._serve(task_status)
                error = "the server closed the connection"
            except Exception as exc:  # the server's fault, never ours to raise: report it
                error = describe(exc)
            self._client = None
            failures = 1 if self._came_up else failures + 1
            pause = retry_pause(failures, self._config)
            self._set(
                state="down", error=error, failures=self.status.failures + 1, retry_in_s=pause
            )
            if not self._started:  # the first connection failed: that is its answer
                self._started = True
                task_status.started()
            await trio.sleep(pause)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        progress: ProgressFnT | None = None,
    ) -> types.CallToolResult:
        """Forward a ``tools/call`` to the server, its result (errors included) as it came.

        Raises:
            McpServerUnavailable: the server is down.
            mcp.MCPError: the server answered with a protocol error or the connection broke.
        """
        client = self._client
        if client is None:
            raise McpServerUnavailable(
                f"MCP server {self.spec.name!r} is down ({self.status.error or 'not connected yet'})"
            )
        return await client.call_tool(name, arguments, progress_callback=progress)

    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        relist_send, relist_receive = trio.open_memory_channel[None](1)

        async def on_message(message: IncomingMessage) -> None:
            # In the session's reader: never await a request here (its answer would be read
            # by this very task); ask the relist child instead, coalescing a burst into one.
            if isinstance(message, types.ToolListChangedNotification):
                with contextlib.suppress(trio.WouldBlock):
                    relist_send.send_nowait(None)

        # One scope for the whole connection: its deadline covers start and first listing
        # only (a scope left while the client's nursery is open would corrupt the stack).
        deadline = trio.current_time() + self._config.connect_s
        with relist_send, trio.CancelScope(deadline=deadline) as connecting:
            async with _client(self.spec, on_message) as client, trio.open_nursery() as nursery:
                tools = await list_every_page(client)
                connecting.deadline = math.inf
                self._client = client
                self.tools = tools
                self._came_up = True
                self._set(
                    state="up",
                    tools=len(tools),
                    error="",
                    connections=self.status.connections + 1,
                    retry_in_s=0.0,
                )
                if not self._started:
                    self._started = True
                    task_status.started()
                nursery.start_soon(self._relist, client, relist_receive)
                await self._watch(client)  # returns (raises) when the connection is gone
                nursery.cancel_scope.cancel("the connection is gone")
        if connecting.cancelled_caught:
            raise TimeoutError(
                f"did not start and list its tools within {self._config.connect_s:g} s"
            )

    async def _relist(self, client: Client, wakeups: trio.MemoryReceiveChannel[None]) -> None:
        async with wakeups:
            async for _ in wakeups:
                tools = await list_every_page(client)
                self.tools = tools
                self._set(tools=len(tools))

    async def _watch(self, client: Client) -> None:
        while True:
            await trio.sleep(self._config.health_interval_s)
            with warnings.catch_warnings():
                # Deprecated only for the 2026-07-28 protocol; this connection is handshake-era.
                warnings.simplefilter("ignore")
                pinging = client.session.send_ping()
            with trio.fail_after(self._config.connect_s):
                await pinging

    def _set(self, **changes: Any) -> None:
        self.status = attrs.evolve(self.status, **changes)
        self._changed()


async def list_every_page(client: Client) -> tuple[types.Tool, ...]:
    """Every tool the server lists, following ``next_cursor``, freshly fetched."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(tools)


def _client(spec: McpServerConfig, on_message: Any) -> Client:
    server: Any
    if spec.command is not None:
        server = StdioServerParameters(
            command=spec.command,
            args=list(spec.args),
            env=dict(spec.env) or None,
            cwd=spec.cwd,
        )
    elif spec.headers:
        # The SDK's own HTTP client, configured only for the headers the config names.
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        server = streamable_http_client(
            spec.url or "", http_client=httpx2.AsyncClient(headers=dict(spec.headers))
        )
    else:
        server = spec.url
    # Handshake-era protocol: change notifications come on the connection itself. No
    # response cache: every listing is asked of the server.
    return Client(server, mode="legacy", message_handler=on_message, cache=None)


def describe(exc: BaseException) -> str:
    """A one-line reason for a failed connection, from the innermost error of a group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def statuses(upstreams: Sequence[Upstream]) -> dict[str, ServerStatus]:
    return {u.spec.name: u.status for u in upstreams}
