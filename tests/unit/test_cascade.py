"""Fast tier first: the full model reads a request only when the fast tier's ranking is unsure."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, Tool, ToolIndex
from toolroute._core.recall.cascade import FAST_TIER_FLOOR, fast_ranking_stands
from toolroute.testing import ScriptedEmbedder

CATALOG = Catalog(
    [
        Tool("weather", "weather", "weekly weather forecast for a city"),
        Tool("email", "email", "send an email to a customer"),
        Tool("calendar", "calendar", "book a meeting in the calendar"),
    ]
)
SURE = "zq xv"  # the fast tier maps it onto the weather tool's own vector
UNSURE = "plover quartz"  # shares no word with any tool: a low fused score


class FakeTier:
    """A fast tier answering ``SURE`` with the first tool's vector, anything else with the
    hashing vectors (far from every tool)."""

    def __init__(self, tool_vectors: np.ndarray, *, fail: bool = False) -> None:
        self.tool_vectors = tool_vectors
        self.fail = fail
        self.asked: list[str] = []
        self._other = ScriptedEmbedder(dim=tool_vectors.shape[1])

    @property
    def served_texts(self) -> int:
        return 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.asked.extend(texts)
        if self.fail:
            raise RuntimeError("fast tier broken")
        rows = self._other.embed(list(texts))
        for i, text in enumerate(texts):
            if text == SURE:
                rows[i] = self.tool_vectors[0]
        return rows

    def learn(self, texts: Sequence[str], vectors: np.ndarray) -> None: ...

    def learn_tools(self, texts: Sequence[str], vectors: np.ndarray) -> None: ...

    def refit(self, *, should_stop: Callable[[], bool] | None = None) -> None: ...

    def save(self) -> None: ...


class WithFastTier(ScriptedEmbedder):
    def __init__(self, *, tier_fails: bool = False, open_fails: bool = False) -> None:
        super().__init__(dim=64)
        self.tier: FakeTier | None = None
        self.tier_fails = tier_fails
        self.open_fails = open_fails

    def open_fast_tier(
        self,
        *,
        cache_dir: str | None,
        tool_texts: Sequence[str],
        tool_vectors: np.ndarray,
        should_stop: Callable[[], bool],
        fit_from: int = 0,
    ) -> FakeTier:
        if self.open_fails:
            raise RuntimeError("cannot fit")
        self.tier = FakeTier(np.asarray(tool_vectors), fail=self.tier_fails)
        return self.tier


def asked_full_model(embedder: ScriptedEmbedder, query: str) -> bool:
    return query in embedder.texts


def test_a_sure_fast_ranking_is_the_answer_without_the_full_model() -> None:
    embedder = WithFastTier()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None, cascade=True)
    selection = index.select(SURE)
    assert selection.tool_ids[0] == "weather"
    assert selection.outcome.value == "applied"
    assert not asked_full_model(embedder, SURE)
    assert embedder.tier is not None
    assert SURE in embedder.tier.asked


def test_an_unsure_fast_ranking_asks_the_full_model() -> None:
    embedder = WithFastTier()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None, cascade=True)
    index.select(UNSURE)
    assert asked_full_model(embedder, UNSURE)


def test_search_many_sends_only_the_unsure_requests_to_the_full_model() -> None:
    embedder = WithFastTier()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None, cascade=True)
    rankings = index.search_many([SURE, UNSURE, SURE], 3)
    assert [r.tool_ids[0] for r in rankings][0::2] == ["weather", "weather"]
    assert not asked_full_model(embedder, SURE)
    assert embedder.calls[-1] == 1  # one model call, for the one unsure request


def test_without_cascade_the_full_model_reads_every_request() -> None:
    embedder = WithFastTier()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None)
    index.select(SURE)
    assert embedder.tier is None
    assert asked_full_model(embedder, SURE)


def test_only_combined_recall_cascades() -> None:
    embedder = WithFastTier()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None, cascade=True)
    index.select(SURE, strategy="semantic")
    assert asked_full_model(embedder, SURE)


def test_a_failing_fast_tier_leaves_the_request_to_the_full_model() -> None:
    embedder = WithFastTier(tier_fails=True)
    index = ToolIndex(CATALOG, embedder=embedder, cache=None, cascade=True)
    selection = index.select(SURE)
    assert asked_full_model(embedder, SURE)
    assert selection.outcome.value == "applied"


def test_a_fast_tier_that_cannot_be_built_means_no_cascade_not_an_error() -> None:
    embedder = WithFastTier(open_fails=True)
    index = ToolIndex(CATALOG, embedder=embedder, cache=None, cascade=True)
    assert index.select(SURE).outcome.value == "applied"
    assert asked_full_model(embedder, SURE)


def test_an_embedder_without_a_fast_tier_ignores_the_cascade() -> None:
    embedder = ScriptedEmbedder(dim=64)
    index = ToolIndex(CATALOG, embedder=embedder, cache=None, cascade=True)
    index.select(SURE)
    assert asked_full_model(embedder, SURE)


def test_new_vectors_drop_the_fast_tier_fitted_to_the_old_ones() -> None:
    embedder = WithFastTier()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None, cascade=True)
    other = ScriptedEmbedder(dim=64)
    moved = index.with_vectors(other, index.vectors.matrix)  # type: ignore[union-attr]
    moved.select(SURE)
    assert asked_full_model(other, SURE)


@pytest.mark.parametrize(
    ("scores", "stands"),
    [
        ((), False),
        ((float("nan"),), False),
        ((float("inf"),), False),
        ((FAST_TIER_FLOOR,), True),
        ((FAST_TIER_FLOOR - 1e-6, 0.1), False),
        ((1.2, 0.3), True),
    ],
)
def test_which_fast_rankings_stand(scores: tuple[float, ...], stands: bool) -> None:
    assert fast_ranking_stands(scores) is stands


@given(st.floats(-2, 2), st.floats(-2, 2), st.floats(-2, 2))
def test_a_higher_floor_never_lets_more_rankings_stand(top: float, low: float, high: float) -> None:
    low, high = min(low, high), max(low, high)
    if fast_ranking_stands([top], high):
        assert fast_ranking_stands([top], low)
