"""Vector recall over a read-only float32 matrix, and the top-k used by every ranking."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .quantize import QUERY_PEAK as QUERY_PEAK
from .quantize import QUERY_ZERO_POINT as QUERY_ZERO_POINT
from .quantize import Int8Product as Int8Product
from .quantize import Int8ProductFactory as Int8ProductFactory
from .quantize import Matrix, int8_kernel_faults, residual_norms
from .quantize import Scores as Scores
from .quantize import numpy_int8_product as numpy_int8_product
from .quantize import quantize_query as quantize_query
from .quantize import quantize_rows as quantize_rows

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

#: Slack added to the int8 error bound for float32 rounding: an absolute part (the bonus
#: terms' additions) plus a part per unit of score magnitude, ``(dim + 8)`` roundings
#: (a dot product of ``dim`` terms, worst case, and the few scalings of the rough score).
_ROUNDING_SLACK = 1e-4
_EPSILON32 = float(np.finfo(np.float32).eps)


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
        residual = residual_norms(matrix, self.rows, self.scales)
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
        #: Rows scored exactly so far, and the queries whose candidates the bound could not
        #: certify (so every row it could not rule out was scored too): what the int8 error
        #: costs, reported by ``tests/bench/bench_scale.py``.
        self.rescored = 0
        self.widened = 0

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
            # exactly (``_rough`` derives the bound): if that stays below the k-th exact
            # score, strictly, no outside row can enter the top k or tie into it. Otherwise
            # any row scoring at least ``kth`` exactly has rough >= exact - error >=
            # kth - error, so re-scoring those rows leaves none out.
            edge = float(rough[candidates[-1]])
            kth = float(np.partition(scores, scores.size - k)[scores.size - k])
            if edge + error >= kth:
                self.widened += 1
                self.rescored += candidates.size
                candidates = np.flatnonzero(rough >= kth - error)
                scores = self._exact(query, candidates, bonus)
        self.rescored += candidates.size
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
        # Why ``error`` bounds |exact - rough| on every row (the certification in ``ranked``
        # rests on it). Row i is r (fp32), stored as r' = s * R (R int8, s the row's scale);
        # the query q is sent as q' = t * (Q - z) (Q uint8, z the zero point, t its scale).
        # The kernel's integer product P = R . (Q - z) is exact: the query range keeps every
        # int16 pair sum of a u8 x s8 kernel below 32,767 (``QUERY_PEAK``), and
        # ``int8_kernel_faults`` compared the kernel with numpy at build. So rough = s*t*P =
        # r' . q', and
        #     exact - rough = r . q - r' . q' = r . (q - q') + (r - r') . q'
        #     |exact - rough| <= |r| |q - q'| + |r - r'| |q'|                 (Cauchy-Schwarz)
        #                     <= max_norm |q - q'| + max_residual |q'|
        # The first term is the query's rounding, the second the rows' (dropping either
        # breaks the bound: tests/unit/test_int8_certification.py builds the rows that show
        # it). Bonus terms are added alike to both scores and cancel. Last, float32 rounding:
        # P is exact in float32 while dim <= 2,096 (|P| < 2**24), within an epsilon beyond;
        # with the scalings and the fp32 dot product of ``dim`` terms that is at most
        # (dim + 8) epsilons of the score magnitude |r| |q|, plus the bonus additions (the
        # absolute slack).
        restored = (quantized.astype(np.float64) - QUERY_ZERO_POINT) * scale
        query_error = float(np.linalg.norm(query.astype(np.float64) - restored))
        restored_norm = float(np.linalg.norm(restored))
        magnitude = self._max_norm * max(restored_norm, float(np.linalg.norm(query)))
        error = (
            query_error * self._max_norm
            + restored_norm * self._max_residual
            + _ROUNDING_SLACK
            + (self.exact.dim + 8) * _EPSILON32 * magnitude
        )
        return rough, error

    def _exact(
        self, query: npt.NDArray[np.float32], rows: Indices, bonus: Sequence[Scores] | None
    ) -> Scores:
        # einsum, as ``VectorIndex.scores``: row by row the same float32 sums, bit for bit,
        # so rows tied in exact arithmetic keep fp32's order (``@`` rounds differently).
        scores: Scores = np.einsum("ij,j->i", self.exact.matrix[rows], query)
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
        self.rescored += every.size
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
    than ``minimum`` rows, a factory that failed, or a kernel whose products are not exact.

    The kernel is checked first (``int8_kernel_faults``: extreme rows and queries at this
    width, and a sample of the catalogue's rows, against numpy's exact product), because the
    int8 index's certification holds only for exact integer products.

    **Fail-open:** a factory that raises (onnxruntime missing or rejecting the graph) or a
    kernel that fails the check leaves fp32 scoring: the results are the same, only slower.
    """
    if factory is None or len(exact) < minimum or len(exact) == 0:
        return None
    quantized = quantize_rows(exact.matrix)
    try:
        product = factory(quantized[0])
        if int8_kernel_faults(factory, quantized[0], product):
            return None  # a kernel that saturates or wraps: fp32 scores exactly
    except Exception:  # a provider's kernel is unavailable: fp32 scores the same
        return None
    return Int8Index(exact, product, quantized)
