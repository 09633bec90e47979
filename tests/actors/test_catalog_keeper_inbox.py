"""The catalogue keeper as an actor: updates through its inbox, warm-up reporting back.

The keeper is the one writer of the snapshot; a warm-up result (vectors or a failure) is
installed only over the index it started from, so an update made meanwhile keeps its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio
import trio.testing

from toolroute import Catalog, ConfigError, Outcome, Tool
from toolroute._core.config import EngineConfig
from toolroute._core.recall.index import RecallIndex
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "read_file", "description": "Read a file from disk"},
    ]
)
CONFIG = EngineConfig(cache=False)
MUSIC = Tool("play_music", "play_music", "Play a song or a playlist")


class CountingEmbedder:
    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.identity, self.dim, self.max_batch = "counting", 64, 16
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        return self.inner.embed(texts)


def warm_up_fails_after(seconds: float) -> Callable[..., Any]:
    """Inline CPU work; the warm-up's embedding takes ``seconds`` of trio time and then fails
    (every other call, an update's included, succeeds at once)."""

    async def run_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        if len(args) == 5 and isinstance(args[1], RecallIndex):  # the warm-up's whole-index call
            await trio.sleep(seconds)
            raise RuntimeError("model crashed during warm-up")
        return fn(*args)

    return run_cpu


async def test_warm_up_failure_keeps_the_vectors_of_an_update_made_meanwhile(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = CountingEmbedder()
    async with open_engine(
        TOOLS, config=CONFIG, embedder=embedder, run_cpu=warm_up_fails_after(5.0)
    ) as engine:
        await trio.sleep(1)
        await engine.update(add=[MUSIC])  # embeds the whole new catalogue itself
        assert engine.index.vectors is not None
        await engine.ready()  # warm-up fails at t=5, on the catalogue it started from
        assert engine.index.vectors is not None, "the failed warm-up dropped the update's vectors"
        assert len(engine.index.vectors) == len(TOOLS) + 1
        selection = await engine.select("play a song")
        assert selection.outcome is Outcome.APPLIED
        assert selection.tool_ids[0] == "play_music"


async def test_warm_up_failure_without_an_update_serves_keyword_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(
        TOOLS, config=CONFIG, embedder=CountingEmbedder(), run_cpu=warm_up_fails_after(5.0)
    ) as engine:
        await engine.ready()
        assert engine.index.vectors is None
        assert "model crashed" in (engine.index.degraded_reason or "")
        assert (await engine.select("read a file")).outcome is Outcome.DEGRADED


async def test_updates_apply_one_at_a_time_in_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = CountingEmbedder()
    added = [Tool(f"tool_{i}", f"tool_{i}", f"Tool number {i}") for i in range(6)]
    async with open_engine(TOOLS, config=CONFIG, embedder=embedder, run_cpu=_inline) as engine:
        await engine.ready()
        async with trio.open_nursery() as nursery:
            for tool in added:
                nursery.start_soon(lambda t=tool: engine.update(add=[t]))
                await trio.sleep(0.01)
        assert engine.catalog.ids[len(TOOLS) :] == tuple(t.id for t in added)
        assert engine.index.vectors is not None
        assert len(engine.index.vectors) == len(TOOLS) + len(added)


async def test_a_caller_mistake_in_an_update_reaches_the_caller_and_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(ConfigError, match="nope"):
            await engine.update(remove=["nope"])
        assert engine.catalog is TOOLS
        await engine.update(add=[MUSIC])  # the keeper still serves
        assert "play_music" in engine.catalog


async def test_a_cancelled_update_leaves_the_old_snapshot_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        await trio.sleep(2)
        return fn(*args)

    async with open_engine(TOOLS, config=CONFIG, embedder=CountingEmbedder(), run_cpu=slow) as e:
        await e.ready()
        before = e.index
        with trio.move_on_after(1) as scope:
            await e.update(add=[MUSIC])
        assert scope.cancelled_caught
        await trio.sleep(10)  # nothing of the abandoned update lands later
        assert e.index is before
        assert "play_music" not in e.catalog


async def _inline(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
    return fn(*args)


async def test_an_update_in_flight_when_the_keeper_crashes_raises_and_the_keeper_restarts(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolroute._runtime.catalog_keeper import CatalogKeeper

    finish = CatalogKeeper._finish
    crashed: list[bool] = []

    def crash_once(self: CatalogKeeper, built: Any) -> None:
        if not crashed:
            crashed.append(True)
            raise RuntimeError("a bug in the keeper")
        finish(self, built)

    monkeypatch.setattr(CatalogKeeper, "_finish", crash_once)
    with trio.fail_after(60):  # in trio time: an update left hanging fails here
        async with open_engine(TOOLS, config=CONFIG, embedder=None, run_cpu=_inline) as engine:
            with pytest.raises(trio.BrokenResourceError, match="not applied"):
                await engine.update(add=[MUSIC])
            await trio.sleep(5)  # past the supervisor's backoff
            await engine.update(add=[MUSIC])
            assert "play_music" in engine.catalog
