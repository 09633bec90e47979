"""A Pydantic AI agent whose model sees, on every step, only the tools the request needs.

Runs offline: Pydantic AI's ``FunctionModel`` stands in for the LLM (it calls the tool the
script names, then answers) and prints the tools each model call saw.

    pip install 'toolroute[pydantic-ai]'
    python examples/integrations/pydantic_ai_agent.py
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import toolroute.asyncio
from toolroute import Catalog, EngineConfig
from toolroute.config import SelectionDefaults
from toolroute.integrations.pydantic_ai import RouteTools


def get_weather(city: str) -> str:
    """Weather forecast for a city."""
    return f"sunny in {city}"


def send_email(to: str, subject: str) -> str:
    """Send an email message to one recipient."""
    return f"sent to {to}"


def create_issue(repository: str, title: str) -> str:
    """Open an issue in a GitHub repository."""
    return f"opened {repository}#1"


def list_events(day: str) -> str:
    """List the calendar events of one day."""
    return "stand-up at 9"


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


def stand_in_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    print(f"  model saw {[tool.name for tool in info.function_tools]}")
    parts = messages[-1].parts
    for part in parts:
        if isinstance(part, ToolReturnPart):
            print(f"  {part.tool_name} returned: {part.content}")
            return ModelResponse(parts=[TextPart("done")])
    request = next(str(p.content) for p in parts if isinstance(p, UserPromptPart))
    tool = SCRIPT[request]
    print(f"  model calls {tool}")
    return ModelResponse(parts=[ToolCallPart(tool, ARGUMENTS[tool])])


async def main() -> None:
    config = EngineConfig(selection=SelectionDefaults(max_tools=2))  # a short list, for the demo
    async with toolroute.asyncio.open_engine(Catalog.from_tools(TOOLS), config=config) as engine:
        await engine.ready()  # optional: rank with embeddings from the first request on
        agent = Agent(FunctionModel(stand_in_model), tools=TOOLS, capabilities=[RouteTools(engine)])
        for request in SCRIPT:
            print(f"> {request}")
            await agent.run(request)


if __name__ == "__main__":
    asyncio.run(main())
