"""The engine ranks a request with its misspelled words corrected, unless told not to."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from toolroute import Catalog, EngineConfig
from toolroute._runtime.engine import open_engine
from toolroute.testing import ScriptedEmbedder, inline_cpu

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "current weather and forecast for a city"},
        {"name": "get_stock_price", "description": "latest stock price of a ticker"},
    ]
)


@pytest.mark.parametrize("correct", [True, False])
async def test_the_model_reads_the_corrected_request(
    autojump_clock: trio.testing.MockClock, correct: bool
) -> None:
    model = ScriptedEmbedder(dim=8)
    config = EngineConfig.from_mapping({"cache": False, "correct_spelling": correct})
    async with open_engine(
        TOOLS, config=config, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        await engine.ready()
        selection = await engine.select("wether forcast for Oslo", max_tools=1)
    assert model.texts[-1] == (
        "weather forecast for Oslo" if correct else "wether forcast for Oslo"
    )
    assert selection.outcome.value == "applied"


async def test_what_is_learned_from_a_request_is_learned_from_it_corrected(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(dim=8)
    config = EngineConfig(cache=False)
    async with open_engine(
        TOOLS, config=config, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        await engine.ready()
        assert await engine.learn("the stok pirce of ACME", ["get_stock_price"]) is True
    assert "the stock price of ACME" in model.texts
    assert "the stok pirce of ACME" not in model.texts
