"""The combined score: cosine plus squared keyword coverage boosts."""

from __future__ import annotations

import math

import numpy as np

from toolroute._core.recall.fusion import COVERAGE_WEIGHT, NAME_WEIGHT, fuse
from toolroute._core.recall.keyword import KeywordIndex


def test_fuse_adds_squared_coverages_to_the_cosine() -> None:
    cosine = np.array([0.5, 0.2, -0.1], dtype=np.float32)
    coverage = np.array([0.0, 1.0, 0.5], dtype=np.float32)
    names = np.array([1.0, 0.0, 0.5], dtype=np.float32)
    fused = fuse(cosine, coverage, names)
    expected = [
        0.5 + NAME_WEIGHT,
        0.2 + COVERAGE_WEIGHT,
        -0.1 + COVERAGE_WEIGHT * 0.25 + NAME_WEIGHT * 0.25,
    ]
    np.testing.assert_allclose(fused, expected, rtol=1e-6)


def test_a_weak_partial_match_barely_moves_the_score() -> None:
    # One word of a ten-word request: coverage 0.1 lifts the score by only 0.004.
    fused = fuse(np.zeros(1, np.float32), np.array([0.1], np.float32), np.zeros(1, np.float32))
    assert fused[0] < 0.005


def test_tools_without_a_vector_count_as_cosine_zero() -> None:
    cosine = np.array([-np.inf, 0.3], dtype=np.float32)
    fused = fuse(cosine, np.array([1.0, 0.0], np.float32), np.zeros(2, np.float32))
    assert np.isfinite(fused).all()
    assert math.isclose(float(fused[0]), COVERAGE_WEIGHT, rel_tol=1e-6)


def test_name_coverage_is_the_idf_share_of_the_name_found_in_the_query() -> None:
    documents = [["word", "cloud", "chart", "render"], ["pdf", "convert"], ["cloud", "storage"]]
    names = [["word", "cloud", "chart"], ["pdf", "convert"], ["cloud", "storage"]]
    index = KeywordIndex(documents, names=names)
    n = 3

    def idf(df: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    scores = index.name_coverage(["make", "word", "cloud"])
    word, cloud, chart = idf(1), idf(2), idf(1)
    assert math.isclose(float(scores[0]), (word + cloud) / (word + cloud + chart), rel_tol=1e-5)
    assert scores[1] == 0.0
    assert math.isclose(float(scores[2]), cloud / (cloud + idf(1)), rel_tol=1e-5)


def test_name_coverage_without_names_is_zero() -> None:
    index = KeywordIndex([["a", "b"]])
    assert index.name_coverage(["a"]).tolist() == [0.0]
