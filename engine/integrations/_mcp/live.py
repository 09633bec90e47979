"""The live catalogue: the tools of several MCP servers, kept current as the servers change.

``open_mcp_catalog`` connects to the servers of an MCP client's ``mcpServers`` config (stdio
and streamable HTTP), lists every page of their tools, follows each server's
``notifications/tools/list_changed``, and hands every new catalogue to the engines that
follow it (``LiveCatalog.follow``), which apply only the difference. A server that crashes
keeps its last known tools (its ``ServerStatus`` says it is down) and is reconnected with
growing pauses; a server that never starts is reported there too and never stops the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio
from mcp.shared.dispatcher import ProgressFnT

from ..._core.catalog.catalog import Catalog, Tool
from ..._core.errors import CatalogError, ConfigError, ToolrouteError, holds_only
from .config import McpServerConfig, read_mcp_config

if TYPE_CHECKING:
    from ..._runtime.facade import Engine

from .upstream import (
    McpConfig,
    ServerStatus,
    Upstream,
    describe,
    statuses,
)


class LiveCatalog:
    """The current tools of every configured server; made by ``open_mcp_catalog``.

    Attributes:
        version: grows by one whenever a server's tool list changed.
        follower_error: why a following engine last refused a catalogue (empty if none
            did); that engine keeps the catalogue before and gets the next change.
        read_error: why the servers' latest listings could not be read together (two
            servers' tools ending with one id); the catalogue before is kept.
    """

    def __init__(self, specs: Sequence[McpServerConfig], config: McpConfig) -> None:
        names = [s.name for s in specs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"MCP server names must be unique: {', '.join(map(repr, twice))}")
        self._upstreams = {s.name: Upstream(s, config, self._on_change) for s in specs}
        self._listed: dict[str, tuple[types.Tool, ...]] = dict.fromkeys(names, ())
        self._catalog = Catalog([])
        self._skipped: dict[str, int] = {}
        self._definitions: dict[tuple[str, str], types.Tool] = {}
        self.version = 0
        self._changed = trio.Event()
        self._followers: list[Engine] = []
        #: Why a following engine last refused a catalogue (empty if none did).
        self.follower_error = ""
        #: Why the servers' latest listings could not be read together (the catalogue
        #: before is kept); empty when they could.
        self.read_error = ""

    @property
    def catalog(self) -> Catalog:
        """Every server's last known tools; ids ``server__name`` where names clash."""
        return self._catalog

    @property
    def status(self) -> Mapping[str, ServerStatus]:
        """Each server's state (``up``, ``down``, ``starting``), tool count and last error."""
        return statuses(list(self._upstreams.values()))

    @property
    def skipped(self) -> Mapping[str, int]:
        """Per server, how many listed tools could not be read (and are not served)."""
        return dict(self._skipped)

    def definition(self, tool_id: str) -> types.Tool:
        """The tool as its server listed it (``outputSchema``, ``annotations``, ``_meta``
        included), by catalogue id.

        Raises:
            CatalogError: no tool has that id.
        """
        tool = self._tool(tool_id)
        assert tool.server is not None  # every tool read here has its server
        return self._definitions[tool.server, tool.name]

    def follow(self, engine: Engine) -> None:
        """Hand ``engine`` every new catalogue from now on (``engine.replace_catalog``),
        starting with the current one if it differs. An engine that closed is dropped."""
        self._followers.append(engine)
        self._wake()

    async def wait_changed(self, version: int) -> int:
        """Wait until ``version`` is behind (a tool list changed since), then the new one."""
        while self.version <= version:
            await self._changed.wait()
        return self.version

    async def wait_status_change(self) -> None:
        """Wait for the next change of any server's tools or status."""
        await self._changed.wait()

    async def call_tool(
        self,
        tool_id: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: ProgressFnT | None = None,
    ) -> types.CallToolResult:
        """Call a tool on the server that owns it, by its catalogue id.

        Args:
            tool_id: the tool's id in ``catalog`` (``server__name`` for a clashing name).
            arguments: its arguments.
            progress: awaited with ``(progress, total, message)`` for each progress
                notification the server sends.

        Returns:
            The server's result as it came (``is_error`` for a tool's own failure).

        Raises:
            CatalogError: no tool has that id.
            McpServerUnavailable: the owning server is down.
            mcp.MCPError: the server answered with a protocol error, or the connection broke.
        """
        tool = self._tool(tool_id)
        assert tool.server is not None  # every tool read here has its server
        return await self._upstreams[tool.server].call_tool(tool.name, arguments, progress)

    def _tool(self, tool_id: str) -> Tool:
        try:
            return self._catalog[tool_id]
        except KeyError:
            raise CatalogError(
                f"no tool with id {tool_id!r} on the configured MCP servers "
                f"({len(self._catalog)} tools known)"
            ) from None

    async def _run_followers(self) -> None:
        given: dict[int, int] = {}  # id(engine) -> the version it was last handed
        while True:
            changed = self._changed  # a change while we hand out sets it: we look again
            for engine in list(self._followers):
                if given.get(id(engine)) == self.version:
                    continue
                version, catalog = self.version, self._catalog
                try:
                    await engine.replace_catalog(catalog)
                except RuntimeError:  # the engine closed: it follows no more
                    self._followers.remove(engine)
                    continue
                except (trio.BrokenResourceError, ToolrouteError) as exc:
                    # Its keeper restarts, or it refused this catalogue: the engine keeps
                    # serving the one before, and gets the next change.
                    self.follower_error = describe(exc)
                    continue
                given[id(engine)] = version
            await changed.wait()

    def _on_change(self) -> None:
        current = {name: u.tools for name, u in self._upstreams.items()}
        if any(current[n] is not self._listed[n] for n in current):
            self._listed = current
            try:
                self._catalog, self._skipped = _read(current)
            except CatalogError as exc:  # ids that collide across servers: keep the last good
                self.read_error = str(exc)
            else:
                self.read_error = ""
                definitions: dict[tuple[str, str], types.Tool] = {}
                for name, tools in current.items():
                    for tool in tools:  # a name listed twice: its first definition, as read
                        definitions.setdefault((name, tool.name), tool)
                self._definitions = definitions
                self.version += 1
        self._wake()

    def _wake(self) -> None:
        # A pulse: who waits now wakes; who waits from now on waits for the next change.
        self._changed.set()
        self._changed = trio.Event()


