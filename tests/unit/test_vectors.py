"""top_k and VectorIndex (engine/_vectors.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from int8_kernels import saturating_runner

from toolroute._core.recall.fusion import fuse
from toolroute._core.recall.vectors import (
    QUERY_PEAK,
    QUERY_ZERO_POINT,
    RESCORE_MIN,
    Int8Index,
    VectorIndex,
    int8_index,
    numpy_int8_product,
    quantize_query,
    quantize_rows,
    top_k,
)
from toolroute.providers._embedders import int8_product as int8_product_module
from toolroute.providers._embedders.int8_product import onnx_int8_product


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def reference_top_k(scores: np.ndarray, k: int, floor: float = -math.inf) -> list[int]:
    """The obvious way: valid scores above floor, best first, ties by index."""
    valid = [i for i, s in enumerate(scores.tolist()) if not math.isnan(s) and s > floor]
    return sorted(valid, key=lambda i: (-float(scores[i]), i))[: max(k, 0)]


# -- top_k --------------------------------------------------------------------------------------


def test_top_k_returns_best_first() -> None:
    assert top_k(f32(0.1, 0.9, 0.5, 0.7), 3).tolist() == [1, 3, 2]


def test_top_k_breaks_ties_by_index() -> None:
    scores = f32(0.5, 0.9, 0.5, 0.9, 0.5)
    assert top_k(scores, 5).tolist() == [1, 3, 0, 2, 4]
    assert top_k(scores, 3).tolist() == [1, 3, 0]


def test_top_k_ties_at_the_cut_keep_the_lowest_indexes() -> None:
    scores = np.full(100, 0.25, dtype=np.float32)
    scores[[97, 98]] = 0.5
    assert top_k(scores, 4).tolist() == [97, 98, 0, 1]


def test_top_k_is_deterministic() -> None:
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=500).astype(np.float32)
    first = top_k(scores, 40)
    for _ in range(5):
        np.testing.assert_array_equal(top_k(scores.copy(), 40), first)
    assert first.tolist() == reference_top_k(scores, 40)


def test_top_k_never_returns_nan_or_negative_infinity() -> None:
    scores = f32(math.nan, -math.inf, 0.3, math.nan, -1.0, -math.inf)
    assert top_k(scores, 6).tolist() == [2, 4]


def test_top_k_all_invalid_returns_nothing() -> None:
    assert top_k(f32(math.nan, -math.inf), 2).tolist() == []


def test_top_k_larger_than_n_returns_all_valid() -> None:
    assert top_k(f32(0.2, 0.1, math.nan), 10).tolist() == [0, 1]


@pytest.mark.parametrize("k", [0, -1])
def test_top_k_zero_or_negative_k_returns_nothing(k: int) -> None:
    result = top_k(f32(0.2, 0.1), k)
    assert result.tolist() == []
    assert result.dtype == np.intp


def test_top_k_of_no_scores_is_empty() -> None:
    assert top_k(np.empty(0, dtype=np.float32), 3).tolist() == []


def test_top_k_floor_is_exclusive() -> None:
    assert top_k(f32(0.0, 0.5, -0.5, 0.0), 4, floor=0.0).tolist() == [1]


# -- VectorIndex --------------------------------------------------------------------------------


def test_vector_index_scores_are_dot_products() -> None:
    index = VectorIndex(np.array([[1, 0], [0.6, 0.8], [0, -1]], dtype=np.float32))
    assert index.scores(f32(1, 0)).tolist() == pytest.approx([1.0, 0.6, 0.0])
    assert len(index) == 3
    assert index.dim == 2


def test_zero_and_nan_rows_score_negative_infinity() -> None:
    matrix = np.array(
        [[1, 0], [0, 0], [math.nan, 1], [math.inf, 0], [0, -math.inf], [0, 1]], dtype=np.float32
    )
    index = VectorIndex(matrix)
    assert index.valid.tolist() == [True, False, False, False, False, True]
    scores = index.scores(f32(0.6, 0.8))
    assert scores[[0, 5]].tolist() == pytest.approx([0.6, 0.8])
    assert np.isneginf(scores[1:5]).all()
    many = index.scores_many(np.array([[1, 0], [0, 1]], dtype=np.float32))
    assert many.shape == (2, 6)
    assert np.isneginf(many[:, 1:5]).all()
    assert top_k(scores, 6).tolist() == [5, 0]


def test_vector_index_copies_and_freezes_its_matrix() -> None:
    matrix = np.array([[1, 0], [math.nan, 0]], dtype=np.float32)
    index = VectorIndex(matrix)
    assert math.isnan(matrix[1, 0])  # the caller's array is untouched
    matrix[0, 0] = 0.0
    assert index.matrix[0, 0] == 1.0
    assert not index.matrix.flags.writeable
    assert not index.valid.flags.writeable


def test_vector_index_with_no_rows_scores_nothing() -> None:
    index = VectorIndex(np.zeros((0, 4), dtype=np.float32))
    assert index.scores(f32(1, 0, 0, 0)).shape == (0,)
    assert top_k(index.scores(f32(1, 0, 0, 0)), 3).tolist() == []


def test_vector_index_rejects_non_matrices() -> None:
    with pytest.raises(ValueError, match="2-d matrix"):
        VectorIndex(np.zeros(4, dtype=np.float32))


# -- properties ---------------------------------------------------------------------------------

# Finite elements are bounded so a dot product never overflows float32.
elements = st.one_of(
    st.floats(-4, 4, width=32),
    st.sampled_from([0.0, math.nan, math.inf, -math.inf]),
)


@st.composite
def matrices_with_invalid_rows(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    rows = draw(st.integers(0, 12))
    dim = draw(st.integers(1, 6))
    matrix = draw(hnp.arrays(np.float32, (rows, dim), elements=elements))
    # Force whole zero and NaN rows in as well as scattered specials.
    for row in draw(st.lists(st.integers(0, max(rows - 1, 0)), max_size=3)) if rows else []:
        matrix[row] = draw(st.sampled_from([0.0, math.nan]))
    query = draw(hnp.arrays(np.float32, (dim,), elements=st.floats(-1, 1, width=32)))
    return matrix, query


@settings(max_examples=150, deadline=None)
@given(matrices_with_invalid_rows(), st.integers(-1, 15))
def test_top_k_over_vector_scores_matches_a_naive_sort(
    case: tuple[np.ndarray, np.ndarray], k: int
) -> None:
    matrix, query = case
    index = VectorIndex(matrix)
    scores = index.scores(query)
    result = top_k(scores, k).tolist()
    invalid = {i for i, row in enumerate(matrix) if not np.isfinite(row).all() or not row.any()}
    assert not invalid & set(result)
    assert all(scores[a] >= scores[b] for a, b in itertools.pairwise(result))
    assert result == reference_top_k(scores, k)
    assert len(result) == min(max(k, 0), len(matrix) - len(invalid))


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        st.integers(0, 40),
        elements=st.one_of(
            st.floats(width=32, allow_nan=True, allow_infinity=True),
            st.sampled_from([0.0, -0.0, 1.0, math.nan, -math.inf]),
        ),
    ),
    st.integers(-2, 50),
    st.sampled_from([-math.inf, 0.0, 0.5]),
)
def test_top_k_matches_a_naive_sort_with_ties_and_specials(
    scores: np.ndarray, k: int, floor: float
) -> None:
    result = top_k(scores, k, floor=floor).tolist()
    assert result == reference_top_k(scores, k, floor)
    assert not any(math.isnan(scores[i]) or scores[i] == -math.inf for i in result)


@given(
    st.integers(min_value=8192, max_value=20000),
    st.integers(min_value=1, max_value=60),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.sampled_from(["none", "nan", "neg_inf", "both"]),
)
@settings(max_examples=40, deadline=None)
def test_top_k_sampled_path_matches_naive_on_large_rows(
    n: int, k: int, seed: int, holes: str
) -> None:
    # Large rows take the sampled fast path; few distinct values force many ties.
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 40, n).astype(np.float32)
    if holes in ("nan", "both"):
        scores[rng.integers(0, n, 7)] = np.nan
    if holes in ("neg_inf", "both"):
        scores[rng.integers(0, n, 30)] = -np.inf
    valid = [i for i in range(n) if np.isfinite(scores[i])]
    expected = sorted(valid, key=lambda i: (-float(scores[i]), i))[:k]
    assert top_k(scores, k).tolist() == expected


# -- Int8Index: int8 rough scores, exact fp32 re-scoring ----------------------------------------

int8_matrices = hnp.arrays(
    np.float32,
    st.tuples(st.integers(1, 150), st.integers(1, 12)),
    elements=st.one_of(
        st.floats(-1, 1, width=32),
        st.sampled_from([0.0, float("nan"), float("inf")]),
    ),
)


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


@settings(max_examples=150, deadline=None)
@given(matrix=int8_matrices, data=st.data(), k=st.integers(0, 12))
def test_int8_index_returns_exact_scores_of_valid_rows_best_first(
    matrix: np.ndarray, data: st.DataObject, k: int
) -> None:
    exact = VectorIndex(matrix)
    query = data.draw(hnp.arrays(np.float32, matrix.shape[1], elements=st.floats(-1, 1, width=32)))
    query = _unit(query).astype(np.float32)
    picked, scores = Int8Index(exact).top_k(query, k)
    reference = exact.scores(query)
    assert len(picked) <= k
    assert all(exact.valid[picked])
    np.testing.assert_allclose(scores, reference[picked], rtol=1e-6, atol=1e-6)
    assert list(scores) == sorted(scores, reverse=True)
    if len(matrix) <= RESCORE_MIN:  # everything is re-scored: exactly fp32's top k
        assert list(picked) == list(top_k(reference, k))


# Extremes are drawn often on purpose: +-127 rows, and queries at both ends of the range.
extreme_int8 = st.one_of(st.sampled_from([-127, 127]), st.integers(-127, 127))
query_range = st.one_of(
    st.sampled_from([QUERY_ZERO_POINT - QUERY_PEAK, QUERY_ZERO_POINT + QUERY_PEAK]),
    st.integers(QUERY_ZERO_POINT - QUERY_PEAK, QUERY_ZERO_POINT + QUERY_PEAK),
)


@pytest.mark.parametrize("kernel", ["onnxruntime", "saturating"])
@settings(max_examples=100, deadline=None)
@given(
    rows=hnp.arrays(np.int8, st.tuples(st.integers(1, 60), st.integers(1, 40)),
                    elements=extreme_int8),
    data=st.data(),
)  # fmt: skip
def test_onnx_int8_product_equals_the_numpy_reference(
    kernel: str, rows: np.ndarray, data: st.DataObject
) -> None:
    # "saturating": the onnxruntime session replaced by the u8 x s8 kernel of CPUs without
    # VNNI (int16 pairs that saturate), so the test means the same on every machine.
    query = data.draw(hnp.arrays(np.uint8, rows.shape[1], elements=query_range))
    with pytest.MonkeyPatch.context() as patch:
        if kernel == "saturating":
            patch.setattr(int8_product_module, "_matmul_integer", saturating_runner)
        onnx = onnx_int8_product(rows)(query)
    np.testing.assert_array_equal(onnx, numpy_int8_product(rows)(query))


def test_int8_top_5_agrees_with_fp32_on_a_seeded_large_catalogue() -> None:
    rng = np.random.default_rng(11)
    tools, dim, queries = 20_000, 384, 400
    # Clustered like real catalogues: many near-duplicate tools make the cut hard.
    centres = rng.normal(size=(tools // 10, dim)).astype(np.float32)
    matrix = centres[rng.integers(0, len(centres), tools)]
    matrix += 0.6 * rng.normal(size=matrix.shape).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    exact = VectorIndex(matrix)
    index = Int8Index(exact, onnx_int8_product(Int8Index(exact).rows))
    asked = matrix[rng.integers(0, tools, queries)] + rng.normal(size=(queries, dim)).astype(
        np.float32
    )
    asked /= np.linalg.norm(asked, axis=1, keepdims=True)
    same = sum(list(index.top_k(q, 5)[0]) == list(top_k(exact.scores(q), 5)) for q in asked)
    assert same / queries >= 0.995


# -- Int8Index.ranked: fused scores, the error bound, baseline, fail-open -----------------------


def _bonus_terms(coverage: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``fuse``'s keyword terms, computed as ``RecallIndex`` passes them."""
    return (np.float32(0.4) * coverage * coverage, np.float32(0.1) * names * names)


