"""Readers from every vendor's tool-definition format into tools for a ``Catalog``.

Each reader validates at the edge and names the offending tool (index and name) and field.
Nothing the caller passed in is mutated: schemas are copied as they are read.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import attrs

from ..errors import CatalogError, ConfigError, given
from .tool import QUALIFIER, Tool, example_tuple

FORMATS = ("openai", "anthropic", "gemini", "mcp", "mcp-servers", "plain")

#: How deep a tool's schema or annotations may nest (objects and arrays), far past any real
#: schema: an explicit bound reads alike on every Python (3.12 recurses less per level).
MAX_NESTING = 200
_PARAMETER_KEYS = ("parameters", "inputSchema", "input_schema", "parametersJsonSchema")


class ReadTools(NamedTuple):
    """What a reader found: the tools in order, and any server descriptions."""

    tools: list[Tool]
    server_descriptions: Mapping[str, str] = {}


def read_data(data: object, *, format: str | None = None) -> ReadTools:
    if format is None:
        format = detect_format(data)
    match format:
        case "openai":
            return _read_openai(_unwrap_tools(data, format))
        case "anthropic":
            return ReadTools(_read_items(_unwrap_tools(data, format), _anthropic_item))
        case "gemini":
            return ReadTools(_read_items(_gemini_declarations(data), _plain_item))
        case "mcp":
            return read_mcp(data)
        case "mcp-servers":
            return _read_server_list(data)
        case "plain":
            return _read_plain(data)
    raise CatalogError(f"unknown tool format {format!r}; expected one of {', '.join(FORMATS)}")


def detect_format(data: object) -> str:
    """Guess a document's format from its shape."""
    if isinstance(data, Mapping):
        if isinstance(data.get("servers"), list):
            return "mcp-servers"
        result = data.get("result")
        if "jsonrpc" in data or (isinstance(result, Mapping) and "tools" in result):
            return "mcp"
        declarations = data.get("function_declarations", data.get("functionDeclarations"))
        if isinstance(declarations, list):
            return "gemini"
        if isinstance(data.get("tools"), list):
            return _detect_item_format(data["tools"]) or "mcp"
        return "plain"
    if isinstance(data, list):
        return _detect_item_format(data) or "plain"
    raise CatalogError(f"expected a JSON list or object of tool definitions, got {_describe(data)}")


def _detect_item_format(items: Sequence[object]) -> str | None:
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "function" or "function" in item:
            return "openai"
        if "input_schema" in item:
            return "anthropic"
        if item.get("type") in ("custom", "namespace"):  # OpenAI's (Anthropic's has input_schema)
            return "openai"
        if "inputSchema" in item:
            return "mcp"
        if "function_declarations" in item or "functionDeclarations" in item:
            return "gemini"
        if "parameters" in item or "name" in item:
            return "plain"
    return None


def read_mcp(result: object, *, server: str | None = None) -> ReadTools:
    check_server(server)
    return ReadTools(_read_items(_mcp_tools(result), _mcp_item, server=server))


def check_server(server: object) -> None:
    """A ``server`` argument is a server's name or ``None``.

    Raises:
        CatalogError: anything else (an empty string, a number, a list).
    """
    if server is not None and (not isinstance(server, str) or not server):
        raise CatalogError(f"server must be a non-empty string or None, got {given(server)}")


def read_mcp_servers(servers: Mapping[str, object]) -> ReadTools:
    if not isinstance(servers, Mapping):
        raise CatalogError(
            f"expected a mapping of server name to tools/list result, got {_describe(servers)}"
        )
    tools: list[Tool] = []
    for name, result in servers.items():
        if not str(name):
            raise CatalogError("server names must be non-empty, got ''")
        try:
            tools.extend(_read_items(_mcp_tools(result), _mcp_item, server=str(name)))
        except CatalogError as exc:
            raise CatalogError(f"server {str(name)!r}: {exc}") from None
    return ReadTools(_qualify_clashes(tools))


