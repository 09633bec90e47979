"""What each framework adapter costs per model call, and how many tools the model is sent.

    python tests/bench/bench_adapters.py [--runs 20] [--rounds 5]

The 50 tools of the demo catalogue become each framework's own tool objects; an agent with a
stand-in model (each framework's test double, answering at once) runs one request per run,
without toolroute and with its adapter, the two alternating in every round in one process
and on one engine (bundled embedder, warm). Printed per framework: the median time of one
model call without and with the adapter, the difference, and the tools the model was sent
(every tool without toolroute; the engine's pick with it). Needs the framework extras
(``pip install -e '.[langchain,pydantic-ai,openai-agents]'``); a missing one is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

import toolroute.asyncio
from toolroute import Catalog
from toolroute.asyncio import AsyncioEngine

REQUESTS = [
    "open an issue about the login crash",
    "post in the #eng channel that the build is green",
    "what is on my calendar tomorrow",
    "read the file notes.txt",
    "send an email to Ann about the launch",
]

#: One run: the request, then how many tools the model was sent.
Run = Callable[[str], Awaitable[int]]


def pydantic_ai_runs(catalog: Catalog, engine: AsyncioEngine) -> tuple[Run, Run]:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from toolroute.integrations.pydantic_ai import RouteTools

    tools = [
        Tool.from_schema(
            lambda **_: "ok", name=t.name, description=t.description, json_schema=t.parameters
        )
        for t in catalog.tools
    ]
    sent: list[int] = []

    def model(messages: Any, info: Any) -> ModelResponse:
        sent.append(len(info.function_tools))
        return ModelResponse(parts=[TextPart("done")])

    plain = Agent(FunctionModel(model), tools=tools)
    routed = Agent(FunctionModel(model), tools=tools, capabilities=[RouteTools(engine)])

    def runner(agent: Any) -> Run:
        async def run(request: str) -> int:
            await agent.run(request)
            return sent[-1]

        return run

    return runner(plain), runner(routed)


def openai_agents_runs(catalog: Catalog, engine: AsyncioEngine) -> tuple[Run, Run]:
    from agents import Agent, FunctionTool, Runner, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    from toolroute.integrations.openai_agents import ToolRouter

    set_tracing_disabled(True)

    async def invoke(context: Any, arguments: str) -> str:
        return "ok"

    tools = [
        FunctionTool(
            name=t.name,
            description=t.description,
            params_json_schema=t.parameters,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )
        for t in catalog.tools
    ]
    router = ToolRouter(engine)

    def runner(routed: bool) -> Run:
        async def run(request: str) -> int:
            model = ScriptedModel([ModelStep(output=[assistant_message("done")])])
            agent = Agent(name="assistant", model=model, tools=tools)
            if routed:
                await router.run(agent, request)
            else:
                await Runner.run(agent, request)
            return len(model.calls[-1].tools)

        return run

    return runner(False), runner(True)


def langchain_runs(catalog: Catalog, engine: AsyncioEngine) -> tuple[Run, Run]:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import StructuredTool

    from toolroute.integrations.langchain import ToolRouteMiddleware

    sent: list[int] = []

    class Model(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            sent.append(len(tools))
            return self

    tools = [
        StructuredTool.from_function(
            func=lambda **_: "ok", name=t.name, description=t.description, args_schema=t.parameters
        )
        for t in catalog.tools
    ]

    def runner(middleware: list[Any]) -> Run:
        async def run(request: str) -> int:
            model = Model(responses=[AIMessage("done")])
            agent = create_agent(model, tools=tools, middleware=middleware)
            await agent.ainvoke({"messages": [HumanMessage(request)]})
            return sent[-1]

        return run

    return runner([]), runner([ToolRouteMiddleware(engine)])


FRAMEWORKS: dict[str, tuple[str, Callable[[Catalog, AsyncioEngine], tuple[Run, Run]]]] = {
    "Pydantic AI": ("pydantic_ai", pydantic_ai_runs),
    "OpenAI Agents SDK": ("agents", openai_agents_runs),
    "LangChain": ("langchain.agents", langchain_runs),
}


async def timed(run: Run, runs: int) -> tuple[float, int]:
    """Median seconds of one run over ``runs`` runs, and the tools sent on the last."""
    times, sent = [], 0
    for index in range(runs):
        started = time.perf_counter()
        sent = await run(REQUESTS[index % len(REQUESTS)])
        times.append(time.perf_counter() - started)
    return statistics.median(times), sent


async def main(runs: int, rounds: int) -> None:
    # The model sees the tools by id: the demo has a name on two servers (``search``).
    catalog = Catalog([attrs.evolve(t, name=t.id) for t in Catalog.demo().tools])
    async with toolroute.asyncio.open_engine(catalog) as engine:
        await engine.ready()
        print(f"{len(catalog.tools)} tools; {runs} runs per round, {rounds} rounds, medians")
        print(
            f"{'framework':<20}{'plain ms':>10}{'adapter ms':>12}{'added ms':>10}{'tools sent':>14}"
        )
        for label, (module, build) in FRAMEWORKS.items():
            if importlib.util.find_spec(module.split(".")[0]) is None:
                print(f"{label:<20} skipped: {module} is not installed")
                continue
            plain, routed = build(catalog, engine)
            await plain(REQUESTS[0])  # first runs pay imports and caches, not the adapter
            await routed(REQUESTS[0])
            plain_ms, routed_ms, sent = [], [], (0, 0)
            for _ in range(rounds):
                plain_s, plain_sent = await timed(plain, runs)
                routed_s, routed_sent = await timed(routed, runs)
                plain_ms.append(plain_s * 1000)
                routed_ms.append(routed_s * 1000)
                sent = (plain_sent, routed_sent)
            before, after = statistics.median(plain_ms), statistics.median(routed_ms)
            print(
                f"{label:<20}{before:>10.2f}{after:>12.2f}{after - before:>10.2f}"
                f"{f'{sent[0]} -> {sent[1]}':>14}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.runs, arguments.rounds))
