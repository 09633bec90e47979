"""Engine.replace_catalog: a whole new catalogue in, only the difference applied."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio
from event_snapshot import skip_snapshot
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, Tool
from toolroute._core.config import EngineConfig, WarmupConfig
from toolroute._runtime.catalog_changes import catalog_difference, updated_catalog
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder

TOOLS = Catalog(
    [
        Tool("get_weather", "get_weather", "Weather forecast for a city"),
        Tool("send_email", "send_email", "Send an email message to a person"),
        Tool("read_file", "read_file", "Read a file from disk"),
        Tool("book_flight", "book_flight", "Book a flight ticket"),
    ]
)
CONFIG = EngineConfig(cache=False, warmup=WarmupConfig(wait=True))


class CountingEmbedder:
    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.identity, self.dim, self.max_batch = "counting", 64, 16
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


async def inline_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
    async with limiter:
        await trio.lowlevel.checkpoint()
        return fn(*args)


async def test_replace_catalog_embeds_only_changed_tools_and_reports_the_difference(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = CountingEmbedder()
    new = Catalog(
        [
            Tool("play_music", "play_music", "Play a song or playlist"),
            TOOLS["get_weather"],
            Tool("read_file", "read_file", "Read a text file and return its lines"),
            TOOLS["send_email"],
        ]
    )
    async with open_engine(TOOLS, config=CONFIG, embedder=embedder, run_cpu=inline_cpu) as engine:
        embedder.texts.clear()
        async with engine.subscribe(buffer=8) as events:
            skip_snapshot(events)
            await engine.replace_catalog(new)
            delivery = await events.__anext__()
        assert len(embedder.texts) == 2  # the new tool and the changed description
        assert engine.catalog == new  # the order given is the order served
        event = delivery.event
        assert event.type == "catalog.updated"
        assert (event.added, event.removed, event.replaced) == (
            ("play_music",),
            ("book_flight",),
            ("read_file",),
        )
        assert event.version == 1
        selection = await engine.select("play a song")
        assert selection.tool_ids[0] == "play_music"


async def test_replacing_with_an_equal_catalogue_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = CountingEmbedder()
    async with open_engine(TOOLS, config=CONFIG, embedder=embedder, run_cpu=inline_cpu) as engine:
        embedder.texts.clear()
        served = engine.index
        async with engine.subscribe(buffer=8) as events:
            skip_snapshot(events)
            await engine.replace_catalog(Catalog(list(TOOLS)))
            with trio.move_on_after(5) as idle:
                await events.__anext__()
        assert idle.cancelled_caught  # no catalog.updated for a change of nothing
        assert engine.index is served
        assert embedder.texts == []


async def test_replacements_apply_in_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first = Catalog([*TOOLS, Tool("play_music", "play_music", "Play a song")])
    second = Catalog([TOOLS["get_weather"]])
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(engine.replace_catalog, first)
            await trio.lowlevel.checkpoint()
            nursery.start_soon(engine.replace_catalog, second)
        assert engine.catalog == second


async def test_replace_catalog_refuses_what_is_not_a_catalogue() -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(TypeError, match=r"expects a toolroute\.Catalog, got list"):
            await engine.replace_catalog(list(TOOLS))  # type: ignore[arg-type]
        assert engine.catalog is TOOLS


NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f"])
DESCRIPTIONS = st.sampled_from(["one", "two", "three"])
CATALOGS = st.lists(st.tuples(NAMES, DESCRIPTIONS), unique_by=lambda pair: pair[0]).map(
    lambda pairs: Catalog(Tool(name, name, text) for name, text in pairs)
)


@given(old=CATALOGS, new=CATALOGS)
def test_the_difference_turns_the_old_catalogue_into_the_new_one(
    old: Catalog, new: Catalog
) -> None:
    added, removed, replaced = catalog_difference(old, new)
    rebuilt = updated_catalog(old, add=added, remove=removed, replace=replaced)
    assert set(rebuilt.tools) == set(new.tools)
    assert set(removed).isdisjoint(new.ids)
    assert all(old[tool.id] != tool for tool in replaced)


def test_the_asyncio_engine_replaces_its_catalogue_too() -> None:
    import asyncio

    import toolroute.asyncio as toolroute_asyncio

    new = Catalog([*TOOLS, Tool("play_music", "play_music", "Play a song or playlist")])

    async def main() -> tuple[Catalog, tuple[str, ...]]:
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            await engine.replace_catalog(new)
            selection = await engine.select("play a song", max_tools=1)
            return engine.catalog, selection.tool_ids

    catalog, picked = asyncio.run(main())
    assert catalog == new
    assert picked == ("play_music",)
