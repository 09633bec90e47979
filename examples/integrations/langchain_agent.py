"""A LangChain agent whose model is bound, on every call, only to the tools the request needs.

Runs offline: a small scripted chat model stands in for the LLM (it calls the tool the script
names, then answers) and prints the tools each model call was bound to. The middleware also
enforces the selection: the stand-in's call to a tool it was not shown is refused, not run.

    pip install 'toolroute[langchain]'
    python examples/integrations/langchain_agent.py
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from pydantic import Field

import toolroute.asyncio
from toolroute import Catalog, EngineConfig
from toolroute.config import SelectionDefaults
from toolroute.integrations.langchain import ToolRouteMiddleware


@tool
def get_weather(city: str) -> str:
    """Weather forecast for a city."""
    return f"sunny in {city}"


@tool
def send_email(to: str, subject: str) -> str:
    """Send an email message to one recipient."""
    return f"sent to {to}"


@tool
def create_issue(repository: str, title: str) -> str:
    """Open an issue in a GitHub repository."""
    return f"opened {repository}#1"


@tool
def list_events(day: str) -> str:
    """List the calendar events of one day."""
    return "stand-up at 9"


@tool
def book_flight(origin: str, destination: str) -> str:
    """Book a flight between two airports."""
    return "booked"


TOOLS = [get_weather, send_email, create_issue, list_events, book_flight]
ARGUMENTS = {
    "get_weather": {"city": "Oslo"},
    "send_email": {"to": "ann@example.com", "subject": "hi"},
    "create_issue": {"repository": "acme/app", "title": "login crash"},
}
#: Each request, and the tool the stand-in model calls for it (the last one: a tool it was
#: not shown, as a model does when it remembers a tool from elsewhere).
SCRIPT = {
    "what is the weather forecast in Oslo tomorrow?": "get_weather",
    "open an issue about the login crash in acme/app": "create_issue",
    "what is on my calendar on Friday?": "send_email",
}


class StandInModel(BaseChatModel):
    """Calls the scripted tool for the request, then answers; prints what it was bound to."""

    bound: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "stand-in"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> StandInModel:
        names = [t.name if isinstance(t, BaseTool) else t["name"] for t in tools]
        return self.model_copy(update={"bound": names})

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        print(f"  model saw {self.bound}")
        last = messages[-1]
        if isinstance(last, ToolMessage):
            print(f"  {last.name} returned: {last.content}")
            reply = AIMessage("done")
        else:
            name = SCRIPT[str(last.content)]
            print(f"  model calls {name}")
            reply = AIMessage(
                "", tool_calls=[{"name": name, "args": ARGUMENTS[name], "id": "call-1"}]
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


async def main() -> None:
    config = EngineConfig(selection=SelectionDefaults(max_tools=2))  # a short list, for the demo
    async with toolroute.asyncio.open_engine(Catalog.from_tools(TOOLS), config=config) as engine:
        await engine.ready()  # optional: rank with embeddings from the first request on
        agent = create_agent(StandInModel(), tools=TOOLS, middleware=[ToolRouteMiddleware(engine)])
        for request in SCRIPT:
            print(f"> {request}")
            await agent.ainvoke({"messages": [HumanMessage(request)]})


if __name__ == "__main__":
    asyncio.run(main())
