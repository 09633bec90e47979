"""A caller's mistake reaches the asyncio caller as the same clear error as in trio."""

from __future__ import annotations

import asyncio

import pytest

import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, ConfigError, EngineConfig

TOOLS = Catalog.from_plain([{"name": "get_weather", "description": "Weather for a city"}])


@pytest.mark.parametrize("buffer", [0, -3, False])
def test_subscribe_from_asyncio_refuses_a_buffer_below_one(buffer: int) -> None:
    async def main() -> None:
        async with toolroute_asyncio.open_engine(
            TOOLS, config=EngineConfig(cache=False), embedder=None
        ) as engine:
            with pytest.raises(ConfigError, match="buffer must be an integer of at least 1"):
                async with engine.subscribe(buffer=buffer):
                    pass  # pragma: no cover - never entered
            assert (await engine.select("weather")).tool_ids == ("get_weather",)

    asyncio.run(main())
    assert not toolroute_asyncio._hosts


def test_open_engine_from_asyncio_refuses_a_decider_that_is_not_one() -> None:
    async def main() -> None:
        with pytest.raises(ConfigError, match=r"decider must be a Decider .* got str 'local'"):
            async with toolroute_asyncio.open_engine(
                TOOLS, config=EngineConfig(cache=False), embedder=None, decider="local"
            ):
                pass  # pragma: no cover - never entered

    asyncio.run(main())
    assert not toolroute_asyncio._hosts