def _assert_same_ranking(
    picked: np.ndarray, scores: np.ndarray, reference: np.ndarray, k: int
) -> None:
    """``(picked, scores)`` is fp32's top k of ``reference``: the same scores rank by rank
    (up to the last bits BLAS rounds differently) and each pick's own fp32 score."""
    expected = top_k(reference, k)
    np.testing.assert_allclose(scores, reference[expected], rtol=0, atol=1e-5)
    np.testing.assert_allclose(scores, reference[picked], rtol=0, atol=1e-5)
    assert len(set(picked.tolist())) == len(picked)


@settings(max_examples=150, deadline=None)
@given(matrix=int8_matrices, data=st.data(), k=st.integers(0, 12), pool=st.integers(1, 64))
def test_int8_fused_ranking_is_fp32_fuse_top_k(
    matrix: np.ndarray, data: st.DataObject, k: int, pool: int
) -> None:
    exact = VectorIndex(matrix)
    n, dim = matrix.shape
    query = data.draw(hnp.arrays(np.float32, dim, elements=st.floats(-1, 1, width=32)))
    query = _unit(query).astype(np.float32)
    coverage, names = (
        data.draw(hnp.arrays(np.float32, n, elements=st.sampled_from([0.0, 0.25, 0.5, 1.0])))
        for _ in range(2)
    )
    index = Int8Index(exact)
    # Small candidate pools make the error bound decide which rows to re-score.
    index.rescore_factor, index.rescore_min = 1, pool
    terms = _bonus_terms(coverage, names)
    picked, scores = index.ranked(query, k, terms)
    reference = fuse(exact.scores(query), coverage, names)
    _assert_same_ranking(picked, scores, reference, k)
    assert index.baseline(query, terms) == pytest.approx(float(reference.mean()), abs=1e-5)


