"""What the gateway lists and answers: its two own tools, the activation rule, the search
reply. Plain functions and one small state class; the server shell (``server.py``) moves
the messages."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import mcp_types as types

from .._core.catalog.catalog import Catalog, Tool

SEARCH = "search_tools"
CALL = "call_tool"

#: Tools one search returns (and activates) unless the client asks for another number.
DEFAULT_RESULTS = 5
MAX_RESULTS = 50

SEARCH_TOOL = types.Tool(
    name=SEARCH,
    description=(
        "Find the tools for a task among every tool of the connected MCP servers. Describe "
        "the task in plain words; the tools found are added to your tool list (call them "
        f"directly, or through {CALL} if your tool list does not refresh)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what you want to do"},
            "max_tools": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "description": f"how many tools to return ({DEFAULT_RESULTS})",
            },
        },
        "required": ["query"],
    },
)
CALL_TOOL = types.Tool(
    name=CALL,
    description=(
        f"Call any tool of the connected MCP servers by the name {SEARCH} gave, with its "
        "arguments (for tools not in your tool list yet)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "the tool's name"},
            "arguments": {"type": "object", "description": "the tool's arguments"},
        },
        "required": ["name"],
    },
)
OWN_TOOLS = (SEARCH_TOOL, CALL_TOOL)
OWN_NAMES = frozenset(tool.name for tool in OWN_TOOLS)


@attrs.define
class Activations:
    """The tools each client connection sees beside the gateway's own, most recent last.

    Bounded twice: ``limit`` tools per connection (the oldest activation leaves first) and
    ``connections`` connections (the least recently used is forgotten)."""

    limit: int = 64
    connections: int = 1024
    _active: OrderedDict[str, OrderedDict[str, None]] = attrs.field(factory=OrderedDict)
    _everything: set[str] = attrs.field(factory=set)

    def activate(self, connection: str, tool_ids: Iterable[str]) -> bool:
        """Add ``tool_ids`` to what ``connection`` sees; whether its listing changed."""
        active = self._of(connection)
        before = tuple(active)
        for tool_id in tool_ids:
            active.pop(tool_id, None)
            active[tool_id] = None
        while len(active) > self.limit:
            active.popitem(last=False)
        return tuple(active) != before

    def show_everything(self, connection: str) -> bool:
        """Fail-open: ``connection`` sees every tool from now on; whether that is new."""
        self._of(connection)
        new = connection not in self._everything
        self._everything.add(connection)
        return new

    def listing(self, connection: str, served: Catalog) -> tuple[str, ...]:
        """The ids ``connection`` sees, in catalogue order (a stable prefix for prompt caches);
        ids no longer served are left out."""
        if connection in self._everything:
            return served.ids
        active = self._of(connection)
        return tuple(tool_id for tool_id in served.ids if tool_id in active)

    def _of(self, connection: str) -> OrderedDict[str, None]:
        active = self._active.pop(connection, None)
        if active is None:
            active = OrderedDict()
        self._active[connection] = active  # most recently used last
        while len(self._active) > self.connections:
            forgotten, _ = self._active.popitem(last=False)
            self._everything.discard(forgotten)
        return active


def search_arguments(arguments: Mapping[str, Any] | None) -> tuple[str, int] | str:
    """``(query, max_tools)`` from a ``search_tools`` call, or what is wrong with it (a
    message the model can act on)."""
    arguments = arguments or {}
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        return f"{SEARCH} expects {{'query': '<what you want to do>'}}, got {dict(arguments)!r}"
    count = arguments.get("max_tools", DEFAULT_RESULTS)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RESULTS:
        return f"{SEARCH}: max_tools must be an integer from 1 to {MAX_RESULTS}, got {count!r}"
    return query, count


def call_arguments(arguments: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` from a ``call_tool`` call, or what is wrong with it."""
    arguments = arguments or {}
    name, inner = arguments.get("name"), arguments.get("arguments", {})
    if not isinstance(name, str) or not name:
        return f"{CALL} expects {{'name': '<tool name>', 'arguments': {{...}}}}, got {dict(arguments)!r}"
    if not isinstance(inner, dict):
        return f"{CALL}: 'arguments' must be an object, got {type(inner).__name__}"
    return name, inner


def search_reply(
    found: Sequence[str], served: Catalog, *, listed: bool, failed_open: str = ""
) -> types.CallToolResult:
    """The answer to ``search_tools``: the tools found, with their descriptions and
    parameters, and how to call them."""
    tools = [
        {
            "name": client_name(served[tool_id]),
            "description": served[tool_id].description,
            "input_schema": dict(served[tool_id].parameters),
        }
        for tool_id in found
        if tool_id in served
    ]
    how = (
        "They are now in your tool list; call them directly" if listed else "Call them directly"
    ) + f", or with {CALL}(name=..., arguments=...)."
    payload: dict[str, Any] = {"tools": tools, "hint": how}
    if failed_open:
        payload["hint"] = (
            f"Search is unavailable ({failed_open}); every tool is now in your tool list and "
            f"reachable with {CALL}. " + how
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(payload))],
        structured_content=payload,
    )


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def client_name(tool: Tool) -> str:
    """The name clients see for an upstream tool: its id (``server__name`` when the name is
    on several servers), or ``server__name`` when its id is one of the gateway's own tools'
    names (an upstream ``search_tools`` never shadows the gateway's)."""
    if tool.id in OWN_NAMES and tool.server:
        return f"{tool.server}__{tool.name}"
    return tool.id


def catalogue_id(name: str, catalog: Catalog) -> str:
    """The catalogue id of the upstream tool clients call ``name`` (``client_name``'s inverse;
    any other name is taken as an id)."""
    for tool_id in OWN_NAMES:
        if tool_id in catalog and client_name(catalog[tool_id]) == name:
            return tool_id
    return name


def listed_tool(name: str, definition: types.Tool) -> types.Tool:
    """An upstream tool as the gateway lists it: the server's definition under the name
    clients call it by (``client_name``)."""
    if definition.name == name:
        return definition
    return definition.model_copy(update={"name": name})