def _read(listed: Mapping[str, tuple[types.Tool, ...]]) -> tuple[Catalog, dict[str, int]]:
    """The catalogue of every server's tools; a server's unreadable tools (a server's
    fault, not the user's) are left out and counted, the rest still served."""
    try:  # the common case, read once
        return Catalog.from_mcp_servers({name: list(tools) for name, tools in listed.items()}), {}
    except CatalogError:
        pass
    readable: dict[str, list[types.Tool]] = {}
    skipped: dict[str, int] = {}
    for name, tools in listed.items():
        first: dict[str, types.Tool] = {}
        for tool in tools:
            first.setdefault(tool.name, tool)  # a name listed twice: its first definition
        good = [t for t in first.values() if _readable(t, name)]
        readable[name] = good
        if len(good) < len(tools):  # a name listed twice, or a malformed definition
            skipped[name] = len(tools) - len(good)
    return Catalog.from_mcp_servers(readable), skipped


def _readable(tool: types.Tool, server: str) -> bool:
    try:
        Catalog.from_mcp([tool], server=server)
    except CatalogError:
        return False
    return True


@contextlib.asynccontextmanager
async def open_mcp_catalog(
    servers: object, *, config: McpConfig | None = None
) -> AsyncIterator[LiveCatalog]:
    """Connect to MCP servers and keep their tools current.

    Args:
        servers: an MCP client's config (a path to its JSON file, the JSON text, or the
            parsed mapping with ``mcpServers``), or a sequence of ``McpServerConfig``.
        config: connection deadline, health checks and retry pauses.

    Yields:
        The ``LiveCatalog``, once every server has listed its tools or failed its first
        connection (failures are in ``status``; none is raised).

    Raises:
        ConfigError: the config is malformed (it names the server and the field).

    An exception raised in the block, alone, propagates as itself (not in a group).

    **Cancellation:** leaving the block (or cancelling it) closes every connection and
    stops every server process the catalogue started.

    **Fail-open:** a server that is down keeps its last known tools (none if it never
    started) and is reconnected; a tool a server lists malformed is left out and counted in
    ``skipped``.
    """
    config = config if config is not None else McpConfig()
    if not isinstance(config, McpConfig):
        raise ConfigError(f"config must be an McpConfig, got {type(config).__name__}")
    if isinstance(servers, Sequence) and not isinstance(servers, str):
        specs = tuple(servers)
        if not all(isinstance(s, McpServerConfig) for s in specs):
            raise ConfigError("servers must be an MCP config or a sequence of McpServerConfig")
    else:
        specs = read_mcp_config(servers)
    live = LiveCatalog(specs, config)
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as starting:  # every server's first answer, at once
                for upstream in live._upstreams.values():
                    starting.start_soon(nursery.start, upstream.run)
            nursery.start_soon(live._run_followers)
            try:
                yield live
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                nursery.cancel_scope.cancel("the live MCP catalogue closed")
    except BaseExceptionGroup as group:
        if body_error is not None and holds_only(group, body_error):
            raise body_error from None  # the caller's own error, as itself
        raise
