"""The OpenAI Agents SDK adapter, run with the SDK's ``ScriptedModel``: the tools each model
call saw, the SDK's re-check before a tool runs, and the hidden-tool rule (refuse, activate)."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, AgentHooks, FunctionTool, RunConfig, function_tool, set_tracing_disabled
from agents.mcp import ToolFilterContext, create_static_tool_filter
from agents.run_config import ToolErrorFormatterArgs
from agents.run_context import RunContextWrapper
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from framework_fixtures import FUNCTIONS, RAN, asyncio_engine
from mcp.types import Tool as MCPTool

from toolroute import Catalog, ConfigError
from toolroute.integrations._narrow import Narrowing, narrowing
from toolroute.integrations.openai_agents import ToolRouter

set_tracing_disabled(True)  # the SDK would otherwise export traces when a key is set


@pytest.fixture(autouse=True)
def nothing_ran_yet() -> None:
    RAN.clear()


def tools() -> list[FunctionTool]:
    return [function_tool(f) for f in FUNCTIONS]


def steps(*outputs: Any) -> ScriptedModel:
    return ScriptedModel(
        [*(ModelStep(output=[o]) for o in outputs), ModelStep(output=[assistant_message("done")])]
    )


def seen(model: ScriptedModel) -> list[list[str]]:
    return [[tool.name for tool in call.tools] for call in model.calls]


def outputs(result: Any) -> dict[str, list[str]]:
    """What each tool's calls returned to the model, in order."""
    calls = {
        i.raw_item.call_id: i.raw_item.name for i in result.new_items if i.type == "tool_call_item"
    }
    found: dict[str, list[str]] = {}
    for item in result.new_items:
        if item.type == "tool_call_output_item":
            found.setdefault(calls[item.raw_item["call_id"]], []).append(item.output)
    return found


def run(model: ScriptedModel, prompt: str, **options: Any) -> Any:
    async def main() -> Any:
        async with asyncio_engine() as engine:
            agent = Agent(name="assistant", model=model, tools=tools())
            return await ToolRouter(engine, **options).run(agent, prompt)

    return asyncio.run(main())


def test_each_model_call_sees_only_the_tools_the_request_needs() -> None:
    model = steps(function_call("get_weather", {"city": "Oslo"}, call_id="c1"))
    result = run(model, "what is the weather forecast in Oslo")
    assert seen(model)[0] == ["get_weather"]
    assert RAN == ["get_weather"]  # the SDK's re-check before running it found it enabled
    assert result.final_output == "done"


def test_a_tool_called_in_a_turn_is_never_withdrawn_before_it_runs() -> None:
    # A selection that flips on every engine call is the worst case for the SDK's re-check
    # (it asks ``is_enabled`` again after the model answered): one selection per turn, plus
    # the tools the model called, so the call still runs and the next turn sees the new pick.
    model = steps(function_call("get_weather", {"city": "Oslo"}, call_id="c1"))
    picks = [("get_weather",), ("send_email",), ("create_issue",)]
    asked: list[object] = []

    async def main() -> Any:
        async with asyncio_engine() as engine:
            router = ToolRouter(engine)

            async def flapping(messages: object, session: str | None) -> Narrowing:
                asked.append(messages)
                return narrowing(engine.catalog, picks[len(asked) - 1])

            router._router.narrow = flapping  # type: ignore[method-assign]
            return await router.run(Agent(name="assistant", model=model, tools=tools()), "hi")

    result = asyncio.run(main())
    assert RAN == ["get_weather"]  # not "Tool get_weather is currently disabled"
    # The next turn has the new pick, and the tool just used stays callable one more turn.
    assert seen(model) == [["get_weather"], ["get_weather", "send_email"]]
    assert len(asked) == 2  # once per turn, never at the re-check
    assert result.final_output == "done"


def test_a_hidden_tool_is_refused_with_a_message_and_the_run_goes_on() -> None:
    model = steps(function_call("send_email", {"to": "a@b.c", "subject": "hi"}, call_id="c1"))
    result = run(model, "what is the weather forecast in Oslo")
    assert seen(model)[0] == ["get_weather"]
    assert RAN == []
    [answer] = outputs(result)["send_email"]
    assert "'send_email' is not available on this step, so it was not run" in answer
    assert "'get_weather'" in answer
    assert result.final_output == "done"  # no ModelBehaviorError


