"""int8 kernels: exact at the extremes on every CPU, and the build-time check that rejects one
that is not (``toolroute._core.recall.quantize.int8_kernel_faults``).

The kernel that matters is onnxruntime's u8 x s8 on CPUs without VNNI, which saturates pairs
of products in int16; ``tests/int8_kernels.py`` emulates it, so these tests show its
behaviour on any machine, VNNI or not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from int8_kernels import saturating_kernel, saturating_product

from toolroute import Catalog, ToolIndex
from toolroute._core.recall.index import RecallIndex
from toolroute._core.recall.quantize import (
    QUERY_PEAK,
    QUERY_ZERO_POINT,
    extreme_queries,
    extreme_rows,
    int8_kernel_faults,
    numpy_int8_product,
    quantize_query,
    quantize_rows,
)
from toolroute._core.recall.vectors import VectorIndex, int8_index, top_k
from toolroute.providers import Int8Kernel, OnnxInt8Kernel
from toolroute.providers._embedders.int8_product import onnx_int8_product

#: Widths the index meets: odd and even, below, at and past the kernels' blocks (4, 16, 32,
#: 64 bytes), and the widths of common embedders (MiniLM 384, 768, OpenAI 1,536).
WIDTHS = [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 255, 384, 768, 1536]

Kernel = Callable[[npt.NDArray[np.int8]], Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.int32]]]
KERNELS: dict[str, Kernel] = {
    "onnxruntime": onnx_int8_product,
    "saturating pairs (AVX2 without VNNI)": saturating_kernel(group=2),
    "numpy": numpy_int8_product,
}


def exact(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    return rows.astype(np.int64) @ (query.astype(np.int64) - QUERY_ZERO_POINT)


# -- the bug, reproduced: 8-bit queries (zero point 128) saturate ------------------------------


def test_the_emulated_kernel_reproduces_the_saturation_seen_without_vnni() -> None:
    # The products reported on an AMD EPYC without VNNI, with today's 8-bit queries.
    old = saturating_kernel(group=2, zero_point=128)
    for row, query, reported, right in [
        ((127, 127), 255, 255, 32_258),
        ((94, 94), 175, 8_703, 8_836),
    ]:
        rows, queries = np.array([row], np.int8), np.full(2, query, np.uint8)
        assert old(rows)(queries).tolist() == [reported]
        assert (rows.astype(np.int64) @ (queries.astype(np.int64) - 128)).tolist() == [right]


@pytest.mark.parametrize("width", WIDTHS)
def test_8bit_queries_saturate_that_kernel_at_every_width(width: int) -> None:
    # Why the query range changed: all-127 rows against all-255 queries, zero point 128.
    rows = np.full((1, width), 127, np.int8)
    got = int(saturating_product(rows, np.full(width, 255, np.uint8), zero_point=128)[0])
    if width == 1:  # one product, padded with a zero: 255 * 127 fits in int16
        assert got == 127 * 127
    else:
        assert got < 127 * 127 * width  # every full pair clipped to 32,767


# -- the query range: every pair fits in int16 -------------------------------------------------


def test_quantized_queries_never_leave_the_7_bit_range() -> None:
    rng = np.random.default_rng(0)
    for query in [
        np.ones(384, np.float32),
        -np.ones(384, np.float32),
        np.where(np.arange(384) % 2 == 0, 1.0, -1.0).astype(np.float32),
        rng.normal(size=384).astype(np.float32),
        np.zeros(384, np.float32),
    ]:
        quantized, _ = quantize_query(query)
        assert quantized.min() >= QUERY_ZERO_POINT - QUERY_PEAK >= 1
        assert quantized.max() <= QUERY_ZERO_POINT + QUERY_PEAK <= 127
    # The largest pair a u8 x s8 kernel can meet, and int16's limit.
    assert 2 * (QUERY_ZERO_POINT + QUERY_PEAK) * 127 <= 32_767


@pytest.mark.parametrize("kernel", list(KERNELS), ids=list(KERNELS))
@pytest.mark.parametrize("width", WIDTHS)
def test_kernels_are_exact_on_extreme_rows_and_queries_at_every_width(
    kernel: str, width: int
) -> None:
    rows = extreme_rows(width)  # all +127, all -127, alternating, halves, mixes
    assert {127, -127} <= set(np.unique(rows).tolist())
    product = KERNELS[kernel](rows)
    for query in extreme_queries(width):  # all 127, all 1, alternating, zero, a mix
        np.testing.assert_array_equal(product(query), exact(rows, query))
    assert int8_kernel_faults(KERNELS[kernel], rows, product) == ""


# -- the check at build: a kernel that is not exact is not used --------------------------------


@pytest.mark.parametrize("width", [4, 16, 384])
def test_the_check_rejects_a_kernel_that_saturates_on_the_queries_sent(width: int) -> None:
    # Four products per int16: 4 * 127 * 127 passes 32,767 even on 7-bit queries.
    kernel = saturating_kernel(group=4)
    rows = extreme_rows(width)
    fault = int8_kernel_faults(kernel, rows, kernel(rows))
    assert "width" in fault
    assert "the exact product is" in fault


def test_the_check_rejects_a_kernel_wrong_only_on_large_matrices() -> None:
    # Right on the 40-row probe, off by one past row 1,000 of a real catalogue.
    def mispacked(rows: npt.NDArray[np.int8]) -> Callable[[np.ndarray], np.ndarray]:
        reference = numpy_int8_product(rows)

        def product(query: np.ndarray) -> np.ndarray:
            out = reference(query).copy()
            out[1000:] += 1
            return out

        return product

    rows = quantize_rows(_unit_rows(3000, 32, seed=1))[0]
    assert int8_kernel_faults(mispacked, extreme_rows(32), mispacked(extreme_rows(32))) == ""
    assert "catalogue row" in int8_kernel_faults(mispacked, rows, mispacked(rows))


def test_the_check_rejects_a_kernel_of_the_wrong_shape() -> None:
    def short(rows: npt.NDArray[np.int8]) -> Callable[[np.ndarray], np.ndarray]:
        return lambda query: np.zeros(len(rows) - 1, np.int32)

    rows = extreme_rows(8)
    assert "products for 40 rows" in int8_kernel_faults(short, rows, short(rows))


def _unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _sign_catalogue(n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows of equal-magnitude entries (they quantise to +-127 everywhere, the worst case for
    a saturating kernel), a sign query (+-63 everywhere) and the row closest to it, at
    cosine 0.84 with 2,999 others near 0."""
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 1.0], size=(n, dim)).astype(np.float32)
    query = rng.choice([-1.0, 1.0], size=dim).astype(np.float32)
    target = n // 2
    signs[target] = query
    signs[target, : int(dim * 0.08)] *= -1  # cosine 1 - 2 * 0.08 = 0.84
    return signs / np.sqrt(dim), query / np.sqrt(dim), target


