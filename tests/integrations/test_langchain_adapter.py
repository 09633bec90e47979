"""The LangChain adapter, run with a fake chat model in ``create_agent``: what each model call
was bound to, the hidden-tool rule (refuse, activate) on a real run, and bigtool's retriever."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from framework_fixtures import FUNCTIONS, RAN, asyncio_engine
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from pydantic import Field

from toolroute import ConfigError
from toolroute.integrations.langchain import ToolRouteMiddleware, retrieve_tools

TOOLS = [tool(f) for f in FUNCTIONS]


class ScriptedChatModel(FakeMessagesListChatModel):
    """Plays its responses in order; records the tool names each model call was bound to."""

    bound: list[list[str]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        names = [t.name if isinstance(t, BaseTool) else t["name"] for t in tools]
        self.bound.append(names)
        return self


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


@pytest.fixture(autouse=True)
def nothing_ran_yet() -> None:
    RAN.clear()


def run(
    responses: list[BaseMessage], prompt: str, **options: Any
) -> tuple[list[list[str]], list[Any]]:
    model = ScriptedChatModel(responses=[*responses, AIMessage("done")], bound=[])

    async def main() -> list[Any]:
        async with asyncio_engine() as engine:
            agent = create_agent(
                model, tools=TOOLS, middleware=[ToolRouteMiddleware(engine, **options)]
            )
            result = await agent.ainvoke({"messages": [HumanMessage(prompt)]})
            return list(result["messages"])

    messages = asyncio.run(main())
    return model.bound, messages


def tool_messages(messages: list[Any]) -> dict[str, ToolMessage]:
    return {m.name: m for m in messages if isinstance(m, ToolMessage)}


def test_each_model_call_is_bound_to_only_the_tools_the_request_needs() -> None:
    bound, _ = run([call("get_weather", "c1", city="Oslo")], "what is the weather forecast in Oslo")
    assert bound[0] == ["get_weather"]
    assert len(bound) == 2
    assert RAN == ["get_weather"]


def test_a_hidden_tool_is_refused_on_the_models_response_and_not_run() -> None:
    bound, messages = run(
        [call("send_email", "c1", to="a@b.c", subject="hi")], "what is the weather forecast in Oslo"
    )
    assert bound[0] == ["get_weather"]
    assert RAN == []  # the tool node would have run it: the selection is enforced, not advertised
    answer = tool_messages(messages)["send_email"]
    assert answer.status == "error"
    assert "'send_email' is not available on this step, so it was not run" in answer.content
    assert "'get_weather'" in answer.content


def test_a_hidden_tool_runs_and_stays_shown_when_activation_is_chosen() -> None:
    bound, messages = run(
        [
            call("send_email", "c1", to="a@b.c", subject="hi"),
            call("get_weather", "c2", city="Oslo"),
        ],
        "what is the weather forecast in Oslo",
        on_hidden_call="activate",
    )
    assert RAN == ["send_email", "get_weather"]
    assert tool_messages(messages)["send_email"].content == "sent to a@b.c"
    assert bound[0] == ["get_weather"]
    assert "send_email" in bound[1]
    assert "send_email" in bound[2]


def test_a_refusal_names_the_search_tool_where_the_agent_offers_one() -> None:
    @tool
    def search_tools(query: str) -> str:
        """Search for available tools by describing what you need."""
        return "[]"

    model = ScriptedChatModel(
        responses=[call("send_email", "c1", to="a", subject="b"), AIMessage("done")], bound=[]
    )

    async def main() -> list[Any]:
        async with asyncio_engine() as engine:
            agent = create_agent(
                model, tools=[*TOOLS, search_tools], middleware=[ToolRouteMiddleware(engine)]
            )
            return list(
                (await agent.ainvoke({"messages": [HumanMessage("weather forecast in Oslo")]}))[
                    "messages"
                ]
            )

    messages = asyncio.run(main())
    assert model.bound[0] == ["get_weather", "search_tools"]
    assert "Call 'search_tools'" in tool_messages(messages)["send_email"].content
    assert RAN == []


def test_the_retriever_returns_registry_ids_best_first() -> None:
    registry = {f"tool-{t.name}": t for t in TOOLS}

    async def main() -> tuple[list[str], list[str]]:
        async with asyncio_engine() as engine:
            by_name = retrieve_tools(engine, k=1)
            by_key = retrieve_tools(engine, k=1, registry=registry)
            return await by_name("send an email message"), await by_key(
                "open an issue in the tracker"
            )

    assert asyncio.run(main()) == (["send_email"], ["tool-create_issue"])


def test_the_retriever_drives_langgraph_bigtool() -> None:
    # langgraph-bigtool 0.0.3 installs beside langchain 1.5, but its tool-running branch calls
    # ``ToolNode.inject_tool_args``, which langgraph-prebuilt 1.1 no longer has: it is not in
    # the extra, and this run stops at the retrieval, the part toolroute provides.
    bigtool = pytest.importorskip("langgraph_bigtool")
    registry = {t.name: t for t in TOOLS}
    model = ScriptedChatModel(
        responses=[call("retrieve_tools", "c1", query="send an email message"), AIMessage("done")],
        bound=[],
    )

    async def main() -> None:
        async with asyncio_engine() as engine:
            graph = bigtool.create_agent(
                model, registry, retrieve_tools_coroutine=retrieve_tools(engine, k=1)
            ).compile()
            await graph.ainvoke({"messages": [HumanMessage("tell Ann the build is green")]})

    asyncio.run(main())
    assert model.bound == [["retrieve_tools"], ["retrieve_tools", "send_email"]]


def test_the_middleware_refuses_a_trio_engine_and_an_unknown_mode() -> None:
    with pytest.raises(TypeError, match=re.escape("expected a toolroute.asyncio engine")):
        ToolRouteMiddleware(None)
    with pytest.raises(TypeError, match=re.escape("expected a toolroute.asyncio engine")):
        retrieve_tools(42)

    async def main() -> None:
        async with asyncio_engine() as engine:
            with pytest.raises(TypeError, match="needs the asyncio engine"):
                ToolRouteMiddleware(engine.engine)
            with pytest.raises(ConfigError, match="on_hidden_call must be one of"):
                ToolRouteMiddleware(engine, on_hidden_call="run")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="k must be an integer of at least 1, got 0"):
                retrieve_tools(engine, k=0)

    asyncio.run(main())


def test_conversations_whose_models_reuse_a_call_id_keep_their_own_verdicts() -> None:
    # A call id is unique only within its conversation (scripted and many local models number
    # them). One middleware serves two threads: A's model calls a hidden tool as ``call_1``,
    # then B's model calls a shown one as ``call_1`` and B's tool node runs first. B's tool
    # must run and A's must be refused, not the other way round.
    from langchain.agents.middleware import AgentMiddleware

    a_judged, b_done = asyncio.Event(), asyncio.Event()

    class HoldA(AgentMiddleware[Any, Any, Any]):
        """Holds thread A between its model's response (judged) and its tool node."""

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            response = await handler(request)
            if not b_done.is_set():
                a_judged.set()
                await b_done.wait()
            return response

    model_a = ScriptedChatModel(
        responses=[call("send_email", "call_1", to="a", subject="b"), AIMessage("done")], bound=[]
    )
    model_b = ScriptedChatModel(
        responses=[call("get_weather", "call_1", city="Oslo"), AIMessage("done")], bound=[]
    )

    async def main() -> tuple[list[Any], list[Any]]:
        async with asyncio_engine() as engine:
            routing = ToolRouteMiddleware(engine)
            agent_a = create_agent(model_a, tools=TOOLS, middleware=[HoldA(), routing])
            agent_b = create_agent(model_b, tools=TOOLS, middleware=[routing])
            prompt = {"messages": [HumanMessage("what is the weather forecast in Oslo")]}

            async def run_b() -> dict[str, Any]:
                try:
                    await a_judged.wait()
                    return await agent_b.ainvoke(prompt, {"configurable": {"thread_id": "B"}})
                finally:
                    b_done.set()

            a, b = await asyncio.gather(
                agent_a.ainvoke(prompt, {"configurable": {"thread_id": "A"}}), run_b()
            )
            return list(a["messages"]), list(b["messages"])

    a_messages, b_messages = asyncio.run(main())
    assert RAN == ["get_weather"]
    assert tool_messages(b_messages)["get_weather"].status == "success"
    assert tool_messages(a_messages)["send_email"].status == "error"


