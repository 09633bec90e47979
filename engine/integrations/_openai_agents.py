"""The openai_agents adapter's implementation; ``toolroute.integrations.openai_agents`` is its public face."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from agents import Agent, AgentHookContext, AgentHooks, FunctionTool, RunConfig, Runner, RunResult
from agents.items import ModelResponse, TResponseInputItem
from agents.mcp import ToolFilterContext
from agents.run_config import ToolErrorFormatterArgs
from agents.run_context import RunContextWrapper
from agents.tool import Tool
from agents.usage import Usage
from mcp.types import Tool as MCPTool

from ._hidden import OnHiddenCall, activation_note, refusal
from ._narrow import Narrowing, StepRouter

Formatter = Callable[[ToolErrorFormatterArgs[Any]], Any]


@attrs.define
class _Run:
    """One agent's view of a run: the conversation so far and the turn's selection.

    A run's contexts (the run's, a tool's, a hook's) share its ``Usage``; an agent run as a
    tool (``as_tool``) runs nested in its caller's run and shares it too, so a run is told
    apart by ``Usage`` and agent: an agent handed off to, or run as a tool, is its own
    conversation.
    """

    session: str
    usage: weakref.ref[Usage]
    conversation: list[Any]
    #: The agent's function tools as ``(namespace, name)``: what its refusals may name.
    tool_names: tuple[tuple[str | None, str], ...] = ()
    narrowed: Narrowing | None = None
    #: True once the turn's tools started: the next ``is_enabled`` opens a new turn.
    stale: bool = True
    #: Shown tools the model called in its last response, as ``(namespace, name)``: never
    #: withdrawn before they run.
    called: frozenset[tuple[str | None, str]] = frozenset()
    #: The call ids of the model's last response: a hidden call is answered for its run.
    call_ids: frozenset[str] = frozenset()
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)


class ToolRouter:
    """Shows an Agents SDK agent, turn by turn, only the tools the conversation needs.

    Args:
        engine: a ``toolroute.asyncio`` engine whose catalogue holds the agent's function
            tools (``Catalog.from_tools(agent.tools)`` without its hosted tools, and MCP tools
            with their server as ``server``); a tool it does not know is always shown.
        on_hidden_call: ``"refuse"`` (default): a call to a tool that was not shown gets a
            tool result saying what to do instead; ``"activate"``: the tool is shown from the
            next turn on, for the rest of the run, and the model is told to call it again
            (the SDK cannot run a tool that was not listed for the turn).
        search_tool: the name of a tool-search function tool; always shown, and named in
            refusals where the agent has it.

    Raises:
        TypeError: ``engine`` is not a ``toolroute.asyncio`` engine.
        ConfigError: ``on_hidden_call`` is neither ``"refuse"`` nor ``"activate"``.

    **Fail-open:** every tool is shown when the engine cannot judge a turn or cannot read
    the conversation.
    """

    def __init__(
        self,
        engine: object,
        *,
        on_hidden_call: OnHiddenCall = "refuse",
        search_tool: str | None = "search_tools",
    ) -> None:
        self._router = StepRouter(engine, "ToolRouter", on_hidden_call, search_tool)
        self._runs: dict[tuple[int, int], _Run] = {}

    def route(self, agent: Agent[Any]) -> Agent[Any]:
        """A copy of ``agent`` whose tools are chosen per turn (the agent is not changed,
        but its MCP servers' ``tool_filter`` is: it keeps any filter they had)."""
        if not isinstance(agent, Agent):
            raise TypeError(f"route expected an agents.Agent, got {type(agent).__name__}")
        tools: list[Tool] = [
            dataclasses.replace(
                tool, is_enabled=self._enabled(tool.is_enabled, tool.name, _namespace(tool))
            )
            if isinstance(tool, FunctionTool)
            else tool
            for tool in agent.tools
        ]
        for server in agent.mcp_servers:
            previous = getattr(server, "tool_filter", None)
            if getattr(previous, "_toolroute", False):
                continue  # routed already (the same server on another routed agent)
            server.tool_filter = self._mcp_filter(previous)  # type: ignore[attr-defined]
        return agent.clone(tools=tools, hooks=_Hooks(self, agent.hooks))

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (or a default ``RunConfig``) that answers a call to a hidden tool with a
        tool result (``tool_not_found_behavior="return_error_to_model"``) worded by the
        hidden-tool rule; ``base``'s own ``tool_error_formatter`` handles everything else."""
        config = base if base is not None else RunConfig()
        return dataclasses.replace(
            config,
            tool_not_found_behavior="return_error_to_model",
            tool_error_formatter=self._formatter(config.tool_error_formatter),
        )

    async def run(self, agent: Agent[Any], input: Any, **options: Any) -> RunResult:
        """``Runner.run(self.route(agent), input, ...)`` with ``run_config`` wrapped by
        ``self.run_config``; every other option as ``Runner.run``."""
        options["run_config"] = self.run_config(options.get("run_config"))
        return await Runner.run(self.route(agent), input, **options)

    # -- per-run state -------------------------------------------------------------------

    def _run(self, context: RunContextWrapper[Any], agent: object) -> _Run:
        usage = context.usage
        key = (id(usage), id(agent))
        run = self._runs.get(key)
        if run is None or run.usage() is not usage:
            for ended in [k for k, r in self._runs.items() if r.usage() is None]:
                del self._runs[ended]  # runs that ended
            run = _Run(
                session=f"agents-run:{uuid.uuid4().hex}",
                usage=weakref.ref(usage),
                conversation=list(context.turn_input),
                tool_names=tuple(
                    (_namespace(t), t.name)
                    for t in getattr(agent, "tools", ())
                    if isinstance(t, FunctionTool)
                ),
            )
            self._runs[key] = run
        return run

    def _run_of_call(self, context: RunContextWrapper[Any], call_id: str) -> _Run | None:
        """The run whose model made the call ``call_id`` (the error formatter has no agent)."""
        usage = context.usage
        for run in self._runs.values():
            if run.usage() is usage and call_id in run.call_ids:
                return run
        return None

    async def _turn(self, context: RunContextWrapper[Any], agent: object) -> tuple[_Run, Narrowing]:
        run = self._run(context, agent)
        async with run.lock:  # the SDK asks for every tool at once: one selection per turn
            if run.stale or run.narrowed is None:
                run.narrowed = await self._router.narrow(run.conversation, run.session)
                run.stale = False
            return run, run.narrowed

    async def _shows(
        self,
        context: RunContextWrapper[Any],
        agent: object,
        name: str,
        server: str | None,
        namespace: str | None = None,
    ) -> bool:
        """Whether the tool ``name`` (of MCP server ``server``, or in the SDK ``namespace``,
        which the catalogue reads as its server) is shown on this turn."""
        run, narrowed = await self._turn(context, agent)
        if (namespace, name) in run.called or _qualified(namespace, name) in narrowed.keep:
            return True  # called this turn, or activated (by the name the SDK reports)
        return narrowed.shows(name, server if server is not None else namespace)

    def _enabled(
        self, previous: bool | Callable[..., Any], name: str, namespace: str | None
    ) -> Callable[[RunContextWrapper[Any], Any], Awaitable[bool]]:
        async def is_enabled(context: RunContextWrapper[Any], agent: Any) -> bool:
            if not await _allowed(previous, context, agent):
                return False  # the tool's own rule comes first
            return await self._shows(context, agent, name, None, namespace)

        return is_enabled

    def _mcp_filter(self, previous: Any) -> Callable[[ToolFilterContext, MCPTool], Awaitable[bool]]:
        async def tool_filter(context: ToolFilterContext, tool: MCPTool) -> bool:
            if not await _passes(previous, context, tool):
                return False
            return await self._shows(
                context.run_context, context.agent, tool.name, context.server_name
            )

        tool_filter._toolroute = True  # type: ignore[attr-defined]
        return tool_filter

    def _formatter(self, previous: Formatter | None) -> Formatter:
        async def tool_error_formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
            if args.kind != "tool_not_found":
                return await _maybe(previous(args)) if previous is not None else None
            run = self._run_of_call(args.run_context, args.call_id)
            if run is None:  # a call of an agent this router does not route
                return await _maybe(previous(args)) if previous is not None else None
            run.stale = True  # the turn is answered: the next ``is_enabled`` opens a new one
            if self._router.mode == "activate":
                self._router.activations.activate(run.session, args.tool_name)
                return activation_note(args.tool_name)
            narrowed = run.narrowed
            shown = [
                _qualified(namespace, name)
                for namespace, name in run.tool_names
                if narrowed is not None and narrowed.shows(name, namespace)
            ]
            search = self._router.search_tool
            offered = search if search is not None and search in shown else None
            return refusal(args.tool_name, search_tool=offered, shown=shown)

        return tool_error_formatter

    # -- hooks ----------------------------------------------------------------------------

    def _saw(
        self, context: RunContextWrapper[Any], agent: object, items: list[TResponseInputItem]
    ) -> None:
        self._run(context, agent).conversation = list(items)

    def _answered(
        self, context: RunContextWrapper[Any], agent: object, response: ModelResponse
    ) -> None:
        run = self._run(context, agent)
        run.conversation.extend(response.output)
        run.call_ids = frozenset(
            call_id
            for item in response.output
            if isinstance(call_id := getattr(item, "call_id", None), str)
        )
        shown = run.narrowed
        # Only calls of tools the turn showed: a hidden one is answered by the rule, not run.
        calls = (
            (_call_namespace(item), name)
            for item in response.output
            if isinstance(name := getattr(item, "name", None), str)
            and getattr(item, "type", None) == "function_call"
        )
        run.called = frozenset(
            (namespace, name)
            for namespace, name in calls
            if shown is None or shown.shows(name, namespace)
        )

    def _tools_started(self, context: RunContextWrapper[Any], agent: object) -> None:
        # The SDK's re-check of this turn is behind us: the next ``is_enabled`` opens a turn.
        self._run(context, agent).stale = True


def _namespace(tool: FunctionTool) -> str | None:
    """The namespace the SDK's ``tool_namespace`` put ``tool`` in, if any."""
    namespace = getattr(tool, "_tool_namespace", None)
    return namespace if isinstance(namespace, str) and namespace else None


def _qualified(namespace: str | None, name: str) -> str:
    """The name the SDK reports a tool by: ``namespace.name`` for a namespaced one."""
    return f"{namespace}.{name}" if namespace is not None else name


def _call_namespace(item: Any) -> str | None:
    """The namespace a ``function_call`` item names, if any."""
    namespace = getattr(item, "namespace", None)
    return namespace if isinstance(namespace, str) and namespace else None


async def _maybe(value: Any) -> Any:
    return await value if isinstance(value, Awaitable) else value


async def _allowed(previous: bool | Callable[..., Any], context: Any, agent: Any) -> bool:
    if isinstance(previous, bool):
        return previous
    return bool(await _maybe(previous(context, agent)))


async def _passes(previous: Any, context: ToolFilterContext, tool: MCPTool) -> bool:
    if previous is None:
        return True
    if callable(previous):
        return bool(await _maybe(previous(context, tool)))
    # A static filter (``create_static_tool_filter``): allowed and blocked names.
    allowed = previous.get("allowed_tool_names")
    blocked = previous.get("blocked_tool_names") or ()
    return (allowed is None or tool.name in allowed) and tool.name not in blocked


class _Hooks(AgentHooks[Any]):
    """The router's view of each turn, in front of the agent's own hooks (if any)."""

    def __init__(self, router: ToolRouter, inner: Any) -> None:
        self._router = router
        self._inner = inner

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        self._router._saw(context, agent, input_items)
        if self._inner is not None:
            await self._inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self._router._answered(context, agent, response)
        if self._inner is not None:
            await self._inner.on_llm_end(context, agent, response)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Tool) -> None:
        self._router._tools_started(context, agent)
        if self._inner is not None:
            await self._inner.on_tool_start(context, agent, tool)

    async def on_start(self, context: AgentHookContext[Any], agent: Any) -> None:
        if self._inner is not None:
            await self._inner.on_start(context, agent)

    async def on_end(self, context: AgentHookContext[Any], agent: Any, output: Any) -> None:
        if self._inner is not None:
            await self._inner.on_end(context, agent, output)

    async def on_handoff(self, context: RunContextWrapper[Any], agent: Any, source: Any) -> None:
        if self._inner is not None:
            await self._inner.on_handoff(context, agent, source)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object
    ) -> None:
        if self._inner is not None:
            await self._inner.on_tool_end(context, agent, tool, result)
