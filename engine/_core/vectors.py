"""Vector recall over a read-only float32 matrix, and the top-k used by every ranking."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float32]
Indices = npt.NDArray[np.intp]


class VectorIndex:
    """Cosine scores of a query against every tool vector.

    Rows that are all zero (no evidence) or hold NaN/inf (a broken embedding) score ``-inf``
    so they can never win; callers drop non-finite scores.
    """

    def __init__(self, vectors: Matrix) -> None:
        matrix = np.array(vectors, dtype=np.float32, copy=True, order="C")
        if matrix.ndim != 2:
            raise ValueError(f"expected a 2-d matrix of tool vectors, got shape {matrix.shape}")
        finite = np.isfinite(matrix).all(axis=1)
        matrix[~finite] = 0.0
        self.valid = finite & (np.abs(matrix).sum(axis=1) > 0)
        self.valid.setflags(write=False)
        self._invalid = np.flatnonzero(~self.valid)  # usually empty: then scoring skips the mask
        matrix.setflags(write=False)
        self.matrix = matrix

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def __len__(self) -> int:
        return int(self.matrix.shape[0])

    def scores(self, query: npt.NDArray[np.float32]) -> Scores:
        """Cosine of ``query`` (a unit vector) with every row; ``-inf`` for invalid rows."""
        # Not ``matrix @ query``: BLAS runs a matrix-vector product on every core and, on a
        # busy 2-core host, spins: 10-23 ms for 1,702 x 384 where one thread takes 0.2 ms.
        scores: Scores = np.einsum("ij,j->i", self.matrix, np.asarray(query, dtype=np.float32))
        scores[self._invalid] = -np.inf
        return scores

    def scores_many(self, queries: Matrix) -> Matrix:
        """Scores of a batch of queries at once, shape ``(len(queries), len(self))``."""
        # (tools, dim) @ (dim, queries) is the faster product; rows are made contiguous
        # again because every per-query top-k reads one row.
        product = self.matrix @ np.asarray(queries, dtype=np.float32).T
        scores: Matrix = np.ascontiguousarray(product.T)
        scores[:, self._invalid] = -np.inf
        return scores


_SAMPLE_STEP = 64
_SAMPLED_FROM = 8192


def top_k(scores: Scores, k: int, *, floor: float = -np.inf) -> Indices:
    """Indices of the ``k`` best scores above ``floor``, best first.

    Ties break by index (catalogue order), so results are deterministic. NaN and ``-inf``
    never appear.
    """
    if k <= 0 or scores.size == 0:
        return np.empty(0, dtype=np.intp)
    candidates = None
    n = scores.size
    if n >= _SAMPLED_FROM and k * _SAMPLE_STEP < n:
        # Large catalogues: the k-th best of every 64th score is at most the k-th best of
        # all, so the scores reaching it are a small superset of the top k (and of every tie)
        # found without partitioning the whole row. NaN there makes it NaN: careful path.
        sample = scores[::_SAMPLE_STEP]
        bound = np.partition(sample, sample.size - k)[sample.size - k]
        if bound > floor:
            candidates = np.flatnonzero(scores >= bound)
    if candidates is None:
        candidates = np.flatnonzero(scores > floor)  # NaN compares false: dropped here
    if candidates.size > k:
        # Keep everything tied with the k-th best so the tie-break below sees all of them.
        kth = np.partition(scores[candidates], candidates.size - k)[candidates.size - k]
        candidates = candidates[scores[candidates] >= kth]
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order[:k]]


#: Candidates re-scored exactly per wanted result (at least ``RESCORE_MIN``).
RESCORE_FACTOR = 8
RESCORE_MIN = 64
#: Zero point of a quantised query: int8 values shifted into uint8, as int8 kernels want.
QUERY_ZERO_POINT = 128

#: ``product(query_uint8)`` -> int32 dot products of the int8 rows with ``query - 128``.
Int8Product = Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.int32]]


def quantize_rows(matrix: Matrix) -> tuple[npt.NDArray[np.int8], Scores]:
    """Each row scaled to int8 by its own largest magnitude: ``(rows, scales)``,
    ``row ≈ rows[i] * scales[i]``. All-zero rows get scale 0."""
    peak = np.abs(matrix).max(axis=1) if matrix.size else np.zeros(len(matrix), np.float32)
    scales = (peak / 127.0).astype(np.float32)
    inverse = np.where(scales > 0, 1.0 / np.maximum(scales, 1e-30), 0.0).astype(np.float32)
    rows = np.clip(np.rint(matrix * inverse[:, None]), -127, 127).astype(np.int8)
    return rows, scales


def quantize_query(query: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.uint8], float]:
    """A query as uint8 with zero point 128 and its scale: ``query ≈ (q - 128) * scale``."""
    peak = float(np.abs(query).max()) if query.size else 0.0
    scale = peak / 127.0 if peak > 0 else 1.0
    quantized = np.clip(np.rint(query / scale), -127, 127).astype(np.int16) + QUERY_ZERO_POINT
    return quantized.astype(np.uint8), scale


def numpy_int8_product(rows: npt.NDArray[np.int8]) -> Int8Product:
    """The reference ``Int8Product`` in plain numpy (exact, but slower than fp32 BLAS)."""

    def product(query: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
        shifted = query.astype(np.int32) - QUERY_ZERO_POINT
        out: npt.NDArray[np.int32] = np.matmul(rows, shifted.astype(np.int8), dtype=np.int32)
        return out

    return product


class Int8Index:
    """Cosine top-k for large catalogues from an int8 copy, with exact fp32 re-scoring.

    The int8 rows (a quarter of fp32's memory traffic) give rough scores; the best
    ``RESCORE_FACTOR * k`` candidates (at least ``RESCORE_MIN``) are scored again against the
    fp32 rows, so the top ``k`` equals fp32's unless more than that many tools sit within
    int8 rounding (~1e-2) of the k-th score. Invalid rows never win, as in ``VectorIndex``.

    Args:
        exact: the fp32 index this copies.
        product: computes the int8 products (the providers' ``onnxruntime`` kernel is ~4x
            faster than fp32 at 100k tools); the plain numpy reference by default.
    """

    def __init__(self, exact: VectorIndex, product: Int8Product | None = None) -> None:
        self.exact = exact
        self.rows, self.scales = quantize_rows(exact.matrix)
        self.rows.setflags(write=False)
        self._product = product if product is not None else numpy_int8_product(self.rows)

    def __len__(self) -> int:
        return len(self.exact)

    def top_k(self, query: npt.NDArray[np.float32], k: int) -> tuple[Indices, Scores]:
        """The ``k`` best rows for ``query`` (a unit vector), best first, with fp32 scores.

        Ties break by index, as ``top_k`` does; rows scoring ``-inf`` or NaN never appear.
        """
        n = len(self.exact)
        if k <= 0 or n == 0:
            return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.float32)
        query = np.asarray(query, dtype=np.float32)
        quantized, _ = quantize_query(query)  # one factor for every row: ranks ignore it
        rough = self._product(quantized).reshape(-1).astype(np.float32) * self.scales
        rough[self.exact._invalid] = -np.inf
        rough[~np.isfinite(rough)] = -np.inf
        wanted = min(n, max(RESCORE_FACTOR * k, RESCORE_MIN))
        everything = wanted >= n
        candidates = np.arange(n) if everything else np.argpartition(-rough, wanted - 1)[:wanted]
        exact = self.exact.matrix[candidates] @ query
        exact[~self.exact.valid[candidates]] = -np.inf
        keep = np.isfinite(exact)
        candidates, exact = candidates[keep], exact[keep]
        order = np.lexsort((candidates, -exact))[:k]
        return candidates[order].astype(np.intp), exact[order].astype(np.float32)
