"""Live MCP catalogues: the tools of several MCP servers, kept current as the servers change.

::

    from toolroute import open_engine
    from toolroute.integrations.mcp import open_mcp_catalog

    async with open_mcp_catalog("claude_desktop_config.json") as live:
        async with open_engine(live.catalog) as engine:
            live.follow(engine)            # every list_changed reaches the engine
            selection = await engine.select("what time is it in Tokyo")
            result = await live.call_tool(selection.tool_ids[0], {"timezone": "Asia/Tokyo"})

``open_mcp_catalog`` connects to the servers of an MCP client's ``mcpServers`` config (stdio
and streamable HTTP), lists every page of their tools, follows each server's
``notifications/tools/list_changed``, and hands every new catalogue to the engines that follow
it (``Engine.replace_catalog``: only the difference is applied). A server that crashes keeps
its last known tools (``LiveCatalog.status`` says it is down) and is reconnected with growing
pauses; a server that never starts is reported there too and never stops the others.

Needs the ``mcp`` extra (``pip install 'toolroute[mcp]'``).
"""

from .._core.public import publish as _publish
from ._mcp.config import McpServerConfig as McpServerConfig
from ._mcp.config import read_mcp_config as read_mcp_config
from ._mcp.live import LiveCatalog as LiveCatalog
from ._mcp.live import open_mcp_catalog as open_mcp_catalog
from ._mcp.upstream import McpConfig as McpConfig
from ._mcp.upstream import McpServerUnavailable as McpServerUnavailable
from ._mcp.upstream import ServerStatus as ServerStatus

__all__ = [
    "LiveCatalog",
    "McpConfig",
    "McpServerConfig",
    "McpServerUnavailable",
    "ServerStatus",
    "open_mcp_catalog",
    "read_mcp_config",
]

_publish(__name__, globals())
