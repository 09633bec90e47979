"""Recall that fell back to keywords because the model failed never shows fewer tools for it:
a request sharing no word with the catalogue (another language, a paraphrase) still gets
tools, in catalogue order after any keyword match, instead of an empty list."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from toolroute import Catalog, EngineConfig, Outcome, ToolIndex, open_engine

CATALOG = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
        {"name": "read_file", "description": "Read the contents of a file"},
    ]
)
NO_SHARED_WORD = "明天北京会下雨吗"  # "will it rain in Beijing tomorrow"


class FailingEmbedder:
    identity, dim, max_batch = "failing:1", 8, 8

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise RuntimeError("model offline")


def test_a_degraded_ranking_with_no_keyword_match_still_shows_tools() -> None:
    index = ToolIndex(CATALOG, embedder=FailingEmbedder(), cache=None)
    selection = index.select(NO_SHARED_WORD, max_tools=2)
    assert selection.outcome is Outcome.DEGRADED
    assert "model offline" in selection.reason
    assert selection.tool_ids == ("get_weather", "send_email")  # catalogue order


def test_a_degraded_ranking_puts_keyword_matches_first() -> None:
    index = ToolIndex(CATALOG, embedder=FailingEmbedder(), cache=None)
    selection = index.select("read the file", max_tools=3)
    assert selection.tool_ids == ("read_file", "get_weather", "send_email")
    assert selection.scores[0] > 0
    assert selection.scores[1:] == (0.0, 0.0)
    assert index.select("read the file", max_tools=1).tool_ids == ("read_file",)


def test_a_keyword_only_index_still_returns_only_what_matched() -> None:
    # keyword recall chosen, not fallen back to: judged normally, nothing shares a word
    index = ToolIndex(CATALOG, embedder=None, cache=None)
    selection = index.select(NO_SHARED_WORD)
    assert (selection.tool_ids, selection.outcome) == ((), Outcome.APPLIED)


@pytest.mark.trio
async def test_an_engine_whose_model_fails_still_shows_tools(tmp_path: object) -> None:
    config = EngineConfig(cache_dir=str(tmp_path))
    async with open_engine(CATALOG, embedder=FailingEmbedder(), config=config) as engine:
        selection = await engine.select(NO_SHARED_WORD)
        step = await engine.prepare_step([{"role": "user", "content": NO_SHARED_WORD}])
    assert selection.outcome is Outcome.DEGRADED
    assert len(selection.tool_ids) == 3
    assert step.tool_ids is None or len(step.tool_ids) == 3