def _crowded(tools: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Tools all within int8 rounding of each other: candidates alone cannot decide."""
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=dim).astype(np.float32)
    matrix = centre + 0.004 * rng.normal(size=(tools, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = centre + 0.5 * rng.normal(size=dim).astype(np.float32)
    return matrix, (query / np.linalg.norm(query)).astype(np.float32)


@pytest.mark.parametrize("seed", range(5))
def test_int8_crowded_catalogue_rescores_what_the_bound_cannot_rule_out(seed: int) -> None:
    matrix, query = _crowded(3_000, 64, seed)
    exact = VectorIndex(matrix)
    index = Int8Index(exact)
    picked, scores = index.ranked(query, 5)
    reference = exact.scores(query)
    assert picked.tolist() == top_k(reference, 5).tolist()
    _assert_same_ranking(picked, scores, reference, 5)
    # The bound is needed here: the int8 candidates alone miss part of fp32's top 5.
    quantized, _ = quantize_query(query)
    rough = index.scales * numpy_int8_product(index.rows)(quantized)
    rough_pool = set(top_k(rough.astype(np.float32), RESCORE_MIN).tolist())
    assert not set(picked.tolist()) <= rough_pool


@pytest.mark.parametrize("bonus", [False, True])
@pytest.mark.parametrize(
    "product",
    [
        lambda query: (_ for _ in ()).throw(RuntimeError("kernel crashed")),
        lambda query: np.zeros(3, np.int32),  # the wrong number of scores
    ],
)
def test_int8_product_failure_scores_exactly(product: object, bonus: bool) -> None:
    matrix, query = _crowded(500, 32, 3)
    matrix[7] = np.nan
    exact = VectorIndex(matrix)
    index = Int8Index(exact, product)  # type: ignore[arg-type]
    coverage = np.linspace(0, 1, 500, dtype=np.float32)
    terms = _bonus_terms(coverage, coverage[::-1].copy()) if bonus else None
    picked, scores = index.ranked(query, 5, terms)
    cosine = exact.scores(query)
    reference = fuse(cosine, coverage, coverage[::-1].copy()) if bonus else cosine
    assert picked.tolist() == top_k(reference, 5).tolist()
    np.testing.assert_allclose(scores, reference[picked], atol=1e-6)
    assert index.failures == 1
    assert index.last_failure


def test_int8_index_is_built_only_from_the_threshold_and_with_a_working_factory() -> None:
    matrix, _ = _crowded(100, 16, 0)
    exact = VectorIndex(matrix)
    assert int8_index(exact, numpy_int8_product, 101) is None
    assert int8_index(exact, None, 0) is None
    built = int8_index(exact, numpy_int8_product, 100)
    assert built is not None
    assert len(built) == 100
    np.testing.assert_array_equal(built.rows, quantize_rows(exact.matrix)[0])

    def unavailable(rows: np.ndarray) -> object:
        raise ImportError("no onnxruntime here")

    assert int8_index(exact, unavailable, 0) is None  # type: ignore[arg-type]
    assert int8_index(VectorIndex(np.zeros((0, 4), np.float32)), numpy_int8_product, 0) is None


def test_int8_semantic_baseline_is_the_mean_valid_cosine() -> None:
    matrix, query = _crowded(300, 16, 1)
    matrix[[3, 9]] = 0.0
    exact = VectorIndex(matrix)
    cosine = exact.scores(query)
    expected = float(cosine[np.isfinite(cosine)].mean())
    assert Int8Index(exact).baseline(query) == pytest.approx(expected, abs=1e-6)