def test_a_hidden_tool_is_activated_for_the_rest_of_the_run() -> None:
    model = steps(
        function_call("create_issue", {"title": "crash"}, call_id="c1"),
        function_call("create_issue", {"title": "crash"}, call_id="c2"),
    )
    result = run(model, "what is the weather forecast in Oslo", on_hidden_call="activate")
    assert seen(model)[0] == ["get_weather"]
    activated, ran = outputs(result)["create_issue"]
    assert "available from your next step on: call it again" in activated
    assert ran == "opened crash"
    assert "create_issue" in seen(model)[1]
    assert "create_issue" in seen(model)[2]  # shown for the rest of the run
    assert RAN == ["create_issue"]


def test_a_refusal_names_the_search_tool_when_the_agent_has_one() -> None:
    @function_tool
    def search_tools(query: str) -> str:
        """Search for available tools by describing what you need."""
        return "[]"

    model = steps(function_call("send_email", {"to": "a", "subject": "b"}, call_id="c1"))

    async def main() -> Any:
        async with asyncio_engine() as engine:
            agent = Agent(name="assistant", model=model, tools=[*tools(), search_tools])
            return await ToolRouter(engine).run(agent, "weather forecast in Oslo")

    result = asyncio.run(main())
    assert seen(model)[0] == ["get_weather", "search_tools"]
    assert "Call 'search_tools'" in outputs(result)["send_email"][0]


def test_an_agent_handed_off_to_is_routed_when_routed_too() -> None:
    billing_model = steps(function_call("get_weather", {"city": "Oslo"}, call_id="b1"))
    triage_model = ScriptedModel(
        [ModelStep(output=[function_call("transfer_to_billing", {}, call_id="t1")])]
    )

    async def main() -> Any:
        async with asyncio_engine() as engine:
            router = ToolRouter(engine)
            billing = router.route(Agent(name="billing", model=billing_model, tools=tools()))
            triage = Agent(name="triage", model=triage_model, handoffs=[billing])
            return await router.run(triage, "what is the weather forecast in Oslo")

    result = asyncio.run(main())
    assert seen(billing_model) == [["get_weather"], ["get_weather"]]
    assert RAN == ["get_weather"]
    assert result.final_output == "done"


def test_a_refusal_names_only_tools_the_refusing_agent_was_shown() -> None:
    # One router over two agents: the engine chose get_weather, the triage agent's tool, for
    # the billing agent's turn; billing was shown none of its own, so the refusal names none.
    billing_model = steps(function_call("send_email", {"to": "a", "subject": "b"}, call_id="b1"))
    triage_model = ScriptedModel(
        [ModelStep(output=[function_call("transfer_to_billing", {}, call_id="t1")])]
    )
    weather, email, issue = tools()

    async def main() -> Any:
        async with asyncio_engine() as engine:
            router = ToolRouter(engine)
            billing = router.route(Agent(name="billing", model=billing_model, tools=[email, issue]))
            triage = Agent(name="triage", model=triage_model, tools=[weather], handoffs=[billing])
            return await router.run(triage, "what is the weather forecast in Oslo")

    result = asyncio.run(main())
    assert seen(billing_model)[0] == []
    assert RAN == []
    assert outputs(result)["send_email"] == [
        "The tool 'send_email' is not available on this step, so it was not run. Answer "
        "without calling a tool."
    ]


def test_an_agent_run_as_a_tool_by_the_same_router_keeps_its_callers_selection() -> None:
    # ``as_tool`` runs the inner agent nested in the caller's run, sharing its ``Usage``: the
    # inner conversation must not become the caller's, or the caller's next turn is chosen
    # for the inner task and its own tool is refused.
    inner_model = steps(function_call("send_email", {"to": "bob", "subject": "hi"}, call_id="i1"))
    outer_model = steps(
        function_call("mailer", {"input": "send an email to bob"}, call_id="o1"),
        function_call("get_weather", {"city": "Oslo"}, call_id="o2"),
    )

    async def main() -> Any:
        async with asyncio_engine() as engine:
            router = ToolRouter(engine)
            inner = router.route(Agent(name="inner", model=inner_model, tools=tools()))
            mailer = inner.as_tool(tool_name="mailer", tool_description="Writes emails.")
            outer = Agent(name="outer", model=outer_model, tools=[*tools(), mailer])
            return await router.run(outer, "what is the weather forecast in Oslo")

    result = asyncio.run(main())
    assert seen(inner_model) == [["send_email"], ["send_email"]]
    assert seen(outer_model) == [["get_weather", "mailer"]] * 3
    assert RAN == ["send_email", "get_weather"]
    assert result.final_output == "done"


