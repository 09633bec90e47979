"""Live MCP catalogues' parts: the config reader and one upstream server's connection."""