def _read_server_list(data: object) -> ReadTools:
    servers = data.get("servers") if isinstance(data, Mapping) else None
    if not isinstance(servers, list):  # reachable with format="mcp-servers" on any data
        raise CatalogError(f"expected {{'servers': [...]}}, got {_describe(data)}")
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    for index, entry in enumerate(servers):
        if not isinstance(entry, Mapping):
            raise CatalogError(f"server {index}: expected an object, got {_describe(entry)}")
        name = entry.get("name", entry.get("id"))
        if not isinstance(name, str) or not name:
            raise CatalogError(
                f"server {index}: field 'name' must be a non-empty string, got {_describe(name)}"
            )
        description = entry.get("description") or ""
        if not isinstance(description, str):
            raise CatalogError(
                f"server {index} ({name!r}): field 'description' must be a string, got {_describe(description)}"
            )
        descriptions[name] = description
        try:
            tools.extend(_read_items(_mcp_tools(entry), _mcp_item, server=name))
        except CatalogError as exc:
            raise CatalogError(f"server {index} ({name!r}): {exc}") from None
    return ReadTools(_qualify_clashes(tools), descriptions)


def _read_plain(data: object) -> ReadTools:
    if isinstance(data, Mapping):
        if isinstance(data.get("tools"), list):
            data = data["tools"]
        else:
            _refuse_other_documents(data)
            items = []
            for name, spec in data.items():
                if not isinstance(spec, Mapping):
                    raise CatalogError(f"tool {name!r}: expected an object, got {_describe(spec)}")
                items.append({"name": name, **spec})
            data = items
    if not isinstance(data, list):
        raise CatalogError(f"expected a list of tools, got {_describe(data)}")
    return ReadTools(_qualify_clashes(_read_items(data, _plain_item)))


def _refuse_other_documents(data: Mapping[str, Any]) -> None:
    """An object that would read as ``{name: spec}`` but is another document: a clear error,
    not a catalogue of its top-level keys.

    Raises:
        CatalogError: an MCP client config, an OpenAPI document or one tool definition.
    """
    if isinstance(data.get("mcpServers"), Mapping) or _server_configs(data.get("servers")):
        raise CatalogError(
            "expected tool definitions, got an MCP client config ('mcpServers' or 'servers'"
            " naming commands to start): serve it with `toolroute mcp --config FILE`, or read"
            " each server's tools/list result with Catalog.from_mcp_servers"
        )
    if isinstance(data.get("openapi"), str) or isinstance(data.get("swagger"), str):
        raise CatalogError(
            "expected tool definitions, got an OpenAPI document: write each operation the"
            " agent may call as a function definition ({name, description, parameters})"
        )
    if isinstance(data.get("name"), str) or data.get("type") == "function":
        raise CatalogError(
            f"expected a list of tool definitions, got a single tool definition"
            f" ({_describe(data)}): put it in a list"
        )


def _server_configs(value: object) -> bool:
    """Whether ``value`` maps names to MCP server configs (each a ``command`` or a ``url``),
    as VS Code's ``servers`` does (a tool named "servers" maps to its own spec)."""
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(v, Mapping) and ("command" in v or "url" in v) for v in value.values())
    )


def read_item(index: int, item: object, *, server: str | None = None) -> Tool:
    """One definition in any format (OpenAI's nesting unwrapped; parameters under any of
    the formats' keys); ``server`` overrides the item's own."""
    item = _require_object(index, item)
    _refuse_hosted(index, item)
    for kind in ("function", "custom"):
        if kind in item or item.get("type") == kind:
            inner = item.get(kind)
            if isinstance(inner, Mapping):
                item = inner
            break
    return _build(index, item, parameter_keys=_PARAMETER_KEYS, server=server)


