"""A large catalogue through the engine: warm-up and updates build the int8 index off the
event loop, and selections equal fp32's."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

import toolroute._core.recall.index as recall_index
from toolroute import Catalog, ToolIndex
from toolroute._core.config import EngineConfig
from toolroute._core.recall.vectors import INT8_FROM
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder

WORDS = ["email", "weather", "file", "issue", "flight", "calendar", "invoice", "search"]
TOOLS = Catalog.from_plain(
    [
        {
            "name": f"tool_{i}",
            "description": f"{WORDS[i % 8]} {WORDS[(i // 8) % 8]} {WORDS[(i // 64) % 8]} {i}",
        }
        for i in range(INT8_FROM + 10)
    ]
)
QUERIES = ["send an email about the weather", "book a flight", "search invoice files 77"]


async def test_large_catalogue_serves_int8_scores_equal_to_fp32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fp32 = ToolIndex(TOOLS, embedder=HashingEmbedder(dim=64), cache=None, int8_product=None)
    config = EngineConfig(cache=False)
    built_in_main_thread: list[bool] = []
    build = recall_index.int8_index

    def recorded(*args: Any) -> Any:
        built_in_main_thread.append(threading.current_thread() is threading.main_thread())
        return build(*args)

    monkeypatch.setattr(recall_index, "int8_index", recorded)
    async with open_engine(TOOLS, config=config, embedder=HashingEmbedder(dim=64)) as engine:
        with trio.fail_after(120):
            await engine.ready()
        assert engine.index.int8 is not None
        for query in QUERIES:
            assert (await engine.select(query)).tool_ids == fp32.select(query).tool_ids
        await engine.update(remove=["tool_0"])  # the updated snapshot scores from int8 too
        assert engine.index.int8 is not None
        assert "tool_0" not in (await engine.select("email weather email 0")).tool_ids
    # Quantising and loading the int8 kernel ran in worker threads, at warm-up and update.
    assert built_in_main_thread == [False, False]
