"""Route over several MCP servers' ``tools/list`` results, with an always-on tool.

python examples/mcp_servers.py
"""

from __future__ import annotations

from toolroute import Catalog, ToolIndex

SERVERS = {
    "github": {
        "tools": [
            {
                "name": "search",
                "description": "Search code across repositories.",
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
            {
                "name": "create_issue",
                "description": "Open an issue in a repository.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"repo": {"type": "string"}, "title": {"type": "string"}},
                },
            },
        ]
    },
    "web": {
        "tools": [
            {
                "name": "search",
                "description": "Search the web.",
                "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
            {
                "name": "fetch_url",
                "description": "Download a page and return it as Markdown.",
                "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}},
            },
        ]
    },
    "memory": {
        "tools": [
            {
                "name": "remember",
                "description": "Store a fact about the user for later.",
                "inputSchema": {"type": "object", "properties": {"fact": {"type": "string"}}},
            },
        ]
    },
}


def main() -> None:
    catalog = Catalog.from_mcp_servers(SERVERS)
    print("tool ids:", catalog.ids)  # "search" clashes: github__search, web__search
    index = ToolIndex(catalog)
    for query in ["find where we parse the config file in our repo", "read this article for me"]:
        selection = index.select(query, max_tools=2, always_active=["remember"])
        print(f"{query!r}: {list(zip(selection.tool_ids, selection.sources, strict=False))}")


if __name__ == "__main__":
    main()