def namespace_members(index: int, tool: object) -> tuple[str, list[object]] | None:
    """An OpenAI Responses ``namespace`` tool's name and members; ``None`` for other tools.

    Raises:
        CatalogError: a namespace without a name or a list of member tools.
    """
    if not isinstance(tool, Mapping) or tool.get("type") != "namespace" or "tools" not in tool:
        return None
    name, members = tool.get("name"), tool.get("tools")
    if not isinstance(name, str) or not name or not isinstance(members, list):
        raise CatalogError(
            f"tool {index}: expected a namespace {{'type': 'namespace', 'name', 'tools': [...]}}, "
            f"got name {name!r} and tools of type {type(members).__name__}"
        )
    return name, members


#: Keys of a definition (or of Gemini's list of them): a hosted tool has none of them.
_DEFINITION_KEYS = frozenset(
    {"name", "description", "function", "custom", *_PARAMETER_KEYS}
    | {"function_declarations", "functionDeclarations"}
)


def _refuse_hosted(index: int, item: Mapping[str, Any]) -> None:
    """A tool the vendor runs itself (OpenAI ``{"type": "web_search"}``, Gemini
    ``{"googleSearch": {}}``) has no name or schema to rank by: a clear error, not a missing
    name. One is an object with no key of a definition and either a string ``type``
    (OpenAI's) or only keys holding objects (Gemini's, one tool or several in one object);
    anything else without a name is a definition missing its name.

    Raises:
        CatalogError: naming its type (or keys) and what to do with it.
    """
    if not _DEFINITION_KEYS.isdisjoint(item):
        return
    kind = item.get("type")
    if not isinstance(kind, str) and not (
        item and all(isinstance(v, Mapping) for v in item.values())
    ):
        return
    what = f"type {kind!r}" if isinstance(kind, str) else ", ".join(map(repr, item)) or "{}"
    raise CatalogError(
        f"tool {index}: expected a tool definition with a name, got {what}: a tool the vendor"
        " runs itself has no name or schema to rank by; leave it out of the catalogue and send"
        " it on every step"
    )


def dumped(value: object) -> Mapping[str, Any] | None:
    """A pydantic model (an MCP SDK ``Tool`` or ``ListToolsResult``, say) as its JSON dump
    under the wire's names; ``None`` for anything else."""
    dump = getattr(value, "model_dump", None)
    if not callable(dump) or isinstance(value, type):
        return None
    try:
        result = dump(mode="json", by_alias=True, exclude_none=True)
    except TypeError:  # a model_dump without pydantic's options
        result = dump()
    except Exception as exc:  # a caller's object that cannot describe itself
        raise CatalogError(f"cannot read {type(value).__name__}: {exc}") from exc
    return result if isinstance(result, Mapping) else None


def qualify_clashes(tools: list[Tool]) -> list[Tool]:
    """Give tools whose name occurs on several servers the id ``server__name`` (a tool
    without a server keeps its name)."""
    return _qualify_clashes(tools)


def _qualify_clashes(tools: list[Tool]) -> list[Tool]:
    """Give tools whose name occurs on several servers the id ``server__name`` (a tool
    without a server keeps its name; two of them sharing one are left to clash)."""
    servers_by_name: dict[str, set[str | None]] = {}
    for tool in tools:
        servers_by_name.setdefault(tool.id, set()).add(tool.server)
    clashing = {name for name, servers in servers_by_name.items() if len(servers) > 1}
    if not clashing:
        return tools
    return [
        attrs.evolve(t, id=f"{t.server}{QUALIFIER}{t.id}")
        if t.id in clashing and t.server is not None
        else t
        for t in tools
    ]


# -- item readers -----------------------------------------------------------------------------


def _read_items(items: object, read_one: Any, **extra: Any) -> list[Tool]:
    if not isinstance(items, list):
        raise CatalogError(f"expected a list of tools, got {_describe(items)}")
    return [read_one(index, item, **extra) for index, item in enumerate(items)]


