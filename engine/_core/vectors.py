"""Vector recall over a read-only float32 matrix, and the top-k used by every ranking."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def _residual_norms(matrix: Matrix, rows: npt.NDArray[np.int8], scales: Scores) -> Scores:
    """``|row - rows[i] * scales[i]|`` per row: how far each int8 row is from its fp32 row."""
    norms = np.empty(len(matrix), dtype=np.float32)
    for start in range(0, len(matrix), _QUANTIZE_STEP):
        part = slice(start, start + _QUANTIZE_STEP)
        restored = rows[part].astype(np.float32) * scales[part, None]
        norms[part] = np.linalg.norm(matrix[part] - restored, axis=1)
    return norms


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


#: ``factory(rows)`` -> an ``Int8Product`` for those int8 rows (the providers' onnxruntime
#: kernel, or ``numpy_int8_product``); the runtime injects it, the pure core never loads one.
Int8ProductFactory = Callable[[npt.NDArray[np.int8]], Int8Product]

#: Slack added to the int8 error bound: float32 rounding of the rough and the exact scores.
_ROUNDING_SLACK = 1e-4


class Int8Index:
    """Cosine top-k for large catalogues from an int8 copy, with exact fp32 re-scoring.

    The int8 rows (a quarter of fp32's memory traffic) give rough scores; the best
    ``RESCORE_FACTOR * k`` candidates (at least ``RESCORE_MIN``) are scored again against the
    fp32 rows. A bound on the int8 rounding error (query and row residuals, Cauchy-Schwarz)
    then certifies that no other row can reach the k-th exact score; when it cannot certify
    (many tools within the bound of the k-th), every row the bound cannot rule out is
    re-scored too. So the top ``k`` and its scores are fp32's, ties broken by index.
    Invalid rows never win, as in ``VectorIndex``.

    Args:
        exact: the fp32 index this copies.
        product: computes the int8 products (the providers' ``onnxruntime`` kernel is ~4x
            faster than fp32 at 100k tools); the plain numpy reference by default.
        quantized: ``quantize_rows(exact.matrix)``, when the caller already has it.

    **Fail-open:** a product that raises or returns the wrong shape costs one exact fp32
    scoring of the whole matrix for that query (counted in ``failures``, the last reason
    in ``last_failure``); the results are the same.
    """

    def __init__(
        self,
        exact: VectorIndex,
        product: Int8Product | None = None,
        quantized: tuple[npt.NDArray[np.int8], Scores] | None = None,
    ) -> None:
        self.exact = exact
        matrix = exact.matrix
        self.rows, self.scales = quantized if quantized is not None else quantize_rows(matrix)
        self.rows.setflags(write=False)
        self._product = product if product is not None else numpy_int8_product(self.rows)
        residual = _residual_norms(matrix, self.rows, self.scales)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
        self._max_residual = float(residual.max(initial=0.0))
        self._max_norm = float(norms.max(initial=0.0))
        # Sum of the rows (invalid ones are zero): the mean score over the catalogue is linear
        # in the query, so the baseline needs no full product.
        self._row_sum = matrix.sum(axis=0, dtype=np.float64)
        self._valid_count = int(exact.valid.sum())
        #: Candidates re-scored per wanted result, and at least (the module's defaults).
        self.rescore_factor, self.rescore_min = RESCORE_FACTOR, RESCORE_MIN
        self.failures = 0
        self.last_failure = ""

    def __len__(self) -> int:
        return len(self.exact)

    def top_k(self, query: npt.NDArray[np.float32], k: int) -> tuple[Indices, Scores]:
        """The ``k`` best rows for ``query`` (a unit vector), best first, with fp32 scores.

        Ties break by index, as ``top_k`` does; rows scoring ``-inf`` or NaN never appear.
        """
        return self.ranked(query, k)

    def ranked(
        self, query: npt.NDArray[np.float32], k: int, bonus: Sequence[Scores] | None = None
    ) -> tuple[Indices, Scores]:
        """``top_k`` of the cosines, or with ``bonus`` (terms of one finite value per row)
        of ``cosine + bonus[0] + bonus[1] ...`` added in that order, where an invalid row
        counts as cosine 0 — ``fusion.fuse``'s rule and rounding.

        Returns:
            ``(rows, scores)``: the same rows, order and float32 scores as ranking the exact
            fp32 scores of every row with ``top_k``.
        """
        n = len(self.exact)
        if k <= 0 or n == 0:
            return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.float32)
        query = np.asarray(query, dtype=np.float32)
        try:
            rough, error = self._rough(query)
        except Exception as exc:  # a provider's kernel failed: score this query exactly
            self.failures += 1
            self.last_failure = f"{type(exc).__name__}: {str(exc)[:200]}"
            return self._everything(query, k, bonus)
        if bonus is None:
            rough[self.exact._invalid] = -np.inf
        else:
            for term in bonus:
                rough += term
        wanted = max(self.rescore_factor * k, self.rescore_min, 1)
        if wanted >= n:
            return self._everything(query, k, bonus)
        candidates = top_k(rough, wanted)
        scores = self._exact(query, candidates, bonus)
        if candidates.size == wanted:
            # Rows outside the candidates score at most ``edge`` roughly, ``edge + error``
            # exactly: if that cannot reach the k-th exact score, the top k is certain.
            edge = float(rough[candidates[-1]])
            kth = float(np.partition(scores, scores.size - k)[scores.size - k])
            if edge + error >= kth:
                candidates = np.flatnonzero(rough >= kth - error)
                scores = self._exact(query, candidates, bonus)
        return _best(candidates, scores, k)

    def baseline(
        self, query: npt.NDArray[np.float32], bonus: Sequence[Scores] | None = None
    ) -> float:
        """The mean finite score over the catalogue (``ranked``'s scores), without scoring it:
        the mean cosine is the query's product with the rows' mean."""
        total = float(self._row_sum @ np.asarray(query, dtype=np.float64))
        if bonus is None:
            return total / self._valid_count if self._valid_count else 0.0
        total += sum(float(term.sum(dtype=np.float64)) for term in bonus)
        return total / len(self.exact)

    def _rough(self, query: npt.NDArray[np.float32]) -> tuple[Scores, float]:
        """Rough cosines from the int8 product, and a bound on their error."""
        quantized, scale = quantize_query(query)
        product = np.asarray(self._product(quantized))
        if product.size != len(self.exact):
            raise ValueError(
                f"int8 product returned {product.size} scores for {len(self.exact)} rows"
            )
        rough: Scores = product.reshape(-1).astype(np.float32) * self.scales
        rough *= np.float32(scale)
        restored = (quantized.astype(np.float64) - QUERY_ZERO_POINT) * scale
        query_error = float(np.linalg.norm(query.astype(np.float64) - restored))
        error = (
            query_error * self._max_norm
            + float(np.linalg.norm(restored)) * self._max_residual
            + _ROUNDING_SLACK
        )
        return rough, error

    def _exact(
        self, query: npt.NDArray[np.float32], rows: Indices, bonus: Sequence[Scores] | None
    ) -> Scores:
        scores: Scores = self.exact.matrix[rows] @ query
        valid = self.exact.valid[rows]
        if bonus is None:
            scores[~valid] = -np.inf
        else:
            scores[~valid] = 0.0
            for term in bonus:
                scores += term[rows]
        return scores

    def _everything(
        self, query: npt.NDArray[np.float32], k: int, bonus: Sequence[Scores] | None
    ) -> tuple[Indices, Scores]:
        every = np.arange(len(self.exact))
        return _best(every, self._exact(query, every, bonus), k)


def _best(rows: Indices, scores: Scores, k: int) -> tuple[Indices, Scores]:
    """The ``k`` best finite ``scores`` of ``rows``, best first, ties by row."""
    keep = np.isfinite(scores)
    rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))[:k]
    return rows[order].astype(np.intp), scores[order].astype(np.float32)


#: Catalogues at least this large score from an ``Int8Index`` when an int8 product is given
#: (``RecallIndex(int8_product=...)``; the public ``ToolIndex`` gives onnxruntime's). Below
#: it the fp32 product is as fast and the int8 copy is memory for nothing
#: (``tests/bench/bench_scale.py`` measures both).
INT8_FROM = 10_000


def int8_index(
    exact: VectorIndex, factory: Int8ProductFactory | None, minimum: int = INT8_FROM
) -> Int8Index | None:
    """An ``Int8Index`` over ``exact`` built with ``factory``, or ``None``: no factory, fewer
    than ``minimum`` rows, or a factory that failed.

    **Fail-open:** a factory that raises (onnxruntime missing or rejecting the graph) leaves
    fp32 scoring; the results are the same, only slower.
    """
    if factory is None or len(exact) < minimum or len(exact) == 0:
        return None
    quantized = quantize_rows(exact.matrix)
    try:
        product = factory(quantized[0])
    except Exception:  # a provider's kernel is unavailable: fp32 scores the same
        return None
    return Int8Index(exact, product, quantized)
