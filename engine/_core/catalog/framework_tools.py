"""Tools as agent frameworks hold them, read by their shape (the core imports no framework).

- OpenAI Agents SDK ``FunctionTool``: ``name``, ``description``, ``params_json_schema``; one
  put in a namespace (``tool_namespace(...)``) has the namespace as its server;
- Pydantic AI ``ToolDefinition`` (``parameters_json_schema``) and ``Tool`` (its ``tool_def``);
- LangChain ``BaseTool``: ``name``, ``description`` and the JSON Schema of its
  ``tool_call_schema`` (the arguments the model fills; injected ones left out), else of its
  ``args_schema``;
- MCP SDK ``Tool`` and any other pydantic model: its ``model_dump(by_alias=True)``, read as a
  definition dict;
- plain Python functions (see ``functions``);
- an OpenAI Responses ``namespace`` tool: its member functions, the namespace as their server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import CatalogError
from . import readers
from .functions import function_tool, is_plain_function
from .tool import Tool

EXPECTED = (
    "a Tool, a tool definition dict (OpenAI, Anthropic, Gemini, MCP or plain), an Agents "
    "FunctionTool, a Pydantic AI ToolDefinition or Tool, a LangChain BaseTool, an MCP Tool "
    "or a Python function"
)


def read_tools(tools: Iterable[object], *, server: str | None = None) -> list[Tool]:
    """One ``Tool`` per object, in order.

    Raises:
        CatalogError: an object of no known shape (naming its index and type), or a
            malformed definition (naming the tool and the field).
    """
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise CatalogError(f"expected a list of tools ({EXPECTED}), got {type(tools).__name__}")
    readers.check_server(server)
    read: list[Tool] = []
    for index, tool in enumerate(tools):
        members = readers.namespace_members(index, tool)
        if members is None:
            read.append(read_tool(index, tool, server if server is not None else _namespace(tool)))
        else:  # each member on the namespace as its server, unless ``server`` overrides
            namespace = server if server is not None else members[0]
            read.extend(read_tool(index, member, namespace) for member in members[1])
    return readers.qualify_clashes(read)


def _namespace(tool: object) -> str | None:
    """The namespace an Agents SDK ``FunctionTool`` was put in (``tool_namespace``), if any."""
    if not hasattr(tool, "params_json_schema"):
        return None
    namespace = _attribute(tool, "_tool_namespace")
    return namespace if isinstance(namespace, str) and namespace else None


def read_tool(index: int, tool: object, server: str | None = None) -> Tool:
    if isinstance(tool, Tool):
        return tool
    if isinstance(tool, Mapping):
        return readers.read_item(index, tool, server=server)
    definition = _definition(index, tool)
    if definition is not None:
        return readers.read_item(index, definition, server=server)
    if is_plain_function(tool):
        return function_tool(index, tool, server)  # type: ignore[arg-type]
    dumped = readers.dumped(tool)
    if dumped is not None:
        return readers.read_item(index, dumped, server=server)
    raise CatalogError(
        f"tool {index}: cannot read a value of type {type(tool).__name__!r} as a tool; expected {EXPECTED}"
    )


def _definition(index: int, tool: object) -> dict[str, Any] | None:
    """A framework tool object as a plain definition dict, or ``None``: not one of them."""
    tool_def = _attribute(tool, "tool_def")  # Pydantic AI Tool
    if tool_def is not None and hasattr(tool_def, "parameters_json_schema"):
        tool = tool_def
    for key in ("params_json_schema", "parameters_json_schema"):  # Agents, Pydantic AI
        if hasattr(tool, key):
            return {
                "name": _attribute(tool, "name"),
                "description": _attribute(tool, "description"),
                "parameters": _attribute(tool, key),
            }
    if hasattr(tool, "tool_call_schema") or hasattr(tool, "args_schema"):  # LangChain
        schema = _langchain_schema(index, tool)
        return {
            "name": _attribute(tool, "name"),
            "description": _attribute(tool, "description"),
            "parameters": schema,
        }
    return None


def _langchain_schema(index: int, tool: object) -> dict[str, Any]:
    for key in ("tool_call_schema", "args_schema"):
        schema = _attribute(tool, key)
        if schema is None:
            continue
        if isinstance(schema, Mapping):
            found: object = schema
        else:
            describe = getattr(schema, "model_json_schema", None)
            if not callable(describe):
                continue
            try:
                found = describe()
            except Exception as exc:  # a caller's model that cannot describe itself
                raise CatalogError(
                    f"tool {index} ({_attribute(tool, 'name')!r}): cannot read its {key}: {exc}"
                ) from exc
        if isinstance(found, Mapping):
            # The model's title and docstring repeat the tool's name and description.
            return {k: v for k, v in found.items() if k not in ("title", "description")}
    return {}


def _attribute(value: object, name: str) -> Any:
    try:
        return getattr(value, name, None)
    except Exception:  # a property that fails is a missing attribute here
        return None
