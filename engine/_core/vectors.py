"""Vector recall over a read-only float32 matrix, and the top-k used by every ranking."""

from __future__ import annotations

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
        scores: Scores = self.matrix @ np.asarray(query, dtype=np.float32)
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
