"""The asyncio surface's edge: an engine used after its block, and a trio engine opened under
asyncio, each say what happened and what to do instead."""

from __future__ import annotations

import asyncio
import math

import pytest

import toolroute
import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, ConfigError, EngineConfig

TOOLS = Catalog.from_plain([{"name": "get_weather", "description": "Weather forecast"}])
CONFIG = EngineConfig(cache=False)


def test_an_asyncio_engine_used_after_its_block_says_it_is_closed() -> None:
    async def main() -> None:
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            await engine.select("weather")
        with pytest.raises(
            RuntimeError, match=r"Engine\.select was called after the engine closed"
        ):
            await engine.select("weather")
        with pytest.raises(RuntimeError, match=r"Engine\.prepare_step was called after"):
            await engine.prepare_step("weather")

    asyncio.run(main())


def test_after_its_block_while_another_engine_keeps_the_loop_guest_running() -> None:
    async def main() -> None:
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as other:
            async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as gone:
                pass
            with pytest.raises(RuntimeError, match=r"Engine\.select was called after"):
                await gone.select("weather")
            assert (await other.select("weather")).tool_ids == ("get_weather",)

    asyncio.run(main())


def test_wrong_arguments_are_config_errors_from_asyncio_too() -> None:
    async def main() -> None:
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            with pytest.raises(ConfigError, match=r"threshold must be a finite number"):
                await engine.select("weather", threshold=math.nan)
            with pytest.raises(ConfigError, match=r"query must be a string"):
                await engine.select(123)  # type: ignore[arg-type]

    asyncio.run(main())


def test_the_trio_engine_under_asyncio_points_to_toolroute_asyncio() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"use toolroute\.asyncio\.open_engine"):
            async with toolroute.open_engine(TOOLS, config=CONFIG, embedder=None):
                pass  # pragma: no cover

    asyncio.run(main())


def test_trio_stateless_entry_points_under_asyncio_point_to_toolroute_asyncio() -> None:
    servers = [toolroute.Server("weather", "Forecasts"), toolroute.Server("mail", "Email")]

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"use toolroute\.asyncio\.route_servers"):
            await toolroute.route_servers("weather", servers)

    asyncio.run(main())


def test_an_engine_called_from_another_loop_says_how_to_reach_its_own() -> None:
    # A sync host (a worker thread, a framework's run_sync) starts a loop of its own: the
    # engine lives on the loop it was opened on, and nothing is run for the other one.
    async def main() -> None:
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            loop = asyncio.get_running_loop()

            def sync_host() -> tuple[str, ...]:
                with pytest.raises(RuntimeError, match=r"runs on the event loop it was opened on"):
                    asyncio.run(engine.select("weather"))

                async def subscribe() -> None:
                    async with engine.subscribe():
                        pass  # pragma: no cover

                with pytest.raises(RuntimeError, match=r"run_coroutine_threadsafe"):
                    asyncio.run(subscribe())
                answer = asyncio.run_coroutine_threadsafe(engine.select("weather"), loop)
                return answer.result(timeout=60).tool_ids

            assert await asyncio.to_thread(sync_host) == ("get_weather",)

    asyncio.run(main())
