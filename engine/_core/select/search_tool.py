"""The ``search_tools`` meta-tool: let the agent ask for a capability it cannot see.

Give the model this tool (always active); when it calls it, run ``Engine.search_tools`` and
return the result as the tool's output. The tools it finds are shown on the session's next
step.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

NAME = "search_tools"
DESCRIPTION = (
    "Search for available tools by describing what you need. Use this when you need a "
    "capability that isn't in your current tools."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What you want to do, in a few words."}
    },
    "required": ["query"],
    "additionalProperties": False,
}
HINT = "The tools listed above are available on your next step. Call the one that best matches your need."


def search_tools_definition(format: str = "openai") -> dict[str, Any]:
    """The meta-tool's definition for ``openai`` (Chat Completions), ``openai-responses``,
    ``anthropic`` or ``mcp``.

    Raises:
        ConfigError: an unknown format.
    """
    match format:
        case "openai":
            return {
                "type": "function",
                "function": {"name": NAME, "description": DESCRIPTION, "parameters": PARAMETERS},
            }
        case "openai-responses":
            return {
                "type": "function",
                "name": NAME,
                "description": DESCRIPTION,
                "parameters": PARAMETERS,
            }
        case "anthropic":
            return {"name": NAME, "description": DESCRIPTION, "input_schema": PARAMETERS}
        case "mcp":
            return {
                "name": NAME,
                "title": "Search tools",
                "description": DESCRIPTION,
                "inputSchema": PARAMETERS,
                "annotations": {"readOnlyHint": True, "openWorldHint": False},
            }
    raise ConfigError(
        f"unknown tool format {format!r}; expected openai, openai-responses, anthropic or mcp"
    )


def read_arguments(arguments: object) -> str:
    """The ``query`` of a ``search_tools`` call (a dict or its JSON text).

    Raises:
        ConfigError: the arguments are not an object with a string ``query``.
    """
    if isinstance(arguments, str):
        import json

        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"search_tools arguments are not JSON: {exc.msg}") from None
    if not isinstance(arguments, dict) or not isinstance(arguments.get("query"), str):
        raise ConfigError(f"search_tools expects {{'query': string}}, got {str(arguments)[:80]!r}")
    return str(arguments["query"])
