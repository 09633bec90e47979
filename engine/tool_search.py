"""toolroute as the search engine behind a vendor's deferred-tool search.

Anthropic (``defer_loading`` plus a client-side search tool answered with ``tool_reference``
blocks) and OpenAI Responses (``tool_search`` with ``execution: "client"``, answered with a
``tool_search_output`` item) let the host keep the whole catalogue out of the prompt, keep the
prompt cache, and bring its own search. ``ToolSearch`` answers that search with the engine's
ranking: dedup, allow- and deny-lists, and fail-open::

    from toolroute.tool_search import ToolSearch

    search = ToolSearch(engine, "anthropic", tools)     # tools: the host's Anthropic list
    request_tools = search.tools()                      # deferred, plus the search tool
    ...
    block = next(b for b in reply["content"] if b["type"] == "tool_use"
                 and b["name"] == "search_tools")
    result = await search.answer(block)                 # a tool_result of tool_references

For OpenAI the call is the ``tool_search_call`` output item and the answer the
``tool_search_output`` item; append both to the next request's ``input``.
"""

import copy as _copy
from collections.abc import Mapping as _Mapping
from collections.abc import Sequence as _Sequence
from typing import Any as _Any

import trio as _trio

from ._core.catalog.catalog import Catalog as _Catalog
from ._core.errors import ConfigError as _ConfigError
from ._core.errors import ToolrouteError as _ToolrouteError
from ._core.public import publish as _publish
from ._core.select.access import ToolAccess as _ToolAccess
from ._core.select.access import request_access as _request_access
from ._core.select.arguments import count as _count
from ._core.select.policy import Policy as _Policy
from ._core.select.vendor_search import SearchCall as SearchCall
from ._core.select.vendor_search import answer as _answer
from ._core.select.vendor_search import check_vendor as _check_vendor
from ._core.select.vendor_search import is_search_tool as _is_search_tool
from ._core.select.vendor_search import listed_definitions as _listed_definitions
from ._core.select.vendor_search import mark_deferred as mark_deferred
from ._core.select.vendor_search import read_call as read_call
from ._core.select.vendor_search import search_tool as search_tool
from ._core.select.vendor_search import tool_names as _tool_names

__all__ = ["SearchCall", "ToolSearch", "mark_deferred", "read_call", "search_tool"]

# The engine failing (a crashed service, a broken channel) is ours to absorb; a caller's
# mistake (ConfigError, a closed engine's RuntimeError) is not.
_ENGINE_FAULTS = (_ToolrouteError, _trio.BrokenResourceError, _trio.ClosedResourceError)