def test_a_structured_output_call_leaves_no_verdict_behind() -> None:
    # The structured-output tool is bound by the model node, not offered in ``request.tools``,
    # and the tool node never runs it: a verdict kept for it would be met by the next call
    # that reuses its id in the thread (here: a shown tool, which must run).
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import BaseModel

    class Forecast(BaseModel):
        """The forecast, as the answer."""

        summary: str

    model = ScriptedChatModel(
        responses=[
            AIMessage(
                "", tool_calls=[{"name": "Forecast", "args": {"summary": "sun"}, "id": "c1"}]
            ),
            call("get_weather", "c1", city="Oslo"),
            AIMessage(
                "", tool_calls=[{"name": "Forecast", "args": {"summary": "sun"}, "id": "c2"}]
            ),
        ],
        bound=[],
    )

    async def main() -> tuple[Any, list[Any]]:
        async with asyncio_engine() as engine:
            agent = create_agent(
                model,
                tools=TOOLS,
                middleware=[ToolRouteMiddleware(engine)],
                response_format=ToolStrategy(Forecast),
            )
            thread = {"configurable": {"thread_id": "t"}}
            prompt = {"messages": [HumanMessage("what is the weather forecast in Oslo")]}
            first = await agent.ainvoke(prompt, thread)
            second = await agent.ainvoke(prompt, thread)
            return first["structured_response"], list(second["messages"])

    answer, messages = asyncio.run(main())
    assert answer.summary == "sun"
    assert RAN == ["get_weather"]
    assert tool_messages(messages)["get_weather"].status == "success"


