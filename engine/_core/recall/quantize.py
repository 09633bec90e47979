"""int8 copies of tool vectors and queries, the exact reference product, and the kernel check.

``Int8Index`` (``vectors``) scores large catalogues from these int8 copies with a kernel the
runtime injects (onnxruntime's, from the providers). The certification that makes its top k
exactly fp32's assumes the kernel's integer products are exact; this module chooses a query
range in which they are by construction and checks, when an index is built, that the kernel
really computes them (``int8_kernel_faults``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float32]

#: A quantised query is ``q`` in uint8 with ``|q - QUERY_ZERO_POINT| <= QUERY_PEAK``: every
#: value lies in [1, 127], 7 bits. Why not 8: int8 kernels without VNNI (onnxruntime's u8 x s8
#: kernel on AVX2 and on AVX-512 without VNNI) multiply uint8 by int8 and add each *pair* of
#: products in a saturating int16. With ``q <= 127`` and rows in [-127, 127] a pair is at most
#: 2 * 127 * 127 = 32,258 <= 32,767, so no such kernel can saturate, whichever elements it
#: pairs; with 8-bit queries (up to 255) one pair reaches 64,770 and the product is wrong.
#: Rows keep their 8 bits: 7-bit rows with 8-bit queries avoid saturation too, but every
#: row's rounding doubles and the error bound uses the largest, so it widens the exact
#: re-scoring more often (42 % of requests at 100k random tools against 11 % for 7-bit
#: queries; ``tests/bench/bench_scale.py --sections agreement``). Other kernels, measured
#: (``--sections kernels``): u8 x u8 is exact too but slower (1.1-5.5x in our runs); s8 x s8
#: runs a scalar loop on CPUs without AVX-VNNI-INT8, slower than fp32.
QUERY_ZERO_POINT = 64
QUERY_PEAK = 63

#: ``product(query_uint8)`` -> int32 dot products of the int8 rows with
#: ``query - QUERY_ZERO_POINT``.
Int8Product = Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.int32]]

#: ``factory(rows)`` -> an ``Int8Product`` for those int8 rows (the providers' onnxruntime
#: kernel, or ``numpy_int8_product``); the runtime injects it, the pure core never loads one.
#: ``toolroute.providers.Int8Kernel`` is the same contract as a protocol.
Int8ProductFactory = Callable[[npt.NDArray[np.int8]], Int8Product]

#: Rows quantised per step: float temporaries stay a few MB however large the catalogue.
_QUANTIZE_STEP = 4096


def quantize_rows(matrix: Matrix) -> tuple[npt.NDArray[np.int8], Scores]:
    """Each row scaled to int8 by its own largest magnitude: ``(rows, scales)``,
    ``row ≈ rows[i] * scales[i]``. All-zero rows get scale 0."""
    peak = np.abs(matrix).max(axis=1) if matrix.size else np.zeros(len(matrix), np.float32)
    scales = (peak / 127.0).astype(np.float32)
    inverse = np.where(scales > 0, 1.0 / np.maximum(scales, 1e-30), 0.0).astype(np.float32)
    rows = np.empty(matrix.shape, dtype=np.int8)
    for start in range(0, len(matrix), _QUANTIZE_STEP):
        part = slice(start, start + _QUANTIZE_STEP)
        rows[part] = np.clip(np.rint(matrix[part] * inverse[part, None]), -127, 127)
    return rows, scales


def residual_norms(matrix: Matrix, rows: npt.NDArray[np.int8], scales: Scores) -> Scores:
    """``|row - rows[i] * scales[i]|`` per row: how far each int8 row is from its fp32 row."""
    norms = np.empty(len(matrix), dtype=np.float32)
    for start in range(0, len(matrix), _QUANTIZE_STEP):
        part = slice(start, start + _QUANTIZE_STEP)
        restored = rows[part].astype(np.float32) * scales[part, None]
        norms[part] = np.linalg.norm(matrix[part] - restored, axis=1)
    return norms


def quantize_query(query: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.uint8], float]:
    """A query as uint8 and its scale: ``query ≈ (q - QUERY_ZERO_POINT) * scale``, every
    ``q`` within ``QUERY_PEAK`` of the zero point."""
    peak = float(np.abs(query).max()) if query.size else 0.0
    scale = peak / QUERY_PEAK if peak > 0 else 1.0
    steps = np.clip(np.rint(query / scale), -QUERY_PEAK, QUERY_PEAK).astype(np.int16)
    return (steps + QUERY_ZERO_POINT).astype(np.uint8), scale


def numpy_int8_product(rows: npt.NDArray[np.int8]) -> Int8Product:
    """The reference ``Int8Product`` in plain numpy (exact, but slower than fp32 BLAS)."""

    def product(query: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
        # int32 throughout: exact for any uint8, in or out of the quantiser's range.
        shifted = query.astype(np.int32) - QUERY_ZERO_POINT
        out: npt.NDArray[np.int32] = np.matmul(rows, shifted, dtype=np.int32)
        return out

    return product


# -- the kernel check -------------------------------------------------------------------------

#: Rows the probe repeats: 5 copies of 8 patterns make 40 rows, so a kernel that works in
#: blocks of 16 or 32 rows runs its full blocks and its tail.
_PROBE_COPIES = 5
#: Real rows compared with the reference: about this many, spread over the catalogue.
_SAMPLED_ROWS = 1024


def extreme_rows(dim: int) -> npt.NDArray[np.int8]:
    """int8 rows at the ends of the range, ``dim`` wide: all +127, all -127, alternating
    signs both ways, halves of opposite sign, +127 on even places, and two fixed mixes."""
    place = np.arange(dim)
    alternating = np.where(place % 2 == 0, 127, -127)
    mixed = np.random.default_rng(dim).integers(-127, 128, dim)
    patterns = [
        np.full(dim, 127),
        np.full(dim, -127),
        alternating,
        -alternating,
        np.where(place < dim // 2, 127, -127),
        np.where(place % 2 == 0, 127, 0),
        np.where(mixed >= 0, 127, -127),
        mixed,
    ]
    return np.array(patterns * _PROBE_COPIES, dtype=np.int8)


def extreme_queries(dim: int) -> npt.NDArray[np.uint8]:
    """Quantised queries at the ends of ``quantize_query``'s range, ``dim`` wide: all at the
    top, all at the bottom, alternating both ways, the zero query and a fixed mix."""
    top, bottom = QUERY_ZERO_POINT + QUERY_PEAK, QUERY_ZERO_POINT - QUERY_PEAK
    place = np.arange(dim)
    alternating = np.where(place % 2 == 0, top, bottom)
    mixed = np.random.default_rng(dim + 1).integers(bottom, top + 1, dim)
    patterns = [
        np.full(dim, top),
        np.full(dim, bottom),
        alternating,
        top + bottom - alternating,
        np.full(dim, QUERY_ZERO_POINT),
        mixed,
    ]
    return np.array(patterns, dtype=np.uint8)


def int8_kernel_faults(
    factory: Int8ProductFactory, rows: npt.NDArray[np.int8], product: Int8Product
) -> str:
    """Where ``factory``'s kernel differs from the exact integer product; ``''`` if nowhere.

    Two comparisons with numpy's exact product, at the width of ``rows``: a probe matrix of
    extreme rows (``extreme_rows``, built with ``factory``) against extreme queries
    (``extreme_queries``), where a kernel that saturates or wraps shows it; and ``product``
    (the kernel built for ``rows``) against the same queries on a sample of ``rows``, where a
    kernel that mis-packs a large matrix shows it.

    Raises:
        Exception: whatever ``factory`` or a product raises; the caller treats it as a fault.
    """
    dim = rows.shape[1]
    queries = extreme_queries(dim)
    probe = extreme_rows(dim)
    probe_product = factory(probe)
    sample = np.arange(0, len(rows), max(1, len(rows) // _SAMPLED_ROWS))
    for query in queries:
        shifted = query.astype(np.int64) - QUERY_ZERO_POINT
        for name, matrix, got, picked in (
            ("probe", probe, probe_product(query), slice(None)),
            ("catalogue", rows, product(query), sample),
        ):
            values = np.asarray(got).reshape(-1)
            if values.size != len(matrix):
                return f"{name}: {values.size} products for {len(matrix)} rows"
            want = matrix[picked].astype(np.int64) @ shifted
            wrong = np.flatnonzero(values[picked].astype(np.int64) != want)
            if wrong.size:
                first = int(wrong[0])
                return (
                    f"{name} row {first} at width {dim}: the kernel gave "
                    f"{int(values[picked][first])}, the exact product is {int(want[first])}"
                )
    return ""