def _read_openai(items: object) -> ReadTools:
    """Function and custom tools; a Responses ``namespace``'s members with the namespace as
    their server (and its description as the server's)."""
    if not isinstance(items, list):
        raise CatalogError(f"expected a list of tools, got {_describe(items)}")
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    for index, item in enumerate(items):
        members = namespace_members(index, item)
        if members is None:
            tools.append(_openai_item(index, item))
            continue
        namespace, listed = members
        tools.extend(_openai_item(index, member, server=namespace) for member in listed)
        description = item.get("description") if isinstance(item, Mapping) else None
        if isinstance(description, str) and description:
            descriptions[namespace] = description
    return ReadTools(_qualify_clashes(tools), descriptions)


def _openai_item(index: int, item: object, *, server: str | None = None) -> Tool:
    item = _require_object(index, item)
    kind = item.get("type", "function")
    if kind not in ("function", "custom"):
        raise CatalogError(
            f"tool {index}: expected an OpenAI function or custom tool, got type {kind!r}: a"
            " tool OpenAI runs itself has no name or schema to rank by; leave it out of the"
            " catalogue and send it on every step"
        )
    inner = item.get(kind)
    if inner is not None:  # Chat Completions nests the definition; Responses does not
        if not isinstance(inner, Mapping):
            raise CatalogError(
                f"tool {index}: field {kind!r} must be an object, got {_describe(inner)}"
            )
        item = inner
    # A custom tool takes free text (its ``format``), not JSON arguments: no parameters.
    return _build(index, item, parameter_keys=("parameters",), server=server)


def _anthropic_item(index: int, item: object) -> Tool:
    return _build(index, _require_object(index, item), parameter_keys=("input_schema",))


def _mcp_item(index: int, item: object, *, server: str | None = None) -> Tool:
    return _build(
        index, _require_object(index, item), parameter_keys=("inputSchema",), server=server
    )


def _plain_item(index: int, item: object) -> Tool:
    item = _require_object(index, item)
    # A list of hosted tools only is detected as no format, so it reaches this reader.
    _refuse_hosted(index, item)
    return _build(index, item, parameter_keys=_PARAMETER_KEYS)


def _build(
    index: int,
    item: Mapping[str, Any],
    *,
    parameter_keys: Sequence[str],
    server: str | None = None,
) -> Tool:
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CatalogError(
            f"tool {index}: field 'name' must be a non-empty string, got {_describe(name)}"
        )
    where = f"tool {index} ({name!r})"
    tool_id = item.get("id", name)
    if not isinstance(tool_id, str) or not tool_id:
        raise CatalogError(
            f"{where}: field 'id' must be a non-empty string, got {_describe(tool_id)}"
        )
    description = item.get("description")
    if description is None:
        description = ""
    elif not isinstance(description, str):
        raise CatalogError(
            f"{where}: field 'description' must be a string, got {_describe(description)}"
        )
    parameters: object = {}
    parameters_field = "parameters"
    for key in parameter_keys:
        if key in item:
            parameters, parameters_field = item[key], key
            if parameters is None:
                parameters = {}
            elif not isinstance(parameters, Mapping):
                raise CatalogError(
                    f"{where}: field {key!r} must be a JSON Schema object, got {_describe(parameters)}"
                )
            break
    annotations = item.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise CatalogError(
            f"{where}: field 'annotations' must be an object, got {_describe(annotations)}"
        )
    title = item.get("title")
    if title is not None and not isinstance(title, str):
        raise CatalogError(f"{where}: field 'title' must be a string, got {_describe(title)}")
    if title is None and isinstance(annotations.get("title"), str):
        title = annotations["title"]  # MCP 2025-03-26 put the display title in annotations
    if server is None:
        server = item.get("server")
        if server is not None and (not isinstance(server, str) or not server):
            raise CatalogError(
                f"{where}: field 'server' must be a non-empty string, got {_describe(server)}"
            )
    field = parameters_field
    try:  # a caller's schema nested hundreds deep: a RecursionError
        schema = _copy_json(parameters)
        field = "annotations"
        notes = _copy_json(annotations)
    except RecursionError:
        raise CatalogError(
            f"{where}: the schema is nested too deeply to read: field {field!r} nests objects"
            f" and arrays more than {MAX_NESTING} levels deep"
        ) from None
    return Tool(
        id=tool_id,
        name=name,
        description=description,
        parameters=schema,
        server=server,
        annotations=notes,
        title=title,
        examples=_examples(where, item),
    )


