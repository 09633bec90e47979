"""int8 kernels that behave like the CPUs CI runs on, for tests of ``Int8Index`` and its check.

onnxruntime's u8 x s8 kernel on CPUs without VNNI (``vpmaddubsw``, AVX2 and AVX-512 without
VNNI) multiplies uint8 by int8, adds each pair of neighbouring products in a *saturating*
int16, then sums the pairs in int32 and subtracts the zero point times each row's sum.
``saturating_kernel`` does exactly that in numpy, so the behaviour of those CPUs can be
tested on any machine; ``group=4`` is a hypothetical kernel that saturates on the queries
toolroute sends too (four products per int16), which the build-time check must reject.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from toolroute._core.recall.quantize import QUERY_ZERO_POINT

Product = Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.int32]]
INT16_MIN, INT16_MAX = -32_768, 32_767


def saturating_product(
    rows: npt.NDArray[np.int8],
    query: npt.NDArray[np.uint8],
    *,
    group: int = 2,
    zero_point: int = QUERY_ZERO_POINT,
) -> npt.NDArray[np.int32]:
    """``rows @ (query - zero_point)`` as a u8 x s8 kernel with int16 groups computes it."""
    n, dim = rows.shape
    width = -(-dim // group) * group  # the kernel pads the width with zeros
    padded_rows = np.zeros((n, width), dtype=np.int32)
    padded_rows[:, :dim] = rows
    padded_query = np.zeros(width, dtype=np.int32)
    padded_query[:dim] = np.asarray(query, dtype=np.int32).reshape(-1)
    groups = (padded_rows * padded_query).reshape(n, width // group, group).sum(axis=2)
    raw = np.clip(groups, INT16_MIN, INT16_MAX).sum(axis=1, dtype=np.int64)
    return (raw - zero_point * rows.sum(axis=1, dtype=np.int64)).astype(np.int32)


def saturating_kernel(
    group: int = 2, zero_point: int = QUERY_ZERO_POINT
) -> Callable[[npt.NDArray[np.int8]], Product]:
    """An ``Int8Kernel``: ``kernel(rows)(query)`` is ``saturating_product(rows, query)``."""

    def kernel(rows: npt.NDArray[np.int8]) -> Product:
        matrix = np.array(rows, dtype=np.int8)

        def product(query: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
            return saturating_product(matrix, query, group=group, zero_point=zero_point)

        return product

    return kernel


def saturating_runner(
    weights: npt.NDArray[np.int8], threads: int
) -> Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.int32]]:
    """Stands in for the onnxruntime session of ``onnx_int8_product`` (``_matmul_integer``):
    ``weights`` is the transposed matrix, a feed is ``(1, dim)``, the result ``(1, n)``."""
    rows = np.ascontiguousarray(np.asarray(weights).T)

    def run(feed: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
        return saturating_product(rows, feed.reshape(-1))[None, :]

    return run
