"""``toolroute.asyncio``'s subscriptions begin with the engine's state, as trio's do."""

from __future__ import annotations

import asyncio

import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, EngineConfig
from toolroute.events import SelectionFinished, SubscriptionStarted

TOOLS = Catalog.from_mcp_servers(
    {
        "files": {"tools": [{"name": "read_file", "description": "Read a text file"}]},
        "weather": {"tools": [{"name": "forecast", "description": "Weather forecast"}]},
    }
)


def test_an_asyncio_subscription_first_delivers_the_snapshot() -> None:
    async def main() -> tuple[object, object]:
        config = EngineConfig(cache=False)
        async with (
            toolroute_asyncio.open_engine(TOOLS, config=config, embedder=None) as engine,
            engine.subscribe(buffer=4) as deliveries,
        ):
            await engine.select("weather in Oslo")
            iterator = aiter(deliveries)
            return (await anext(iterator)).event, (await anext(iterator)).event

    first, second = asyncio.run(main())
    assert isinstance(first, SubscriptionStarted)
    assert (first.warmup, first.catalog_version, first.tools) == ("none", 0, 2)
    assert isinstance(second, SelectionFinished)


def test_an_asyncio_subscription_can_opt_out_of_the_snapshot() -> None:
    async def main() -> object:
        config = EngineConfig(cache=False)
        async with (
            toolroute_asyncio.open_engine(TOOLS, config=config, embedder=None) as engine,
            engine.subscribe(buffer=4, snapshot=False) as deliveries,
        ):
            await engine.select("weather in Oslo")
            return (await anext(aiter(deliveries))).event

    assert isinstance(asyncio.run(main()), SelectionFinished)