class ToolSearch:
    """Answer one vendor's client-executed tool search with an engine's ranking.

    Args:
        engine: an open ``Engine`` (trio) or ``toolroute.asyncio`` engine over the
            catalogue the tool list came from.
        vendor: ``anthropic`` or ``openai`` (Responses).
        tools: the host's tool list in that vendor's format. A found tool is answered only
            if this list has it, by id or, when unambiguous, by name: the vendor can load
            nothing else. A search tool already in the list is replaced by this one.
        k: how many tools an answer names, unless the model asks for fewer.
        keep: names of tools to send loaded (not deferred); an answer never names them,
            since the model already has them.
        tenant: the tenant's ``ToolAccess``; a tool it keeps out is never found.

    Build one per tool list: the list's names are matched to the catalogue's tools once.

    Raises:
        ConfigError: an unknown vendor, ``tools`` is not a list of that vendor's tool
            objects (another vendor's shape is named) or repeats a tool name (the vendor
            refuses that; one name in two OpenAI namespaces is fine), ``keep`` is not a list
            of names, ``k``
            is not a positive integer, or ``tenant`` is not a ``ToolAccess``.
    """

    def __init__(
        self,
        engine: _Any,
        vendor: str,
        tools: _Sequence[_Mapping[str, _Any]],
        *,
        k: int = 5,
        keep: _Sequence[str] = (),
        tenant: _ToolAccess | None = None,
    ) -> None:
        self._engine = engine
        self.vendor = _check_vendor(vendor)
        self._keep = _tool_names(keep, "keep")
        # ``tools()`` adds the search tool: one already in the host's list would be sent twice.
        self._tools = [
            tool
            for tool in mark_deferred(self.vendor, tools, keep=self._keep)
            if not _is_search_tool(self.vendor, tool)
        ]
        # Found tools are answered as the request lists them, deferred: the vendor compares.
        listed = [
            entry
            for entry in _listed_definitions(self.vendor, self._tools)
            if entry[1] not in self._keep
        ]
        self.k = _count(k, "k", 1)
        self._tenant = _request_access(None, None, tenant)
        # Tool id → the name the host's list calls it, and its definition there.
        self._names, self._definitions = _listed_ids(engine.catalog, listed, engine.dedup.providers)
        self._coverage: tuple[_Catalog, bool] | None = None

    def tools(self) -> list[dict[str, _Any]]:
        """The tool list to send: the host's tools deferred (but ``keep``), then the search
        tool, which is never deferred. The same list on every request, so the vendor's
        prompt cache holds."""
        return [*_copy.deepcopy(self._tools), search_tool(self.vendor)]

    async def answer(
        self,
        call: object,
        *,
        allow: _Sequence[str] | None = None,
        deny: _Sequence[str] | None = None,
    ) -> dict[str, _Any]:
        """The vendor's answer to the model's search ``call``, ranked by the engine.

        Args:
            call: the Anthropic ``tool_use`` block or OpenAI ``tool_search_call`` item
                (a dict or its JSON text).
            allow, deny: this request's lists (as ``Engine.select``), narrowing the tenant's.

        Returns:
            An Anthropic ``tool_result`` block (``tool_reference`` content) or an OpenAI
            ``tool_search_output`` item, ready to send.

        Raises:
            ConfigError: ``call`` is not this vendor's search call, or ``allow``/``deny``
                are not lists of tool ids.

        **Cancellation:** the caller's cancel scope cancels the search.

        **Fail-open:** recall degrades to keywords inside the engine; if the engine itself
        fails, the tools are ranked by keyword over its served index. Arguments the model
        sent without a query get an answer saying what was expected, never an exception.
        """
        read = read_call(self.vendor, call)
        access = _request_access(allow, deny, self._tenant)
        if read.query is None:
            return _answer(read, (), ())
        wanted = min(self.k, read.limit or self.k)
        found = await self._ranked(read.query, wanted, access)
        names = [self._names[tool_id] for tool_id in found]
        return _answer(read, names, [self._definitions[tool_id] for tool_id in found])

    async def _ranked(self, query: str, wanted: int, access: _ToolAccess) -> tuple[str, ...]:
        # Only tools the host's list has can be loaded: narrowing to them before recall keeps
        # the answer full (k of them), not k of the catalogue with the unloadable dropped.
        listed = access.narrowed(_ToolAccess(allow=self._names)) if self._partial() else access
        try:
            selection = await self._engine.select(
                query,
                policy=_Policy(max_tools=wanted, threshold=None, adaptive=False),
                allow=None if listed.allow is None else sorted(listed.allow),
                deny=sorted(listed.deny),
            )
            found: tuple[str, ...] = selection.tool_ids
        except _ConfigError:
            raise
        except _ENGINE_FAULTS as exc:
            index = self._engine.index
            ranking = index.rank(
                query, None, len(index.catalog), reason=f"the engine failed: {type(exc).__name__}"
            )
            found = listed.only(ranking.tool_ids)
        return tuple(i for i in found if i in self._names and listed.permits(i))[:wanted]

    def _partial(self) -> bool:
        """Whether some served tool is missing from the host's list (the served catalogue
        changes with ``Engine.update``; the answer is kept per snapshot)."""
        served = self._engine.index.catalog
        if self._coverage is None or self._coverage[0] is not served:
            self._coverage = (served, any(i not in self._names for i in served.ids))
        return self._coverage[1]


def _listed_ids(
    catalog: _Catalog,
    listed: _Sequence[tuple[str | None, str, dict[str, _Any]]],
    providers: _Mapping[str, _Sequence[str]],
) -> tuple[dict[str, str], dict[str, dict[str, _Any]]]:
    """Tool id → the name the host's list gives it, and its definition there, for the tools
    the list has.

    A tool is matched by id, else by a name only one catalogue tool has; a namespace member
    first by its namespace and name (the catalogue reads a namespace's members with the
    namespace as their server), so members of one name in two namespaces stay apart. A
    served representative of duplicates the list lacks answers as a duplicate the list has:
    dedup must not make a listed tool unfindable.
    """
    by_name: dict[str, list[str]] = {}
    by_place: dict[tuple[str | None, str], list[str]] = {}
    for tool in catalog:
        by_name.setdefault(tool.name, []).append(tool.id)
        by_place.setdefault((tool.server, tool.name), []).append(tool.id)
    names: dict[str, str] = {}
    definitions: dict[str, dict[str, _Any]] = {}
    for namespace, name, definition in listed:
        placed = by_place.get((namespace, name), ()) if namespace is not None else ()
        if len(placed) == 1:
            tool_id = placed[0]
        elif name in catalog:
            tool_id = name
        elif len(by_name.get(name, ())) == 1:
            tool_id = by_name[name][0]
        else:
            continue
        names[tool_id], definitions[tool_id] = name, definition
    for leader, members in providers.items():
        if leader not in names:
            listed_member = next((m for m in members if m in names), None)
            if listed_member is not None:
                names[leader] = names[listed_member]
                definitions[leader] = definitions[listed_member]
    return names, definitions


_publish(__name__, globals())