def test_the_agents_own_is_enabled_hooks_and_run_config_are_kept() -> None:
    never = function_tool(FUNCTIONS[0], is_enabled=False)
    heard: list[str] = []

    class Hooks(AgentHooks[Any]):
        async def on_start(self, context: Any, agent: Any) -> None:
            heard.append("start")

        async def on_llm_start(self, *args: Any) -> None:
            heard.append("llm_start")

        async def on_llm_end(self, *args: Any) -> None:
            heard.append("llm_end")

        async def on_tool_start(self, *args: Any) -> None:
            heard.append("tool_start")

        async def on_tool_end(self, *args: Any) -> None:
            heard.append("tool_end")

        async def on_end(self, *args: Any) -> None:
            heard.append("end")

    def formatter(args: Any) -> str:
        return f"mine: {args.kind}"

    model = steps(function_call("send_email", {"to": "a", "subject": "b"}, call_id="c1"))

    async def main() -> tuple[RunConfig, Any, Any]:
        async with asyncio_engine() as engine:
            router = ToolRouter(engine)
            agent = Agent(name="assistant", model=model, tools=[never, *tools()[1:]], hooks=Hooks())
            mine = RunConfig(workflow_name="mine", tool_error_formatter=formatter)
            config = router.run_config(mine)
            result = await router.run(agent, "send an email message to Ann", run_config=mine)
            exception = ToolErrorFormatterArgs(
                kind="tool_exception",
                tool_type="function",
                tool_name="send_email",
                call_id="c9",
                default_message="boom",
                run_context=RunContextWrapper(context=None),
            )
            assert config.tool_error_formatter is not None
            return config, result, await config.tool_error_formatter(exception)

    config, result, formatted = asyncio.run(main())
    assert "get_weather" not in seen(model)[0]  # its own is_enabled=False comes first
    assert RAN == ["send_email"]
    assert heard == [
        "start",
        "llm_start",
        "llm_end",
        "tool_start",
        "tool_end",
        "llm_start",
        "llm_end",
        "end",
    ]
    assert config.workflow_name == "mine"
    assert config.tool_not_found_behavior == "return_error_to_model"
    assert formatted == "mine: tool_exception"  # every other tool error is still the caller's
    assert result.final_output == "done"


def test_mcp_tools_are_filtered_per_turn_by_server_and_name() -> None:
    weather = MCPTool(
        name="forecast", description="Weather forecast for a city", inputSchema={"type": "object"}
    )
    mail = MCPTool(name="send", description="Send an email message", inputSchema={"type": "object"})
    catalog_tools = [
        *Catalog.from_tools([weather], server="weather").tools,
        *Catalog.from_tools([mail], server="mail").tools,
    ]

    class Server:  # what the filter reads of an MCP server: its name and its tool_filter
        name = "weather"
        tool_filter = create_static_tool_filter(blocked_tool_names=["blocked"])

    async def main() -> list[bool]:
        async with asyncio_engine(catalog_tools) as engine:
            router = ToolRouter(engine)
            server = Server()
            agent = Agent(name="assistant", tools=[], mcp_servers=[server])  # type: ignore[list-item]
            router.route(agent)
            wrapper = RunContextWrapper(context=None)
            wrapper.turn_input = [{"role": "user", "content": "weather forecast in Oslo"}]
            answers = []
            for tool, on in [
                (weather, "weather"),
                (mail, "mail"),
                (MCPTool(name="blocked", inputSchema={}), "weather"),
            ]:
                context = ToolFilterContext(run_context=wrapper, agent=agent, server_name=on)
                answers.append(await server.tool_filter(context, tool))
            return answers

    assert asyncio.run(main()) == [True, False, False]


