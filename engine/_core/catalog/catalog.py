"""Tools, servers and the immutable, ordered catalogue they live in."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping

import attrs

from .. import files
from ..errors import CatalogError
from . import framework_tools, readers
from .tool import QUALIFIER as QUALIFIER
from .tool import Server as Server
from .tool import Tool as Tool
from .tool import id_tuple as id_tuple

#: The catalogue ``toolroute demo`` routes over, shipped as package data beside the code, so
#: the first example works without a tool file of one's own.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
DEMO_CATALOG = os.path.join(_PACKAGE, "data", "demo_catalog.json")


@attrs.frozen(init=False)
class Catalog:
    """An ordered, immutable set of tools with unique ids.

    Build one with a reader (``from_file``, ``from_openai``, ``from_anthropic``,
    ``from_gemini``, ``from_mcp``, ``from_plain``; ``from_tools`` for framework tool objects
    and Python functions) or directly from ``Tool`` objects;
    ``Catalog.demo()`` is the bundled demo catalogue.

    Raises:
        CatalogError: two tools share an id.
    """

    tools: tuple[Tool, ...]
    servers: tuple[Server, ...]
    _by_id: Mapping[str, int] = attrs.field(repr=False, eq=False, hash=False)

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        server_descriptions: Mapping[str, str] | None = None,
    ) -> None:
        tools = tuple(tools)
        by_id: dict[str, int] = {}
        for index, tool in enumerate(tools):
            if not isinstance(tool, Tool):
                raise CatalogError(f"tool {index}: expected a Tool, got {type(tool).__name__}")
            first = by_id.setdefault(tool.id, index)
            if first != index:
                raise CatalogError(
                    f"duplicate tool id {tool.id!r}: tool {first}{_on(tools[first])} and tool"
                    f" {index}{_on(tool)} share it"
                )
        descriptions = server_descriptions or {}
        members: dict[str, list[str]] = {}
        for tool in tools:
            if tool.server is not None:
                members.setdefault(tool.server, []).append(tool.id)
        servers = tuple(
            Server(name, descriptions.get(name, ""), tuple(ids)) for name, ids in members.items()
        )
        self.__attrs_init__(tools, servers, by_id)

    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._by_id

    def __getitem__(self, tool_id: str) -> Tool:
        try:
            return self.tools[self._by_id[tool_id]]
        except KeyError:
            raise KeyError(f"no tool with id {tool_id!r} in the catalogue") from None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(tool.id for tool in self.tools)

    def position(self, tool_id: str) -> int:
        """The tool's index in catalogue order."""
        return self._by_id[tool_id]

    # The readers live in .readers (they return tools; the catalogue is built here, so the two
    # modules do not import each other) and the one file read in .files.

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, format: str | None = None) -> Catalog:
        """Read a JSON file in any supported format (auto-detected unless ``format`` is given).

        Formats: ``openai`` (Chat Completions or Responses function tools), ``anthropic``,
        ``gemini``, ``mcp`` (a ``tools/list`` result), ``mcp-servers``
        (``{"servers": [{"name", "description", "tools"}]}``) and ``plain``
        (``[{name, description, parameters}]`` or ``{name: {description, inputSchema}}``).

        Raises:
            CatalogError: ``path`` is not a path (``None``, say), or the file is missing, is
                not JSON, or holds a malformed tool.
        """
        data = files.read_json(path, what="tool file", error=CatalogError)
        try:
            return cls._built(readers.read_data(data, format=format))
        except CatalogError as exc:
            raise CatalogError(f"{os.fspath(path)}: {exc}") from None

    @classmethod
    def from_data(cls, data: object, *, format: str | None = None) -> Catalog:
        """Like ``from_file`` for an already parsed JSON value."""
        return cls._built(readers.read_data(data, format=format))

    @classmethod
    def from_openai(cls, tools: object) -> Catalog:
        """OpenAI function tools (``{"type": "function", "function": {...}}`` or the flat
        Responses form), custom tools (free-text input: no parameters) and a Responses
        ``namespace``'s members (the namespace as their server). A tool OpenAI runs itself
        (``{"type": "web_search"}`` …) is a ``CatalogError``: leave it out and send it always."""
        return cls.from_data(tools, format="openai")

    @classmethod
    def from_anthropic(cls, tools: object) -> Catalog:
        """Anthropic tools: ``{"name", "description", "input_schema"}``."""
        return cls.from_data(tools, format="anthropic")

    @classmethod
    def from_gemini(cls, tools: object) -> Catalog:
        """Gemini ``function_declarations`` (a Tool object, a list of them, a request's
        ``{"tools": [...]}``, or the bare list).
        A tool Gemini runs itself (``{"googleSearch": {}}`` …) is a ``CatalogError``: leave
        it out and send it always."""
        return cls.from_data(tools, format="gemini")

    @classmethod
    def from_mcp(cls, result: object, *, server: str | None = None) -> Catalog:
        """An MCP ``tools/list`` result (or the JSON-RPC response holding one), as JSON or as
        the MCP SDK's ``ListToolsResult`` (or a list of its ``Tool`` objects); ``server``,
        when given, is a non-empty string (else a ``CatalogError``)."""
        return cls._built(readers.read_mcp(result, server=server))

    @classmethod
    def from_mcp_servers(cls, servers: Mapping[str, object]) -> Catalog:
        """Several servers' ``tools/list`` results, ``{server: result}``.

        Tool ids become ``f"{server}__{name}"`` where a name occurs on several servers.
        """
        return cls._built(readers.read_mcp_servers(servers))

    @classmethod
    def from_tools(cls, tools: Iterable[object], *, server: str | None = None) -> Catalog:
        """Tools as a program or an agent framework holds them, in any mix.

        Each item may be a ``Tool``; a definition dict in any supported format (an OpenAI
        Responses ``namespace`` gives its member functions, the namespace as their server); an OpenAI
        Agents SDK ``FunctionTool`` (one put in a ``tool_namespace`` has it as its server); a
        Pydantic AI ``ToolDefinition`` or ``Tool``; a
        LangChain ``BaseTool`` (the JSON Schema of its ``tool_call_schema``); an MCP SDK
        ``Tool``; or a plain Python function (its name, its docstring's summary, and a JSON
        Schema from its signature, with parameter descriptions from a Google-, NumPy- or
        Sphinx-style docstring). Objects are read by their shape: toolroute imports no
        framework.

        Args:
            tools: the tools, in the order to keep.
            server: the server (or namespace) of every tool, overriding their own.

        Raises:
            CatalogError: an object of no known shape (naming its index and type), a
                malformed definition, a function whose name is not a tool name (a lambda:
                define it with ``def``, or set its ``__name__``), two tools sharing an id, or
                a ``server`` that is not a non-empty string.
        """
        return cls(framework_tools.read_tools(tools, server=server))

    @classmethod
    def from_plain(cls, tools: object) -> Catalog:
        """``[{name, description, parameters, server?}]`` or ``{name: {description, ...}}``."""
        return cls.from_data(tools, format="plain")

    @classmethod
    def demo(cls) -> Catalog:
        """The bundled demo catalogue: 50 tools on 8 MCP servers.

        The servers are ``github``, ``slack``, ``gmail``, ``calendar``, ``filesystem``,
        ``postgres``, ``web`` and ``weather``, read from the ``mcp-servers`` file that
        ``toolroute demo`` routes over; a tool whose name occurs on two servers gets the id
        ``f"{server}__{name}"`` (``gmail__search``, ``web__search``). Each call reads the file
        again and returns an equal catalogue.

        Raises:
            CatalogError: the installed package lacks its data file (a broken install).
        """
        return cls.from_file(DEMO_CATALOG, format="mcp-servers")

    @classmethod
    def _built(cls, read: readers.ReadTools) -> Catalog:
        return cls(read.tools, server_descriptions=read.server_descriptions)


def _on(tool: Tool) -> str:
    """Where a duplicate is, beyond its index: its server, when it has one."""
    return "" if tool.server is None else f" (server {tool.server!r})"
