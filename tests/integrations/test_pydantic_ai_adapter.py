"""The Pydantic AI adapter, run with Pydantic AI's own ``FunctionModel``: what each model call
saw, and the hidden-tool rule (refuse, activate) on a real run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from framework_fixtures import FUNCTIONS, RAN, asyncio_engine, create_issue, get_weather, send_email
from pydantic_ai import Agent, Tool
from pydantic_ai.capabilities import ToolSearch
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from toolroute import ConfigError
from toolroute import Tool as Tool_
from toolroute.integrations.pydantic_ai import RouteTools, search_strategy


class Script:
    """A ``FunctionModel`` body: plays ``replies`` in order, recording the tools each call saw."""

    def __init__(self, *replies: ModelResponse) -> None:
        self.replies = list(replies)
        self.seen: list[list[str]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append([tool.name for tool in info.function_tools])
        return self.replies.pop(0) if self.replies else ModelResponse(parts=[TextPart("done")])


def call(name: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args)])


def tool_returns(messages: list[ModelMessage]) -> dict[str, Any]:
    return {
        part.tool_name: part.content
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


@pytest.fixture(autouse=True)
def nothing_ran_yet() -> None:
    RAN.clear()


def run(script: Script, prompt: str, **options: Any) -> list[ModelMessage]:
    async def main() -> list[ModelMessage]:
        async with asyncio_engine() as engine:
            agent = Agent(
                FunctionModel(script),
                tools=FUNCTIONS,
                capabilities=[RouteTools(engine, **options)],
            )
            result = await agent.run(prompt)
            return result.all_messages()

    return asyncio.run(main())


def test_each_model_call_sees_only_the_tools_the_request_needs() -> None:
    script = Script(call("get_weather", city="Oslo"))
    run(script, "what is the weather forecast in Oslo")
    assert script.seen[0] == ["get_weather"]
    assert len(script.seen) == 2
    assert RAN == ["get_weather"]


def test_a_hidden_tool_is_refused_with_a_message_and_not_run() -> None:
    script = Script(call("send_email", to="a@b.c", subject="hi"))
    messages = run(script, "what is the weather forecast in Oslo")
    assert script.seen[0] == ["get_weather"]
    assert RAN == []  # never a silent execution
    answer = tool_returns(messages)["send_email"]
    assert "'send_email' is not available on this step, so it was not run" in answer
    assert "'get_weather'" in answer  # what the model can use instead


def test_a_hidden_tool_is_run_and_kept_shown_when_activation_is_chosen() -> None:
    script = Script(call("send_email", to="a@b.c", subject="hi"), call("get_weather", city="Oslo"))
    messages = run(script, "what is the weather forecast in Oslo", on_hidden_call="activate")
    assert RAN == ["send_email", "get_weather"]
    assert tool_returns(messages)["send_email"] == "sent to a@b.c"
    assert script.seen[0] == ["get_weather"]
    assert "send_email" in script.seen[1]
    assert "send_email" in script.seen[2]


def test_a_hidden_tool_called_with_arguments_it_never_saw_is_refused_not_retried() -> None:
    # The model was not shown the tool's schema: wrong arguments are likely. Validation
    # errors would spend the tool's retries (one by default: two such calls end the run).
    script = Script(
        ModelResponse(
            parts=[
                ToolCallPart("send_email", {"recipient": "a@b.c"}),
                ToolCallPart("send_email", {"recipient": "b@b.c"}),
            ]
        )
    )
    messages = run(script, "what is the weather forecast in Oslo")
    assert RAN == []
    answers = [
        part.content
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == "send_email"
    ]
    assert len(answers) == 2
    assert all("'send_email' is not available on this step" in answer for answer in answers)


def test_an_activated_tool_called_with_wrong_arguments_is_activated_all_the_same() -> None:
    # Its validation errors go back to the model, and the tool is shown from then on, so a
    # retry comes with its schema.
    script = Script(call("send_email", recipient="a@b.c"), call("get_weather", city="Oslo"))
    run(script, "what is the weather forecast in Oslo", on_hidden_call="activate")
    assert "send_email" not in script.seen[0]
    assert all("send_email" in seen for seen in script.seen[1:])
    assert RAN == ["get_weather"]


def test_deferred_tools_are_found_by_the_engine_and_refusals_name_search_tools() -> None:
    script = Script(
        call("create_issue", title="login crash"),
        call("search_tools", queries=["send an email message"]),
        call("send_email", to="a@b.c", subject="hi"),
    )

    async def main() -> list[ModelMessage]:
        async with asyncio_engine() as engine:
            agent = Agent(
                FunctionModel(script),
                tools=[get_weather, create_issue, Tool(send_email, defer_loading=True)],
                capabilities=[
                    RouteTools(engine),
                    ToolSearch(strategy=search_strategy(engine)),
                ],
            )
            return (await agent.run("what is the weather forecast in Oslo")).all_messages()

    messages = asyncio.run(main())
    assert script.seen[0] == ["get_weather", "search_tools"]
    refused = tool_returns(messages)["create_issue"]
    assert "'create_issue' is not available" in refused
    assert "Call 'search_tools'" in refused
    assert "send_email" in script.seen[2]  # discovered through the engine's search
    assert RAN == ["send_email"]


def test_the_adapter_refuses_a_trio_engine_and_an_unknown_mode() -> None:
    with pytest.raises(TypeError, match=r"expected a toolroute\.asyncio engine"):
        RouteTools(object())
    with pytest.raises(TypeError, match=r"expected a toolroute\.asyncio engine"):
        search_strategy("engine")

    async def main() -> None:
        async with asyncio_engine() as engine:
            with pytest.raises(TypeError, match="needs the asyncio engine"):
                RouteTools(engine.engine)
            with pytest.raises(
                ConfigError,
                match="on_hidden_call must be one of 'refuse', 'activate', got 'ignore'",
            ):
                RouteTools(engine, on_hidden_call="ignore")  # type: ignore[arg-type]

    asyncio.run(main())


def test_the_search_ranks_among_the_deferred_tools_only() -> None:
    # Tools sent loaded are in the catalogue too; ranking them must not push the deferred
    # tools the query matches out of the answer.
    shown = [
        Tool_(name, name, description="weather report forecast for a city")
        for name in (f"weather_report_{i}" for i in range(12))
    ]
    deferred = Tool_("weather_alerts", "weather_alerts", description="weather alerts for a city")

    async def main() -> list[str]:
        async with asyncio_engine([*shown, deferred]) as engine:
            strategy = search_strategy(engine, k=3)
            tools = [ToolDefinition(name="weather_alerts", description="weather alerts")]
            return await strategy(None, ["weather report forecast"], tools)  # type: ignore[arg-type]

    assert asyncio.run(main()) == ["weather_alerts"]
