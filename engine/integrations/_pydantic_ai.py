"""The pydantic_ai adapter's implementation; ``toolroute.integrations.pydantic_ai`` is its public face."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext, ToolDefinition

from ._hidden import OnHiddenCall, refusal
from ._narrow import Narrowing, StepRouter

#: Runs whose last step is remembered (for the hidden-call rule); the oldest goes first.
_MAX_RUNS = 1_000

SearchStrategy = Callable[
    [RunContext[Any], Sequence[str], Sequence[ToolDefinition]], Awaitable[list[str]]
]


@attrs.frozen
class _Step:
    narrowed: Narrowing
    shown: tuple[str, ...]
    search_tool: str | None  # the search tool's name when this step offered it


def _session(ctx: RunContext[Any]) -> str | None:
    # A conversation continued with ``message_history`` keeps its id across runs.
    return ctx.conversation_id or ctx.run_id


class RouteTools(AbstractCapability[Any]):
    """A capability that shows the model, on every step, only the tools the request needs.

    Args:
        engine: a ``toolroute.asyncio`` engine whose catalogue holds the agent's tools
            (``Catalog.from_tools(tools)``); a tool it does not know is always shown.
        on_hidden_call: ``"refuse"`` (default): a call to a tool that was not shown does not
            run, and the model is told what to do instead; ``"activate"``: the tool runs and
            is shown for the rest of the conversation.
        search_tool: the tool-search tool's name (Pydantic AI's ``ToolSearch`` offers
            ``search_tools``); always shown, and named in refusals where offered.

    Raises:
        TypeError: ``engine`` is not a ``toolroute.asyncio`` engine.
        ConfigError: ``on_hidden_call`` is neither ``"refuse"`` nor ``"activate"``.

    **Fail-open:** every tool is shown when the engine cannot judge the step (see
    ``Engine.prepare_step``: keyword-only recall while warming up, every tool after two
    steps without a tool call) or cannot read the conversation. Deferred tools
    (``defer_loading=True``) and output tools are left to Pydantic AI.
    """

    def __init__(
        self,
        engine: object,
        *,
        on_hidden_call: OnHiddenCall = "refuse",
        search_tool: str | None = "search_tools",
    ) -> None:
        self._router = StepRouter(engine, "RouteTools", on_hidden_call, search_tool)
        self._steps: OrderedDict[str, _Step] = OrderedDict()

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live engine: not part of an agent spec

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # Narrowed here, on the request's parameters, not in ``prepare_tools``: what that hook
        # drops Pydantic AI also stops executing, so the hidden-call rule could never answer.
        session = _session(ctx)
        narrowed = await self._router.narrow(ctx.messages, session)
        parameters = request_context.model_request_parameters
        offered = parameters.function_tools
        shown = [t for t in offered if t.defer_loading or narrowed.shows(t.name)]
        search = self._router.search_tool
        self._remember(
            ctx.run_id,
            _Step(
                narrowed,
                tuple(t.name for t in shown),
                search if any(t.name == search for t in offered) else None,
            ),
        )
        narrowed_parameters = dataclasses.replace(parameters, function_tools=shown)
        return dataclasses.replace(request_context, model_request_parameters=narrowed_parameters)

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: str | dict[str, Any],
        handler: Callable[[str | dict[str, Any]], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        # A model calling a tool it was not shown has not seen its schema either: a refused
        # call is not validated (its errors would spend the tool's retries, and end the run),
        # and an activated one is shown from now on, so a retry comes with the schema.
        step = self._hidden(ctx, call, tool_def)
        if step is None:
            return await handler(args)
        if self._router.mode == "activate":
            self._router.activations.activate(_session(ctx), call.tool_name)
            return await handler(args)
        return args if isinstance(args, dict) else {}

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Callable[[Any], Awaitable[Any]],
    ) -> Any:
        step = self._hidden(ctx, call, tool_def)
        if step is None:
            return await handler(args)
        if self._router.mode == "activate":
            self._router.activations.activate(_session(ctx), call.tool_name)
            return await handler(args)
        return refusal(call.tool_name, search_tool=step.search_tool, shown=step.shown)

    def _hidden(
        self, ctx: RunContext[Any], call: ToolCallPart, tool_def: ToolDefinition
    ) -> _Step | None:
        """The step that hid the called tool, or ``None``: the tool was shown (or deferred)."""
        step = self._steps.get(ctx.run_id) if ctx.run_id is not None else None
        if step is None or tool_def.defer_loading or call.tool_name in step.shown:
            return None
        return step

    def _remember(self, run_id: str | None, step: _Step) -> None:
        if run_id is None:
            return
        self._steps[run_id] = step
        self._steps.move_to_end(run_id)
        while len(self._steps) > _MAX_RUNS:
            self._steps.popitem(last=False)


def search_strategy(engine: object, *, k: int = 10) -> SearchStrategy:
    """A ``ToolSearch(strategy=...)`` function backed by the engine's ``search_tools``.

    Args:
        engine: a ``toolroute.asyncio`` engine whose catalogue holds the deferred tools.
        k: how many tools each query asks the engine for (``ToolSearch.max_results`` still
            caps what the model gets).

    Returns:
        ``strategy(ctx, queries, tools)``: the names of ``tools`` that match, best first,
        over every query; deferred tools the engine's catalogue does not know follow
        (fail-open: the engine cannot rank them, so they are not withheld).

    Raises:
        TypeError: ``engine`` is not a ``toolroute.asyncio`` engine.
    """
    router = StepRouter(engine, "search_strategy", "refuse", None)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise TypeError(f"k must be an integer of at least 1, got {k!r}")

    async def strategy(
        ctx: RunContext[Any], queries: Sequence[str], tools: Sequence[ToolDefinition]
    ) -> list[str]:
        deferred = {tool.name for tool in tools}
        catalog = router.engine.catalog.tools
        # Ranked among the deferred tools only: tools sent loaded are in the catalogue too,
        # and must not take the places of the deferred ones the query matches.
        allow = [tool.id for tool in catalog if tool.name in deferred]
        found: dict[str, None] = {}
        for query in queries:
            if not query.strip() or not allow:
                continue
            answer = await router.engine.search_tools({"query": query}, k=k, allow=allow)
            for tool in answer["tools"]:
                if tool["name"] in deferred:
                    found.setdefault(tool["name"], None)
        known = {tool.name for tool in catalog}
        found.update(dict.fromkeys(t.name for t in tools if t.name not in known))
        return list(found)

    return strategy