def test_a_saturating_kernel_keeps_the_right_tool_in_the_int8_top_5() -> None:
    # The case through the core: 3k tools, the right one at cosine 0.84. With 8-bit
    # queries (zero point 128) and no check, the emulated AVX2 kernel's clipped products put
    # a wrong tool in this top 5; with the check alone, the kernel is rejected (fp32).
    matrix, query, target = _sign_catalogue(3000, 384, seed=2)
    exact_index = VectorIndex(matrix)
    assert float(exact_index.scores(query)[target]) == pytest.approx(0.84, abs=0.005)
    index = int8_index(exact_index, saturating_kernel(group=2), minimum=1000)
    assert index is not None  # the emulated AVX2 kernel passes the check: it is exact here
    picked, _ = index.top_k(query, 5)
    assert picked[0] == target
    assert picked.tolist() == top_k(exact_index.scores(query), 5).tolist()
    assert index.failures == 0


@pytest.mark.parametrize(
    ("kernel", "int8_used"),
    [(saturating_kernel(group=2), True), (saturating_kernel(group=4), False)],
    ids=["saturating pairs", "saturating quads"],
)
def test_tool_index_ranks_as_fp32_whichever_kernel_it_is_given(
    kernel: Kernel, int8_used: bool
) -> None:
    matrix, query, target = _sign_catalogue(3000, 384, seed=3)
    catalog = Catalog.from_plain([{"name": f"tool_{i}", "description": "x"} for i in range(3000)])
    keyword_only = ToolIndex(
        catalog, embedder=None, cache=None, int8_product=kernel, int8_from=1000
    )
    index = keyword_only.recall.with_vectors(matrix)
    assert (index.int8 is not None) is int8_used  # quads fail the check: fp32 instead
    fp32 = RecallIndex.build(catalog).with_vectors(matrix)
    assert fp32.int8 is None
    got = index.rank("find the right tool", query, 5, strategy="semantic")
    want = fp32.rank("find the right tool", query, 5, strategy="semantic")
    assert got.tool_ids == want.tool_ids
    assert got.tool_ids[0] == f"tool_{target}"



def test_onnx_int8_kernel_is_the_public_int8_kernel() -> None:
    kernel = OnnxInt8Kernel(threads=1)
    assert isinstance(kernel, Int8Kernel)
    assert repr(kernel) == "OnnxInt8Kernel(threads=1)"
    rows = extreme_rows(16)
    np.testing.assert_array_equal(
        kernel(rows)(extreme_queries(16)[0]), exact(rows, extreme_queries(16)[0])
    )


@pytest.mark.parametrize("threads", [0, -1, True, 1.5])
def test_onnx_int8_kernel_rejects_a_thread_count_that_is_not_a_positive_int(
    threads: object,
) -> None:
    with pytest.raises(ValueError, match="threads must be an int >= 1"):
        OnnxInt8Kernel(threads=threads)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "rows",
    [np.zeros((3, 4), np.float32), np.zeros(4, np.int8), np.zeros((2, 2, 2), np.int8)],
    ids=["float rows", "one row", "3-d"],
)
def test_onnx_int8_product_rejects_what_is_not_a_2d_int8_matrix(rows: np.ndarray) -> None:
    with pytest.raises(ValueError, match="expected a 2-d int8 matrix of rows, got"):
        onnx_int8_product(rows)


def test_onnx_int8_product_rejects_a_query_of_the_wrong_width() -> None:
    product = onnx_int8_product(extreme_rows(8))
    with pytest.raises(ValueError, match="expected a query of 8 values, got 7"):
        product(np.full(7, 64, np.uint8))
