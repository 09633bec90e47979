"""The vendors' deferred-tool search, in their own shapes: the search call a host receives, the
answer it sends back, and the tool list marked deferred.

Two vendors publish a client-executed search (the host runs the search and answers):

- **Anthropic** (Messages API): tools carry ``defer_loading: true``; the host adds its own
  search tool (a plain client tool). The model calls it with a ``tool_use`` block; the host
  answers with a ``tool_result`` whose content is ``tool_reference`` blocks
  (``{"type": "tool_reference", "tool_name": ...}``), and the API expands each reference to
  the deferred definition of that name.
- **OpenAI** (Responses API): function tools carry ``defer_loading: true``; the host adds
  ``{"type": "tool_search", "execution": "client", "description", "parameters"}``. The model
  emits a ``tool_search_call`` item (``call_id``, ``arguments``); the host appends it and a
  ``tool_search_output`` item (same ``call_id``, ``execution: "client"``, ``tools``: the
  loaded definitions) to the next request's input, so the tools block (and its cache) stays
  as it was.

Everything here is pure: reading a call, writing an answer, marking a list deferred.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..errors import ConfigError
from .search_tool import DESCRIPTION, NAME, PARAMETERS

VENDORS = ("anthropic", "openai")

#: What the host's search tool returns when the model's arguments hold no query.
NO_QUERY = "The search needs a 'query': a few words saying what you want to do."
#: Anthropic's answer when nothing matched (a tool_result needs some content).
NOTHING_FOUND = "No tools matched the search. Try other words."


@attrs.frozen(kw_only=True)
class SearchCall:
    """A vendor's search call, read.

    Attributes:
        vendor: ``anthropic`` or ``openai``.
        call_id: the id the answer must carry (``tool_use.id`` or ``call_id``).
        query: what the model searched for; ``None`` when its arguments hold no query.
        limit: how many tools the model asked for, if it said.
    """

    vendor: str
    call_id: str
    query: str | None
    limit: int | None = None


def check_vendor(vendor: object) -> str:
    if vendor not in VENDORS:
        raise ConfigError(f"unknown tool-search vendor {vendor!r}; expected anthropic or openai")
    return str(vendor)


def search_tool(vendor: str, *, name: str = NAME) -> dict[str, Any]:
    """The host's search tool for ``vendor``; it is never deferred.

    Raises:
        ConfigError: an unknown vendor.
    """
    match check_vendor(vendor):
        case "anthropic":
            return {"name": name, "description": DESCRIPTION, "input_schema": PARAMETERS}
        case _:
            return {
                "type": "tool_search",
                "execution": "client",
                "description": DESCRIPTION,
                "parameters": PARAMETERS,
            }


def read_call(vendor: str, call: object) -> SearchCall:
    """Read the model's search call: an Anthropic ``tool_use`` block or an OpenAI
    ``tool_search_call`` item, as a dict or its JSON text.

    A call whose *arguments* hold no query is read (``query=None``): they are the model's,
    and the answer tells it what was expected.

    Raises:
        ConfigError: ``call`` is not that vendor's search call (the host passed something
            else), or it has no id to answer.
    """
    vendor = check_vendor(vendor)
    item = _object(call, "search call")
    expected = "tool_use" if vendor == "anthropic" else "tool_search_call"
    if item.get("type") != expected:
        raise ConfigError(
            f"expected {vendor}'s search call, a {expected!r} item, got type {item.get('type')!r} "
            f"(keys {sorted(item)[:8]})"
        )
    if vendor == "anthropic":
        call_id, arguments = item.get("id"), item.get("input")
    else:
        call_id, arguments = item.get("call_id"), item.get("arguments")
        if item.get("execution", "client") != "client":
            raise ConfigError(
                "expected a client-executed tool_search_call (execution 'client'), got "
                f"execution {item.get('execution')!r}: the server ran that search itself"
            )
    if not isinstance(call_id, str) or not call_id:
        key = "id" if vendor == "anthropic" else "call_id"
        raise ConfigError(f"the {expected} item has no {key!r} to answer, got {call_id!r}")
    query, limit = _arguments(arguments)
    return SearchCall(vendor=vendor, call_id=call_id, query=query, limit=limit)


def answer(
    call: SearchCall, names: Sequence[str], definitions: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The answer to ``call`` naming the found tools (``names``, best first; for OpenAI their
    ``definitions`` in the same order, as the host's tool list has them)."""
    if call.vendor == "anthropic":
        content: list[dict[str, Any]]
        if call.query is None:
            return {
                "type": "tool_result",
                "tool_use_id": call.call_id,
                "content": [{"type": "text", "text": NO_QUERY}],
                "is_error": True,
            }
        content = [{"type": "tool_reference", "tool_name": name} for name in names]
        return {
            "type": "tool_result",
            "tool_use_id": call.call_id,
            "content": content or [{"type": "text", "text": NOTHING_FOUND}],
        }
    return {
        "type": "tool_search_output",
        "call_id": call.call_id,
        "execution": "client",
        "status": "completed",
        "tools": _merged_namespaces([_loaded(definition) for definition in definitions]),
    }


