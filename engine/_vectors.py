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
        scores[~self.valid] = -np.inf
        return scores

    def scores_many(self, queries: Matrix) -> Matrix:
        """Scores of a batch of queries at once, shape ``(len(queries), len(self))``."""
        scores: Matrix = np.asarray(queries, dtype=np.float32) @ self.matrix.T
        scores[:, ~self.valid] = -np.inf
        return scores


def top_k(scores: Scores, k: int, *, floor: float = -np.inf) -> Indices:
    """Indices of the ``k`` best scores above ``floor``, best first.

    Ties break by index (catalogue order), so results are deterministic. NaN and ``-inf``
    never appear.
    """
    if k <= 0 or scores.size == 0:
        return np.empty(0, dtype=np.intp)
    candidates = np.flatnonzero(scores > floor)  # NaN compares false: dropped here
    if candidates.size > k:
        # Keep everything tied with the k-th best so the tie-break below sees all of them.
        kth = np.partition(scores[candidates], candidates.size - k)[candidates.size - k]
        candidates = candidates[scores[candidates] >= kth]
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order[:k]]
