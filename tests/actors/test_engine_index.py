"""``Engine.index`` ranks the vectors it is given: no call on it runs the model on the trio
thread, outside the query batcher and the embed deadline."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest
import trio

from toolroute import Catalog, ConfigError, Outcome, Strategy
from toolroute._core.config import EngineConfig
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "read_file", "description": "Read a file from disk"},
    ]
)


class ThreadRecordingEmbedder:
    """A hashing embedder that records, per call, whether it ran on the trio thread."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.identity, self.dim, self.max_batch = "recording", 64, 16
        self.on_trio_thread: list[bool] = []
        self.trio_thread: threading.Thread | None = None

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.on_trio_thread.append(threading.current_thread() is self.trio_thread)
        return self.inner.embed(texts)


async def test_the_engines_index_never_runs_the_model_on_the_trio_thread() -> None:
    embedder = ThreadRecordingEmbedder()
    embedder.trio_thread = threading.current_thread()
    async with open_engine(TOOLS, config=EngineConfig(cache=False), embedder=embedder) as engine:
        with trio.fail_after(60):
            await engine.ready()
        assert embedder.on_trio_thread  # warm-up embedded the tools, in a worker thread
        assert not any(embedder.on_trio_thread)
        embedder.on_trio_thread.clear()
        # The index holds no model: a request vector has to be given (``Engine.select``
        # embeds through the batcher, under the deadline).
        with pytest.raises(TypeError, match="query_vector"):
            engine.index.select("send an email")  # type: ignore[call-arg]
        assert not any(embedder.on_trio_thread)
        assert not hasattr(engine.index, "embedder")
        vector = HashingEmbedder(dim=64).embed(["send an email"])[0]
        selection = engine.index.select("send an email", vector)
        assert selection.tool_ids[0] == "send_email"
        assert selection.outcome is Outcome.APPLIED
        ranking = engine.index.rank("send an email", None, 2, reason="no vector at hand")
        assert (ranking.outcome, ranking.reason) == (Outcome.DEGRADED, "no vector at hand")
        assert (await engine.select("send an email")).tool_ids[0] == "send_email"
        assert embedder.on_trio_thread == [False]  # only engine.select embedded: in a worker


async def test_strategies_are_taken_as_names_or_members_and_unknown_ones_cost_no_model_call() -> (
    None
):
    embedder = ThreadRecordingEmbedder()
    async with open_engine(TOOLS, config=EngineConfig(cache=False), embedder=embedder) as engine:
        with trio.fail_after(60):
            await engine.ready()
        by_name = await engine.select("send an email", strategy="semantic")
        by_member = await engine.select("send an email", strategy=Strategy.SEMANTIC)
        assert by_name.strategy == by_member.strategy == "semantic"
        assert by_name.strategy is Strategy.SEMANTIC
        assert by_name.tool_ids == by_member.tool_ids
        calls = len(embedder.on_trio_thread)
        with pytest.raises(ConfigError, match="unknown strategy 'hybrid'; expected one of"):
            await engine.select("send an email", strategy="hybrid")
        assert len(embedder.on_trio_thread) == calls  # refused before the request was embedded
