"""The fast tier's token rows as it reads them, without a full table per fit.

A fitted tier's row for a token is its fitted row when some learned text showed the token,
else its distilled row mapped into the full model's space (``distilled @ mapping``). Mapping
all 30,522 rows at every fit (a 4.5 GFLOP product) and copying the result (47 MB) was half a
second of a first engine's fit; the unseen rows are mapped when read instead: a request's
vector is a mean of rows and the map is linear, so the mean of the unseen distilled rows is
mapped once (one 384 x 384 product) instead of every row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


class MappedRows:
    """``distilled @ mapping`` (``distilled`` itself when ``mapping`` is ``None``), read a few
    rows at a time: ``rows[tokens]``. What ``ridge.solve`` starts from."""

    def __init__(self, distilled: F32, mapping: F32 | None) -> None:
        self.distilled = distilled
        self.mapping = mapping

    @property
    def shape(self) -> tuple[int, int]:
        width = self.distilled.shape[1] if self.mapping is None else self.mapping.shape[1]
        return int(self.distilled.shape[0]), int(width)

    def __getitem__(self, tokens: I64) -> F32:
        rows = self.distilled[tokens]
        return rows if self.mapping is None else _product(rows, self.mapping)


class TokenTable:
    """The fitted rows of ``tokens`` over ``MappedRows`` for every other token. Immutable: a
    refit makes a new one, so a reader in another thread sees one table whole."""

    def __init__(self, start: MappedRows, tokens: I64, rows: F32) -> None:
        self.start = start
        vocabulary, width = start.shape
        if rows.shape != (len(tokens), width):
            raise ValueError(f"expected {len(tokens)} rows of width {width}, got {rows.shape}")
        self._slot = np.full(vocabulary, -1, dtype=np.int64)
        self._slot[tokens] = np.arange(len(tokens))
        self._rows = np.array(rows, dtype=np.float32)
        self._slot.setflags(write=False)
        self._rows.setflags(write=False)

    def mean(self, ids: Sequence[int]) -> F32:
        """The mean row of ``ids`` (zeros for none)."""
        ids_ = np.asarray(ids, dtype=np.int64)
        width = self._rows.shape[1]
        if not ids_.size:
            return np.zeros(width, dtype=np.float32)
        slots = self._slot[ids_]
        fitted = slots >= 0
        total = self._rows[slots[fitted]].sum(axis=0, dtype=np.float32)
        unseen = ids_[~fitted]
        if unseen.size:
            summed = self.start.distilled[unseen].sum(axis=0, dtype=np.float32)
            mapping = self.start.mapping
            total = total + (summed if mapping is None else _product(summed[None], mapping)[0])
        out: F32 = (total / np.float32(ids_.size)).astype(np.float32)
        return out

    def __getitem__(self, tokens: I64) -> F32:
        """The rows of ``tokens`` as the tier reads them (what the cache saves)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        slots = self._slot[tokens]
        fitted = slots >= 0
        out = np.empty((len(tokens), self._rows.shape[1]), dtype=np.float32)
        out[fitted] = self._rows[slots[fitted]]
        if (~fitted).any():
            out[~fitted] = self.start[tokens[~fitted]]
        return out

    def dense(self) -> F32:
        """Every row (30,522 x 384 for MiniLM): for tests and inspection, not the hot path."""
        return self[np.arange(self.start.shape[0], dtype=np.int64)]


def _product(rows: F32, mapping: F32) -> F32:
    if len(rows) > _ONE_THREAD_ROWS:
        return rows @ mapping
    # A request's mean: einsum, not ``@``. BLAS spreads even a small product over every core
    # and spins on a busy host (see ``_core.recall.vectors``).
    out: F32 = np.einsum("ij,jk->ik", rows, mapping, dtype=np.float32)
    return out


#: Rows mapped in this thread alone (a request's mean is one).
_ONE_THREAD_ROWS = 8