def _merged_namespaces(definitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One namespace item per namespace, its found members in rank order, where its first
    member ranked."""
    merged: list[dict[str, Any]] = []
    namespaces: dict[str, dict[str, Any]] = {}
    for definition in definitions:
        if definition.get("type") != "namespace":
            merged.append(definition)
        elif (name := str(definition.get("name"))) in namespaces:
            namespaces[name]["tools"].extend(definition["tools"])
        else:
            namespaces[name] = definition
            merged.append(definition)
    return merged


def mark_deferred(
    vendor: str, tools: Sequence[Mapping[str, Any]], *, keep: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """A copy of the host's tool list with every function tool deferred
    (``defer_loading: true``), but the tools named in ``keep`` and any search tool.

    OpenAI ``namespace`` tools have their member functions deferred. Tools of other types
    (a vendor's built-in tools) are copied unchanged.

    Raises:
        ConfigError: an unknown vendor, ``tools`` is not a list of that vendor's tool objects
            or repeats a tool name (but in two OpenAI namespaces), or ``keep`` is not a list
            of names.
    """
    vendor = check_vendor(vendor)
    kept = set(tool_names(keep, "keep"))
    marked: list[dict[str, Any]] = []
    for index, tool in enumerate(_tool_list(vendor, tools)):
        item = copy.deepcopy(dict(tool))
        if vendor == "openai" and item.get("type") == "namespace":
            item["tools"] = [
                _deferred(member, kept) if member.get("type") == "function" else member
                for member in item.get("tools", [])
                if isinstance(member, dict)
            ]
        elif _is_function(vendor, item, index):
            item = _deferred(item, kept)
        marked.append(item)
    return marked


def definitions_by_name(
    vendor: str, tools: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The host's function tools by the name the model calls them, search tools left out;
    an OpenAI namespace member by its own name, as its namespace holding only it (of two
    namespaces' members of one name, the later).

    Raises:
        ConfigError: as ``mark_deferred``.
    """
    return {name: definition for _, name, definition in listed_definitions(vendor, tools)}


def listed_definitions(
    vendor: str, tools: Sequence[Mapping[str, Any]]
) -> list[tuple[str | None, str, dict[str, Any]]]:
    """The host's function tools as ``(namespace, name, definition)``, in list order, search
    tools left out: the namespace is ``None`` but for OpenAI namespace members, whose
    definition is their namespace holding only them.

    Raises:
        ConfigError: as ``mark_deferred``.
    """
    vendor = check_vendor(vendor)
    found: list[tuple[str | None, str, dict[str, Any]]] = []
    for index, tool in enumerate(_tool_list(vendor, tools)):
        if vendor == "openai" and tool.get("type") == "namespace":
            # A member loads inside its namespace: the output item is the namespace with
            # the members found (openai-agents reads namespaces back from tool_search_output).
            shell = {k: v for k, v in tool.items() if k != "tools"}
            namespace = tool.get("name") if isinstance(tool.get("name"), str) else None
            found.extend(
                (namespace, member["name"], {**shell, "tools": [dict(member)]})
                for member in tool.get("tools", [])
                if isinstance(member, Mapping) and isinstance(member.get("name"), str)
            )
        elif _is_function(vendor, tool, index) and tool.get("name") != NAME:
            found.append((None, str(tool["name"]), dict(tool)))
    return found


def _is_function(vendor: str, tool: Mapping[str, Any], index: int) -> bool:
    if not isinstance(tool.get("name"), str):
        return False
    if vendor == "anthropic":
        # Anthropic's own tools (tool_search_tool_bm25_…, web_search_…) carry a dated type.
        return tool.get("type") in (None, "custom")
    return tool.get("type") == "function"


def _deferred(tool: Mapping[str, Any], kept: set[str]) -> dict[str, Any]:
    item = dict(tool)
    if item.get("name") != NAME and item.get("name") not in kept:
        item["defer_loading"] = True
    return item


def _loaded(definition: Mapping[str, Any]) -> dict[str, Any]:
    # The definition as the host's list has it; ``defer_loading`` stays, as the host sent it.
    return copy.deepcopy(dict(definition))


def is_search_tool(vendor: str, tool: Mapping[str, Any]) -> bool:
    """Whether ``tool`` is a search tool of the kind ``search_tool(vendor)`` returns."""
    if vendor == "anthropic":
        return tool.get("name") == NAME and tool.get("type") in (None, "custom")
    return tool.get("type") == "tool_search"


def tool_names(names: object, what: str) -> tuple[str, ...]:
    """``names`` as a tuple of tool names.

    Raises:
        ConfigError: ``names`` is not a list of strings.
    """
    if isinstance(names, str | bytes) or not isinstance(names, Sequence | set | frozenset):
        raise ConfigError(f"{what} must be a list of tool names, got {type(names).__name__}")
    for name in names:
        if not isinstance(name, str):
            raise ConfigError(
                f"{what} must be a list of tool names, got an item of type {type(name).__name__}"
            )
    return tuple(names)


def _tool_list(vendor: str, tools: object) -> list[Mapping[str, Any]]:
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        raise ConfigError(f"expected a list of tool definitions, got {type(tools).__name__}")
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise ConfigError(f"tool {index}: expected a tool object, got {type(tool).__name__}")
        if vendor == "anthropic":
            _check_anthropic(index, tool)
        else:
            _check_openai(index, tool)
    _check_names(vendor, tools)
    return list(tools)


def _check_names(vendor: str, tools: Sequence[Mapping[str, Any]]) -> None:
    """The vendor refuses a request whose tools repeat a name; only OpenAI namespaces may each
    hold a member of one name. Search tools are left out: the host's is replaced."""
    seen: dict[tuple[str, str], int] = {}
    for index, tool in enumerate(tools):
        name = tool.get("name")
        if not isinstance(name, str) or is_search_tool(vendor, tool):
            continue
        kind = "namespace" if vendor == "openai" and tool.get("type") == "namespace" else "tool"
        first = seen.setdefault((kind, name), index)
        if first != index:
            what = "namespace name" if kind == "namespace" else "name"
            raise ConfigError(
                f"tool {index}: the {what} {name!r} is already tool {first}'s; expected "
                "unique names (the vendor refuses a tool list that repeats one)"
            )
        if kind == "namespace":
            members: set[str] = set()
            for member in tool.get("tools", []):
                member_name = member.get("name") if isinstance(member, Mapping) else None
                if member_name in members:
                    raise ConfigError(
                        f"tool {index}: the name {member_name!r} is already in namespace "
                        f"{name!r}; expected unique names in a namespace (the vendor refuses "
                        "a tool list that repeats one)"
                    )
                if isinstance(member_name, str):
                    members.add(member_name)


def _check_anthropic(index: int, tool: Mapping[str, Any]) -> None:
    """An Anthropic list holds custom tools (``name``, ``input_schema``) and Anthropic's own
    tools (a dated ``type``); another vendor's tool would never be deferred or found."""
    kind = tool.get("type")
    if kind == "function":
        raise ConfigError(
            f"tool {index}: expected an Anthropic tool ({{'name', 'description', "
            "'input_schema'}), got an OpenAI function tool (type 'function'): pass "
            "vendor='openai' for the Responses API"
        )
    if kind in (None, "custom") and not isinstance(tool.get("input_schema"), Mapping):
        raise ConfigError(
            f"tool {index}: expected an Anthropic tool ({{'name', 'description', "
            f"'input_schema'}}), got keys {sorted(tool)[:8]}"
        )


def _check_openai(index: int, tool: Mapping[str, Any]) -> None:
    """A Responses API list: every tool has a ``type``, function tools are flat."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        raise ConfigError(
            f"tool {index}: expected a Responses API function tool ({{'type': 'function', "
            "'name', ...}}), got a Chat Completions one (nested 'function'): tool search "
            "is a Responses API feature"
        )
    if not isinstance(tool.get("type"), str):
        anthropic = (
            " (an Anthropic tool: pass vendor='anthropic')" if "input_schema" in tool else ""
        )
        raise ConfigError(
            f"tool {index}: expected a Responses API tool ({{'type': 'function', 'name', ...}}), "
            f"got one without a 'type', keys {sorted(tool)[:8]}{anthropic}"
        )


def _object(value: object, what: str) -> Mapping[str, Any]:
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"the {what} is not JSON: {exc.msg}") from None
    if not isinstance(value, Mapping):
        hint = " (pass its .model_dump())" if hasattr(value, "model_dump") else ""
        raise ConfigError(f"expected the {what} as an object, got {type(value).__name__}{hint}")
    return value


def _arguments(arguments: object) -> tuple[str | None, int | None]:
    """The query and limit the model passed; ``None`` for what it did not pass readably."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None, None
    if not isinstance(arguments, Mapping):
        return None, None
    query = arguments.get("query")
    if isinstance(query, list):  # some hosts' schemas take several phrasings
        query = " ".join(q for q in query if isinstance(q, str))
    query = query.strip() if isinstance(query, str) else None
    limit = next(
        (
            v
            for key in ("limit", "top_k", "max_results")
            if isinstance(v := arguments.get(key), int)
        ),
        None,
    )
    if isinstance(limit, bool) or (limit is not None and limit < 1):
        limit = None
    return query or None, limit