def test_the_router_refuses_a_trio_engine_an_unknown_mode_and_a_non_agent() -> None:
    with pytest.raises(TypeError, match=re.escape("expected a toolroute.asyncio engine")):
        ToolRouter("engine")

    async def main() -> None:
        async with asyncio_engine() as engine:
            with pytest.raises(TypeError, match="needs the asyncio engine"):
                ToolRouter(engine.engine)
            with pytest.raises(ConfigError, match="on_hidden_call must be one of"):
                ToolRouter(engine, on_hidden_call=True)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"route expected an agents\.Agent, got dict"):
                ToolRouter(engine).route({"name": "a"})  # type: ignore[arg-type]

    asyncio.run(main())


MCP_SERVER = '''
from mcp.server.mcpserver import MCPServer

app = MCPServer("weather")


@app.tool()
def forecast(city: str) -> str:
    """Weather forecast for a city."""
    return f"sunny in {city}"


@app.tool()
def send(to: str) -> str:
    """Send an email message to one recipient."""
    return "sent"


app.run()
'''


def test_a_real_mcp_servers_tools_are_filtered_and_a_hidden_one_refused(tmp_path: Any) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    from agents.mcp import MCPServerStdio

    script = tmp_path / "server.py"
    script.write_text(MCP_SERVER)
    model = steps(function_call("send", {"to": "ann"}, call_id="c1"))

    async def main() -> Any:
        params = {"command": sys.executable, "args": [str(script)]}
        async with MCPServerStdio(params=params, name="weather", cache_tools_list=True) as server:
            listed = await server.list_tools()
            async with asyncio_engine(
                list(Catalog.from_tools(listed, server="weather").tools)
            ) as engine:
                agent = Agent(name="assistant", model=model, mcp_servers=[server])
                return await ToolRouter(engine).run(agent, "weather forecast in Oslo")

    result = asyncio.run(main())
    assert seen(model)[0] == ["forecast"]  # the server's other tool was filtered out
    [answer] = outputs(result)["send"]
    assert "'send' is not available on this step, so it was not run" in answer
    assert result.final_output == "done"


def namespaced_searches(ran: list[str]) -> list[FunctionTool]:
    """``search`` twice, in the SDK namespaces ``crm`` and ``wiki``."""
    from agents import tool_namespace

    @function_tool(name_override="search")
    def search_contacts(query: str) -> str:
        """Search the CRM's customer contacts, accounts and deals by name or company."""
        ran.append("crm")
        return "crm hit"

    @function_tool(name_override="search")
    def search_pages(query: str) -> str:
        """Search the company wiki's pages and documents for articles."""
        ran.append("wiki")
        return "wiki hit"

    return [
        *tool_namespace(name="crm", description="Customers", tools=[search_contacts]),
        *tool_namespace(name="wiki", description="The wiki", tools=[search_pages]),
    ]


@pytest.mark.parametrize("mode", ["refuse", "activate"])
def test_one_name_in_two_sdk_namespaces_is_kept_apart(mode: str) -> None:
    # The catalogue reads each namespace as its tools' server (as a Responses ``namespace``),
    # and the router shows, refuses and activates each by namespace and name.
    ran: list[str] = []
    searches = namespaced_searches(ran)
    catalog = Catalog.from_tools(searches)
    assert [(t.id, t.server) for t in catalog] == [("crm__search", "crm"), ("wiki__search", "wiki")]
    model = steps(
        function_call("search", {"query": "acme"}, call_id="c1", namespace="wiki"),
        function_call("search", {"query": "acme"}, call_id="c2", namespace="wiki"),
    )

    async def main() -> Any:
        async with asyncio_engine(searches) as engine:
            agent = Agent(name="assistant", model=model, tools=searches)
            router = ToolRouter(engine, on_hidden_call=mode)
            return await router.run(agent, "find the customer contact for Acme in the CRM")

    result = asyncio.run(main())
    shown = [[(t._tool_namespace, t.name) for t in call.tools] for call in model.calls]
    assert shown[0] == [("crm", "search")]
    first, second = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    if mode == "refuse":
        assert ran == []
        assert "'wiki.search' is not available" in first
        assert "shown ('crm.search')" in first
        assert shown[1] == [("crm", "search")]
    else:
        assert "'wiki.search' was not available on this step" in first
        assert ("wiki", "search") in shown[1]
        assert (ran, second) == (["wiki"], "wiki hit")
    assert result.final_output == "done"
