"""An OpenAI Agents SDK agent whose model sees, turn by turn, only the tools the request needs.

Runs offline: the SDK's ``ScriptedModel`` stands in for the LLM (it plays a tool call, then an
answer) and records what each model call saw, printed after each run.

    pip install 'toolroute[openai-agents]'
    python examples/integrations/openai_agents_agent.py
"""

from __future__ import annotations

import asyncio

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import toolroute.asyncio
from toolroute import Catalog, EngineConfig
from toolroute.config import SelectionDefaults
from toolroute.integrations.openai_agents import ToolRouter


@function_tool
def get_weather(city: str) -> str:
    """Weather forecast for a city."""
    return f"sunny in {city}"


@function_tool
def send_email(to: str, subject: str) -> str:
    """Send an email message to one recipient."""
    return f"sent to {to}"


@function_tool
def create_issue(repository: str, title: str) -> str:
    """Open an issue in a GitHub repository."""
    return f"opened {repository}#1"


@function_tool
def list_events(day: str) -> str:
    """List the calendar events of one day."""
    return "stand-up at 9"


@function_tool
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


def stand_in_model(tool: str) -> ScriptedModel:
    call = function_call(tool, ARGUMENTS[tool], call_id="call-1")
    return ScriptedModel([ModelStep(output=[call]), ModelStep(output=[assistant_message("done")])])


async def main() -> None:
    set_tracing_disabled(True)  # offline: no trace export
    config = EngineConfig(selection=SelectionDefaults(max_tools=2))  # a short list, for the demo
    async with toolroute.asyncio.open_engine(Catalog.from_tools(TOOLS), config=config) as engine:
        await engine.ready()  # optional: rank with embeddings from the first request on
        router = ToolRouter(engine)
        for request, tool in SCRIPT.items():
            print(f"> {request}")
            model = stand_in_model(tool)
            result = await router.run(Agent(name="assistant", model=model, tools=TOOLS), request)
            for number, call in enumerate(model.calls, 1):
                print(f"  model call {number} saw {[t.name for t in call.tools]}")
            for item in result.new_items:
                if item.type == "tool_call_item":
                    print(f"  model called {item.raw_item.name}")
                elif item.type == "tool_call_output_item":
                    print(f"  it returned: {item.output}")


if __name__ == "__main__":
    asyncio.run(main())
