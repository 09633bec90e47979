"""The langchain adapter's implementation; ``toolroute.integrations.langchain`` is its public face."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from ._hidden import OnHiddenCall, refusal
from ._narrow import StepRouter

#: Tool calls whose verdict waits for the tool node; the oldest is forgotten first.
_MAX_PENDING = 10_000


@attrs.frozen
class _Hidden:
    """A call the model made to a tool it was not shown, as the tool node will meet it."""

    session: str | None
    shown: tuple[str, ...]
    search_tool: str | None
    #: How many such calls wait: calls without an id are told apart only by name and args.
    calls: int = 1


def _call_key(call: Mapping[str, Any]) -> str:
    """The call's id; for a call without one (some chat models send ``id: None``), its name
    and arguments, the only way the tool node's call can be matched to the model's."""
    if call["id"] is not None:
        return str(call["id"])
    arguments = json.dumps(call.get("args"), sort_keys=True, default=repr)
    return f"\0no-id\0{call['name']}\0{arguments}"


def _tool_name(tool: BaseTool | dict[str, Any]) -> str | None:
    if isinstance(tool, BaseTool):
        return tool.name
    function = tool.get("function")
    name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
    return name if isinstance(name, str) else None  # a provider's built-in tool: no name


def _state_messages(state: Any) -> list[Any]:
    """The messages of the agent state a tool node holds (a dict, a list or a model)."""
    messages = state.get("messages") if isinstance(state, Mapping) else state
    if not isinstance(messages, list):
        messages = getattr(state, "messages", None)
    return messages if isinstance(messages, list) else []


def _session(messages: list[Any]) -> str | None:
    """The conversation's id: the graph's ``thread_id``, else its first message's id."""
    try:
        thread = get_config().get("configurable", {}).get("thread_id")
    except RuntimeError:  # called outside a graph run
        thread = None
    if thread is not None:
        return str(thread)
    first = messages[0] if messages else None
    identifier = getattr(first, "id", None)
    return f"message:{identifier}" if isinstance(identifier, str) else None


class ToolRouteMiddleware(AgentMiddleware[Any, Any, Any]):
    """Agent middleware: each model call sees only the tools the conversation needs, and a
    call to a tool it did not see is refused or activated, never run silently.

    Args:
        engine: a ``toolroute.asyncio`` engine whose catalogue holds the agent's tools
            (``Catalog.from_tools(tools)``); a tool it does not know is always shown.
        on_hidden_call: ``"refuse"`` (default): the tool does not run and the model gets a
            ``ToolMessage`` (``status="error"``) saying what to do instead; ``"activate"``:
            the tool runs and is shown for the rest of the conversation (its ``thread_id``).
        search_tool: the name of a tool-search tool among the agent's tools; always shown,
            and named in refusals where offered.

    Raises:
        TypeError: ``engine`` is not a ``toolroute.asyncio`` engine.
        ConfigError: ``on_hidden_call`` is neither ``"refuse"`` nor ``"activate"``.

    **Fail-open:** every tool is shown when the engine cannot judge the step or cannot read
    the conversation; provider tools given as dicts without a name are always shown.
    """

    def __init__(
        self,
        engine: object,
        *,
        on_hidden_call: OnHiddenCall = "refuse",
        search_tool: str | None = "search_tools",
    ) -> None:
        super().__init__()
        self._router = StepRouter(engine, "ToolRouteMiddleware", on_hidden_call, search_tool)
        # Keyed by session and call id: a call id is unique only within its conversation.
        self._hidden: OrderedDict[tuple[str | None, str], _Hidden] = OrderedDict()

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        # The conversation as the graph's state holds it, not as an outer middleware passed
        # it to the model (trimmed, summarised): the tool node knows it by the state too.
        session = _session(_state_messages(request.state) or request.messages)
        narrowed = await self._router.narrow(request.messages, session)
        shown_tools = [
            tool
            for tool in request.tools
            if (name := _tool_name(tool)) is None or narrowed.shows(name)
        ]
        response = await handler(request.override(tools=shown_tools))
        shown = tuple(name for tool in shown_tools if (name := _tool_name(tool)) is not None)
        hidden = {_tool_name(tool) for tool in request.tools} - set(shown)
        search = self._router.search_tool if self._router.search_tool in shown else None
        self._judge(response.result, shown, hidden, session, search)
        return response

    def _judge(
        self,
        messages: list[BaseMessage],
        shown: tuple[str, ...],
        hidden: set[str | None],
        session: str | None,
        search_tool: str | None,
    ) -> None:
        """Read the model's calls: each one to a tool it was not shown (one of ``hidden``)
        is decided now, by the rule, and carried out when the tool node reaches it. Calls to
        names the request did not offer (a structured-output tool, an unknown name) are left
        to LangChain: the tool node may never see them."""
        for message in messages:
            if not isinstance(message, AIMessage):
                continue
            for call in message.tool_calls:
                if call["name"] not in hidden:
                    continue
                if self._router.mode == "activate":
                    self._router.activations.activate(session, call["name"])
                    continue
                key = (session, _call_key(call))
                waiting = self._hidden.get(key) if call["id"] is None else None
                calls = waiting.calls + 1 if waiting is not None else 1
                self._hidden[key] = _Hidden(session, shown, search_tool, calls)
                while len(self._hidden) > _MAX_PENDING:
                    self._hidden.popitem(last=False)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        key = (_session(_state_messages(request.state)), _call_key(call))
        hidden = self._hidden.pop(key, None)
        if hidden is None:
            return await handler(request)
        if hidden.calls > 1:
            self._hidden[key] = attrs.evolve(hidden, calls=hidden.calls - 1)
        return ToolMessage(
            content=refusal(call["name"], search_tool=hidden.search_tool, shown=hidden.shown),
            tool_call_id=call["id"] or "",  # a ToolMessage needs a string id
            name=call["name"],
            status="error",
        )


def retrieve_tools(
    engine: object, *, k: int = 5, registry: Mapping[str, object] | None = None
) -> Callable[[str], Awaitable[list[str]]]:
    """A ``retrieve_tools_coroutine`` for langgraph-bigtool's ``create_agent``.

    Args:
        engine: a ``toolroute.asyncio`` engine whose catalogue holds the registry's tools.
        k: how many tools one retrieval returns.
        registry: bigtool's ``tool_registry``; when its keys are not the tools' names, they
            are what the coroutine returns.

    Returns:
        ``async retrieve_tools(query: str) -> list[str]``: registry ids, best first.

    Raises:
        TypeError: ``engine`` is not a ``toolroute.asyncio`` engine, or ``k`` is not a
            positive integer.
    """
    router = StepRouter(engine, "retrieve_tools", "refuse", None)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise TypeError(f"k must be an integer of at least 1, got {k!r}")
    ids: dict[str, str] = {}
    for key, tool in (registry or {}).items():
        name = getattr(tool, "name", None) or getattr(tool, "__name__", None)  # BaseTool, function
        ids[name if isinstance(name, str) else key] = key

    async def retrieve_tools(query: str) -> list[str]:
        """Find the tools that can help with a task.

        Args:
            query: what you want to do, in a few words.
        """
        answer = await router.engine.search_tools({"query": query}, k=k)
        names = [tool["name"] for tool in answer["tools"]]
        return [ids.get(name, name) for name in names] if ids else names

    return retrieve_tools
