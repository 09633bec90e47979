"""Pick the tools an agent should see for a request, from an OpenAI-style tool list.

python examples/select_tools.py "what's the weather in Oslo this weekend?"
"""

from __future__ import annotations

import sys

from toolroute import Catalog, ToolIndex

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_forecast",
            "description": "Daily weather forecast for a city for the next 7 days.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "days": {"type": "integer", "description": "How many days ahead"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_email",
            "description": "Send an email to one or more recipients.",
            "parameters": {
                "type": "object",
                "properties": {
                    "to": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Recipients",
                    },
                    "subject": {"type": "string"},
                    "body": {"type": "string"},
                },
                "required": ["to", "subject", "body"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_calendar_event",
            "description": "Create an event in the user's calendar.",
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "start": {"type": "string", "format": "date-time"},
                },
                "required": ["title", "start"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web and return the top results with titles and links.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
]


def main() -> None:
    query = " ".join(sys.argv[1:]) or "will it rain in Oslo this weekend?"
    index = ToolIndex(Catalog.from_openai(TOOLS))  # the offline default embedder
    selection = index.select(query, max_tools=2)
    print(
        f"{query!r} -> {list(selection.tool_ids)} ({selection.outcome}, {selection.latency_ms:.1f} ms)"
    )
    # Send only the chosen definitions to the model:
    chosen = [t for t in TOOLS if t["function"]["name"] in selection.tool_ids]
    print([t["function"]["name"] for t in chosen])


if __name__ == "__main__":
    main()
