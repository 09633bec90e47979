"""A threshold is on the strategy's scale, so it is not applied once recall degrades to
keyword-only: thresholds ABOVE some BM25 scores, so applying it would drop tools."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from toolroute import Catalog, Outcome, Ranking, ToolIndex
from toolroute._core.select.policy import Policy, select

CATALOG = Catalog.from_plain(
    [
        {"name": "send_email", "description": "Send an email message to a recipient"},
        {"name": "read_email", "description": "Read an email message from the inbox"},
        {"name": "read_file", "description": "Read the contents of a file from disk"},
        {"name": "get_weather", "description": "Current weather forecast for a city"},
    ]
)
QUERY = "send an email message"


class FailingEmbedder:
    identity, dim, max_batch = "failing:1", 8, 8

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise RuntimeError("model offline")


def keyword_scores() -> dict[str, float]:
    ranking = ToolIndex(CATALOG, embedder=None, cache=None).search(QUERY, 10)
    assert ranking.outcome is Outcome.APPLIED
    return {i: s for i, s in zip(ranking.tool_ids, ranking.scores, strict=True) if s > 0}


def a_threshold_between_the_scores() -> tuple[float, set[str]]:
    """A threshold above some positive BM25 scores and below the best: what it would drop."""
    scores = keyword_scores()
    assert len(scores) >= 2
    high, low = max(scores.values()), min(scores.values())
    assert high > low
    threshold = (high + low) / 2
    return threshold, {i for i, s in scores.items() if s < threshold}


def test_the_threshold_bites_on_an_applied_keyword_ranking() -> None:
    threshold, below = a_threshold_between_the_scores()
    index = ToolIndex(CATALOG, embedder=None, cache=None)
    selection = index.select(QUERY, threshold=threshold, adaptive=False, max_tools=10)
    assert selection.outcome is Outcome.APPLIED
    assert below
    assert not below & set(selection.tool_ids)


def test_a_degraded_ranking_keeps_tools_scoring_below_the_threshold() -> None:
    threshold, below = a_threshold_between_the_scores()
    index = ToolIndex(CATALOG, embedder=FailingEmbedder(), cache=None)
    selection = index.select(QUERY, threshold=threshold, adaptive=False, max_tools=10)
    assert selection.outcome is Outcome.DEGRADED
    assert selection.strategy == "keyword"
    assert below <= set(selection.tool_ids)


def test_policy_select_applies_the_threshold_only_to_applied_rankings() -> None:
    ids, scores = ("a", "b", "c"), (3.0, 2.0, 1.0)
    policy = Policy(max_tools=3, threshold=2.5, adaptive=False)
    for outcome, shown in ((Outcome.APPLIED, ("a",)), (Outcome.DEGRADED, ids)):
        ranking = Ranking(tool_ids=ids, scores=scores, strategy="keyword", outcome=outcome)
        assert select(ranking, policy, time.perf_counter()).tool_ids == shown