def _examples(where: str, item: Mapping[str, Any]) -> tuple[str, ...]:
    """Example requests: the top-level ``examples`` key of any format, then the MCP
    extension field ``_meta.examples`` (MCP's place for data outside the protocol). OpenAI,
    Anthropic and Gemini definitions have no such field; Anthropic's ``input_examples`` are
    example arguments, not requests, so they are not read."""
    found: list[str] = []
    meta = item.get("_meta")
    for field, value in (
        ("examples", item.get("examples")),
        ("_meta.examples", (meta.get("examples") if isinstance(meta, Mapping) else None)),
    ):
        if value is None:
            continue
        try:
            found.extend(example_tuple(value))
        except ConfigError as exc:
            raise CatalogError(f"{where}: field {field!r}: {exc}") from None
    return tuple(found)


# -- containers -------------------------------------------------------------------------------


def _unwrap_tools(data: object, format: str) -> object:
    if isinstance(data, Mapping) and "tools" in data:
        return data["tools"]
    if isinstance(data, Mapping):
        raise CatalogError(
            f"expected a list of {format} tools (or {{'tools': [...]}}), got {_describe(data)}"
        )
    return data


def _mcp_tools(result: object) -> object:
    if not isinstance(result, Mapping | list):
        result = dumped(result) or result  # the MCP SDK's ListToolsResult
    if isinstance(result, Mapping) and isinstance(result.get("result"), Mapping):
        result = result["result"]  # a whole JSON-RPC response
    if isinstance(result, Mapping):
        if "tools" not in result:
            raise CatalogError(
                "expected an MCP tools/list result with a 'tools' list; field 'tools' is missing"
            )
        return result["tools"]
    return result


def _gemini_declarations(data: object) -> list[object]:
    """Flatten Tool objects (``{"function_declarations": [...]}``) into their declarations;
    a request's ``{"tools": [...]}`` holds a list of them."""
    if isinstance(data, Mapping) and isinstance(data.get("tools"), list):
        data = data["tools"]
    containers: list[object] = data if isinstance(data, list) else [data]
    declarations: list[object] = []
    for container in containers:
        if isinstance(container, Mapping) and (
            "function_declarations" in container or "functionDeclarations" in container
        ):
            inner = container.get("function_declarations", container.get("functionDeclarations"))
            if not isinstance(inner, list):
                raise CatalogError(
                    f"field 'function_declarations' must be a list, got {_describe(inner)}"
                )
            declarations.extend(inner)
        else:
            if isinstance(container, Mapping):
                _refuse_hosted(len(declarations), container)
            declarations.append(container)  # a bare declaration
    return declarations


def _require_object(index: int, item: object) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        item = dumped(item) or item  # an SDK's tool object (MCP ``Tool``)
    if not isinstance(item, Mapping):
        raise CatalogError(f"tool {index}: expected an object, got {_describe(item)}")
    return item


def _copy_json(value: Any, level: int = 1) -> Any:
    """A deep copy of JSON-like data (the caller's schema objects are never shared).

    Raises:
        RecursionError: objects and arrays nested more than ``MAX_NESTING`` levels deep.
    """
    if isinstance(value, Mapping | list | tuple) and level > MAX_NESTING:
        raise RecursionError(f"nested more than {MAX_NESTING} levels deep")
    if isinstance(value, Mapping):
        return {key: _copy_json(item, level + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy_json(item, level + 1) for item in value]
    return value


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null or missing)"
    try:
        text = repr(value)
    except RecursionError:  # nested too deeply for repr: a bounded one
        text = reprlib.repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"
