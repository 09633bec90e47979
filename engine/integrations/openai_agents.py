"""toolroute for the OpenAI Agents SDK (0.24): per-turn filtering of function and MCP tools.

::

    import toolroute.asyncio
    from toolroute.integrations.openai_agents import ToolRouter

    async with toolroute.asyncio.open_engine(Catalog.from_tools(agent.tools)) as engine:
        result = await ToolRouter(engine).run(agent, "weather in Oslo")

``ToolRouter.route(agent)`` is a copy of the agent whose function tools answer ``is_enabled``
and whose MCP servers answer ``tool_filter`` from one selection per turn. The SDK asks
``is_enabled`` again just before it runs the calls of a turn; that answer is the turn's
selection plus every tool the model called in it, so a tool the model called is never
withdrawn before it runs (the SDK would end the run: "Tool … is currently disabled").
The next selection is made only once the turn's tools have started.

A call to a tool that was not shown reaches the SDK's "tool not found" path:
``ToolRouter.run_config()`` (which ``run`` uses) turns it into a tool result, by toolroute's
hidden-tool rule, instead of ``ModelBehaviorError``.

Requires ``pip install 'toolroute[openai-agents]'``.
"""

from .._core.public import publish as _publish
from ._openai_agents import ToolRouter as ToolRouter

__all__ = ["ToolRouter"]

_publish(__name__, globals())