@pytest.mark.parametrize("mode", ["refuse", "activate"])
def test_the_rule_holds_when_an_outer_middleware_trims_the_models_messages(mode: str) -> None:
    # Without a thread, the conversation is known by its first message; a middleware ahead
    # of the router that passes the model only the latest messages must not make the tool
    # node miss the verdict (and run the hidden tool), nor lose an activation.
    from langchain.agents.middleware import AgentMiddleware

    class KeepLast(AgentMiddleware[Any, Any, Any]):
        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            return await handler(request.override(messages=request.messages[-1:]))

    model = ScriptedChatModel(
        responses=[
            call("send_email", "c1", to="a", subject="b"),
            call("get_weather", "c2", city="Oslo"),
            AIMessage("done"),
        ],
        bound=[],
    )

    async def main() -> list[Any]:
        async with asyncio_engine() as engine:
            routing = ToolRouteMiddleware(engine, on_hidden_call=mode)  # type: ignore[arg-type]
            agent = create_agent(model, tools=TOOLS, middleware=[KeepLast(), routing])
            prompt = [HumanMessage("hello"), HumanMessage("what is the weather forecast in Oslo")]
            return list((await agent.ainvoke({"messages": prompt}))["messages"])

    messages = asyncio.run(main())
    if mode == "refuse":
        assert RAN == ["get_weather"]
        assert tool_messages(messages)["send_email"].status == "error"
    else:
        assert RAN == ["send_email", "get_weather"]
        assert all("send_email" in bound for bound in model.bound[1:])


def test_a_hidden_call_without_an_id_is_refused_and_not_run() -> None:
    # Some chat models send tool calls with ``id: None``: such a call of a hidden tool is
    # refused as any other (the tool node would run it), each of two identical ones too.
    unnamed = {"name": "send_email", "args": {"to": "a", "subject": "b"}, "id": None}
    bound, messages = run(
        [AIMessage("", tool_calls=[unnamed, dict(unnamed)])], "what is the weather forecast in Oslo"
    )
    assert bound[0] == ["get_weather"]
    assert RAN == []
    refusals = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.status for m in refusals] == ["error", "error"]
    assert all("'send_email' is not available on this step" in m.content for m in refusals)
    assert messages[-1].content == "done"
