"""toolroute for Pydantic AI 2.x agents: per-step tool narrowing, and a ``ToolSearch`` strategy.

::

    import toolroute.asyncio
    from toolroute.integrations.pydantic_ai import RouteTools

    async with toolroute.asyncio.open_engine(Catalog.from_tools(tools)) as engine:
        agent = Agent(model, tools=tools, capabilities=[RouteTools(engine)])

``RouteTools`` is a capability: before every model request it asks the engine which tools the
conversation needs (``ctx.messages``, read as they are) and sends only those; the rest stay
registered, so a call to one of them is answered by toolroute's hidden-tool rule instead of
Pydantic AI's "unknown tool" retry, which ends the run once the retries run out.

``search_strategy(engine)`` is a ``ToolSearch(strategy=...)`` for deferred tools
(``Tool(fn, defer_loading=True)``): the engine's ``search_tools`` ranks them.

Requires ``pip install 'toolroute[pydantic-ai]'``.
"""

from .._core.public import publish as _publish
from ._pydantic_ai import RouteTools as RouteTools
from ._pydantic_ai import search_strategy as search_strategy

__all__ = ["RouteTools", "search_strategy"]

_publish(__name__, globals())
