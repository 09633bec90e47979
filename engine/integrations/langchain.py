"""toolroute for LangChain 1.x agents: middleware that narrows and enforces, and a bigtool retriever.

::

    import toolroute.asyncio
    from toolroute.integrations.langchain import ToolRouteMiddleware

    async with toolroute.asyncio.open_engine(Catalog.from_tools(tools)) as engine:
        agent = create_agent(model, tools=tools, middleware=[ToolRouteMiddleware(engine)])
        await agent.ainvoke({"messages": [...]})

Narrowing ``request.tools`` alone only changes what the model is shown: LangChain's tool node
still runs any registered tool the model names. So the middleware also reads the model's
response: a call to a tool that was not shown is answered by toolroute's hidden-tool rule
(refused with a message the model can act on, or activated) instead of running silently.

``retrieve_tools(engine)`` is a ``retrieve_tools_coroutine`` for langgraph-bigtool's
``create_agent``: the engine's ``search_tools`` ranks the registry.

Requires ``pip install 'toolroute[langchain]'``; the middleware runs on ``ainvoke`` /
``astream`` (the engine is asynchronous).
"""

from .._core.public import publish as _publish
from ._langchain import ToolRouteMiddleware as ToolRouteMiddleware
from ._langchain import retrieve_tools as retrieve_tools

__all__ = ["ToolRouteMiddleware", "retrieve_tools"]

_publish(__name__, globals())
