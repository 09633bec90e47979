"""The int8 index's certification, guarded by construction: near-tied rows built so that the
int8 candidates alone are wrong, and each term of the error bound is what saves the answer.

``Int8Index.ranked`` re-scores its best int8 candidates and then proves, with a bound on the
int8 error (``max_norm |q - q'| + max_residual |q'|``, see ``Int8Index._rough``), that no other
row can reach the k-th exact score. Random catalogues rarely need the bound, so these tests
build the rows that do: every rough score ties, ties go to the lowest rows, and those rows
are exactly the worst. Each example below is such a case (asserted), so breaking the bound,
or dropping either of its terms, fails every example, not a lucky one. Hypothesis varies the
shapes; it keeps no database between runs and derandomises, so a run is a run.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute._core.recall.quantize import QUERY_PEAK, numpy_int8_product, quantize_query
from toolroute._core.recall.vectors import (
    RESCORE_FACTOR,
    RESCORE_MIN,
    Int8Index,
    VectorIndex,
    top_k,
)

constructed = settings(max_examples=60, deadline=None, database=None, derandomize=True)


def _wanted(k: int) -> int:
    return max(RESCORE_FACTOR * k, RESCORE_MIN)


def _rough_pool(index: Int8Index, query: np.ndarray, k: int) -> set[int]:
    """The rows the int8 scores alone would re-score (what ``ranked`` starts from)."""
    quantized, scale = quantize_query(query)
    rough = index.scales * numpy_int8_product(index.rows)(quantized).astype(np.float32) * scale
    return set(top_k(rough.astype(np.float32), _wanted(k)).tolist())


def _assert_certified_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> None:
    exact = VectorIndex(matrix)
    reference = exact.scores(query)
    expected = top_k(reference, k).tolist()
    index = Int8Index(exact)
    # The case is hard: the int8 candidates miss every one of fp32's top k.
    assert not set(expected) & _rough_pool(index, query, k)
    picked, scores = index.ranked(query, k)
    assert picked.tolist() == expected
    np.testing.assert_array_equal(scores, reference[expected])
    # With a bonus term too (``fuse``'s path): a constant leaves the order as it is.
    bonus = [np.full(len(matrix), 0.25, np.float32)]
    picked, scores = index.ranked(query, k, bonus)
    assert picked.tolist() == expected
    np.testing.assert_array_equal(scores, reference[expected] + np.float32(0.25))


# -- the rows' rounding: the query is exact in int8, the rows are not --------------------------


@constructed
@given(
    k=st.integers(1, 8),
    extra=st.integers(0, 40),
    peak=st.floats(0.5, 1.0),
    level=st.integers(10, 100),
    spare=st.integers(1, 60),
)
def test_rows_rounded_down_in_int8_still_reach_the_top_k(
    k: int, extra: int, peak: float, level: int, spare: int
) -> None:
    # Row i is (s * (level + f_i), peak, 0, ...), s = peak / 127: its first value rounds to
    # ``level`` whatever f_i in [0.15, 0.45], so every rough score ties at s * level, and
    # f_i grows with i, so the rows ties favour (the lowest) are the worst exactly. The
    # query (1, 0, ...) is exact in int8: only the rows' residuals (up to 0.45 s) separate
    # rough from exact, and only the bound's row term covers them.
    n = _wanted(k) + k + spare
    scale = peak / 127.0
    fractions = np.linspace(0.15, 0.45, n)
    matrix = np.zeros((n, 2 + extra), np.float32)
    matrix[:, 0] = scale * (level + fractions)
    matrix[:, 1] = peak
    query = np.zeros(2 + extra, np.float32)
    query[0] = 1.0
    assert quantize_query(query)[1] * QUERY_PEAK == pytest.approx(1.0)  # exact in int8
    _assert_certified_top_k(matrix, query, k)


# -- the query's rounding: the rows are exact in int8, the query is not ------------------------


@constructed
@given(
    k=st.integers(1, 8),
    extra=st.integers(0, 40),
    shift=st.floats(0.2, 0.45),
    spare=st.integers(1, 20),
)
def test_a_query_rounded_in_int8_still_finds_the_top_k(
    k: int, extra: int, shift: float, spare: int
) -> None:
    # Rows (127, a_i, b_i, 0, ...) / 127 are exact in int8, a_i + b_i = 130 for all, a_i
    # growing with i. The query is (63, 20 + shift, 20, 0, ...) * t: its second value rounds
    # down by ``shift`` steps, the others are exact. Rough scores depend on a_i + b_i only
    # (all tie); exact ones add ``shift * t * a_i / 127``, so the lowest rows are the worst,
    # and only the bound's query term covers the difference.
    n = _wanted(k) + k + spare
    assert n <= 111  # a_i from 10 to 120
    first = np.arange(10, 10 + n)
    matrix = np.zeros((n, 3 + extra), np.float32)
    matrix[:, 0] = 1.0
    matrix[:, 1] = first / 127.0
    matrix[:, 2] = (130 - first) / 127.0
    query = np.zeros(3 + extra, np.float32)
    query[:3] = [QUERY_PEAK, 20 + shift, 20]
    query /= np.linalg.norm(query)
    _assert_certified_top_k(matrix, query, k)


# -- the same rows through the default candidate pool and a tiny one ---------------------------


@pytest.mark.parametrize(("factor", "minimum"), [(RESCORE_FACTOR, RESCORE_MIN), (1, 1)])
def test_near_ties_are_certified_with_any_candidate_pool(factor: int, minimum: int) -> None:
    n, k, scale = 300, 5, 0.8 / 127.0
    matrix = np.zeros((n, 8), np.float32)
    matrix[:, 0] = scale * (40 + np.linspace(0.15, 0.45, n))
    matrix[:, 1] = 0.8
    query = np.zeros(8, np.float32)
    query[0] = 1.0
    exact = VectorIndex(matrix)
    index = Int8Index(exact)
    index.rescore_factor, index.rescore_min = factor, minimum
    picked, _ = index.ranked(query, k)
    assert picked.tolist() == top_k(exact.scores(query), k).tolist() == list(range(n - 1, n - k - 1, -1))
