"""``toolroute mcp``: a routed MCP gateway in front of the servers of an ``mcpServers``
config (``server.py`` answers, ``listing.py`` decides what is listed, ``run.py`` serves)."""
