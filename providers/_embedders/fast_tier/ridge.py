"""Ridge least squares for static token vectors, from sufficient statistics only.

A text is a normalised bag of token ids ``a`` (counts divided by the text's length); its
target is the full model's sentence vector ``y``. The fit looks for token rows ``W`` with
``a @ W ≈ y`` for every text seen, pulled towards a starting table ``W0``::

    minimise  sum_t |a_t W - y_t|^2  +  ridge * |W - W0|^2
    solution  (G + ridge I) W = B + ridge W0,   G = sum_t a_t^T a_t,   B = sum_t a_t^T y_t

``G`` (token co-occurrence, sparse) and ``B`` (one row per token seen) are all that is kept:
no text, no token sequence, so a deployment can persist what it learned from its traffic
without writing requests to disk. Both are bounded: ``B`` by the vocabulary, ``G`` by
``max_pairs`` (beyond it the weakest co-occurrences are dropped, which only makes the fit
treat those tokens as less correlated). Tokens never seen keep their ``W0`` row exactly.

The solver multiplies by ``G`` in two forms: the texts learned in this process as their bags
(``G x = A^T (A x)``, with ``A`` one row of weights per text: ~60 entries a text instead of
~60^2 / 2 pairs, so a first fit on BFCL's 1,702 tool texts took 0.9 s instead of 13.9 s),
and whatever was restored from disk as the pairs of ``G``. The bags live in memory only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Final, Protocol

import attrs
import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

# Pending co-occurrence entries merged into the sorted arrays at once (amortises np.unique).
_MERGE_AT = 1 << 20
# Entries multiplied per chunk in the sparse products: a 1,024 x 384 float32 temporary
# (1.5 MB) stays in the cache; 65,536-entry chunks (100 MB) made each product 3x slower.
_CHUNK = 1 << 10
#: Bag entries kept for the fast product; past it the bags are folded into ``G`` (memory only:
#: ~12 bytes an entry, so at most ~25 MB).
MAX_BAG_ENTRIES: Final = 1 << 21


class Stopped(Exception):
    """``solve`` stopped between two iterations because ``should_stop`` said so."""


@attrs.frozen(eq=False)
class RidgeSystem:
    """What ``solve`` needs, copied out of ``RidgeStats`` (safe without its lock).

    Attributes:
        keys, values: the restored part of ``G`` (upper triangle, as in ``RidgeStats``).
        bag_starts: where each bag begins in ``bag_tokens`` / ``bag_weights`` (``n + 1``).
        bag_tokens, bag_weights: the texts learned since, as normalised bags.
        tokens, rows: ``B``, one row per token seen.
    """

    keys: I64
    values: F32
    bag_starts: I64
    bag_tokens: I64
    bag_weights: F32
    tokens: I64
    rows: F32

    @classmethod
    def from_snapshot(cls, snapshot: tuple[I64, F32, I64, F32, int]) -> RidgeSystem:
        """A system whose ``G`` is all pairs (what a ``RidgeStats.snapshot()`` holds)."""
        keys, values, tokens, rows, _ = snapshot
        empty = np.zeros(0, dtype=np.int64)
        return cls(
            keys=keys, values=values, bag_starts=np.zeros(1, dtype=np.int64), bag_tokens=empty,
            bag_weights=np.zeros(0, dtype=np.float32), tokens=tokens, rows=rows,
        )  # fmt: skip


class RidgeStats:
    """Running ``G`` and ``B`` over the texts seen so far; thread-safe.

    Args:
        vocab_size: number of token ids.
        dim: width of the target vectors.
        max_pairs: most distinct (token, token) entries of ``G`` kept.
    """

    def __init__(self, vocab_size: int, dim: int, *, max_pairs: int = 4_000_000) -> None:
        if max_pairs < 1:
            raise ValueError(f"max_pairs must be at least 1, got {max_pairs}")
        self.vocab_size = vocab_size
        self.dim = dim
        self.max_pairs = max_pairs
        self.texts = 0
        # G's upper triangle as sorted keys ``i * vocab_size + j`` (i <= j) and values.
        self.keys: I64 = np.zeros(0, dtype=np.int64)
        self.values: F32 = np.zeros(0, dtype=np.float32)
        # B as one row per token seen: ``rows[slot_of[token]]``.
        self.slot_of = np.full(vocab_size, -1, dtype=np.int32)
        self.tokens: list[int] = []
        self.rows: F32 = np.zeros((0, dim), dtype=np.float32)
        self._row_buffer = self.rows  # ``rows`` is its first ``len(tokens)`` rows
        self._pending_keys: list[I64] = []
        self._pending_values: list[F32] = []
        self._pending = 0
        # G as the solver sees it: pairs restored (or folded) plus the bags added since.
        self._solver_keys: I64 = np.zeros(0, dtype=np.int64)
        self._solver_values: F32 = np.zeros(0, dtype=np.float32)
        self._bag_tokens: list[I64] = []
        self._bag_weights: list[F32] = []
        self._bag_entries = 0
        self._paired = 0  # bags whose pairs are in keys/values
        self._lock = threading.Lock()

    def add(self, token_ids: Sequence[Sequence[int]], targets: F32) -> None:
        """Count texts (as token ids) with their target vectors.

        Raises:
            ValueError: ``targets`` is not one finite row of width ``dim`` per text.
        """
        targets = np.asarray(targets, dtype=np.float32)
        if targets.shape != (len(token_ids), self.dim) or not np.isfinite(targets).all():
            raise ValueError(
                f"expected {len(token_ids)} finite target rows of width {self.dim}, "
                f"got shape {targets.shape}"
            )
        with self._lock:
            for ids, target in zip(token_ids, targets, strict=True):
                if len(ids):
                    self._add_one(np.asarray(ids, dtype=np.int64), target)

    def _add_one(self, ids: I64, target: F32) -> None:
        tokens, counts = np.unique(ids, return_counts=True)
        weights = (counts / counts.sum()).astype(np.float32)
        slots = self._slots(tokens)
        self.rows[slots] += weights[:, None] * target[None, :]
        # G's pairs (~60^2 / 2 a text) are formed only when they are needed (``_merge``: a
        # save or a fold); learning keeps the bag alone, which is all a fit multiplies by.
        self._bag_tokens.append(tokens)
        self._bag_weights.append(weights)
        self._bag_entries += len(tokens)
        self.texts += 1
        if self._bag_entries > MAX_BAG_ENTRIES:
            self._fold()

    def _fold(self) -> None:
        """The bags become pairs of the solver's ``G`` (slower to multiply, bounded)."""
        self._merge()
        self._solver_keys, self._solver_values = self.keys, self.values
        self._bag_tokens, self._bag_weights, self._bag_entries = [], [], 0
        self._paired = 0

    def _slots(self, tokens: I64) -> npt.NDArray[np.int32]:
        new = tokens[self.slot_of[tokens] < 0]
        if new.size:
            self.slot_of[new] = np.arange(len(self.tokens), len(self.tokens) + new.size)
            self.tokens.extend(new.tolist())
            if len(self.tokens) > len(self._row_buffer):
                # Doubling: growing by each text's new tokens copied B ~1,100 times for
                # BFCL's tools (0.46 s of a first engine's learning).
                grown = np.zeros((2 * len(self.tokens), self.dim), dtype=np.float32)
                grown[: len(self.rows)] = self.rows
                self._row_buffer = grown
            self.rows = self._row_buffer[: len(self.tokens)]
        return self.slot_of[tokens]

    def _merge(self) -> None:
        """Add the pairs of every bag not yet paired into ``keys``/``values``, merging each
        time ``_MERGE_AT`` entries wait (bounds the temporaries)."""
        for tokens, weights in zip(
            self._bag_tokens[self._paired :], self._bag_weights[self._paired :], strict=True
        ):
            upper = np.triu_indices(len(tokens))
            self._pending_keys.append(tokens[upper[0]] * self.vocab_size + tokens[upper[1]])
            self._pending_values.append(weights[upper[0]] * weights[upper[1]])
            self._pending += len(upper[0])
            if self._pending >= _MERGE_AT:
                self._merge_pending()
        self._paired = len(self._bag_tokens)
        self._merge_pending()

    def _merge_pending(self) -> None:
        if not self._pending:
            return
        keys = np.concatenate([self.keys, *self._pending_keys])
        values = np.concatenate([self.values, *self._pending_values])
        self._pending_keys, self._pending_values, self._pending = [], [], 0
        self.keys, inverse = np.unique(keys, return_inverse=True)
        self.values = np.bincount(inverse, weights=values).astype(np.float32)
        if self.keys.size > self.max_pairs:
            diagonal = self.keys // self.vocab_size == self.keys % self.vocab_size
            strength = np.where(diagonal, np.inf, self.values)
            keep = np.sort(np.argpartition(-strength, self.max_pairs - 1)[: self.max_pairs])
            self.keys, self.values = self.keys[keep], self.values[keep]

    def snapshot(self) -> tuple[I64, F32, npt.NDArray[np.int64], F32, int]:
        """``(keys, values, tokens, rows, texts)``: copies, safe to use without the lock."""
        with self._lock:
            self._merge()
            return (
                self.keys.copy(),
                self.values.copy(),
                np.asarray(self.tokens, dtype=np.int64),
                self.rows.copy(),
                self.texts,
            )

    def system(self) -> RidgeSystem:
        """The statistics as ``solve`` reads them: copies, safe to use without the lock."""
        with self._lock:
            lengths = [len(bag) for bag in self._bag_tokens]
            return RidgeSystem(
                keys=self._solver_keys.copy(),
                values=self._solver_values.copy(),
                bag_starts=np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]),
                bag_tokens=np.concatenate([np.zeros(0, np.int64), *self._bag_tokens]),
                bag_weights=np.concatenate([np.zeros(0, np.float32), *self._bag_weights]),
                tokens=np.asarray(self.tokens, dtype=np.int64),
                rows=self.rows.copy(),
            )

    @classmethod
    def restore(
        cls,
        vocab_size: int,
        keys: I64,
        values: F32,
        tokens: npt.NDArray[np.int64],
        rows: F32,
        texts: int,
        *,
        max_pairs: int = 4_000_000,
    ) -> RidgeStats:
        """Statistics saved with ``snapshot``.

        Raises:
            ValueError: the arrays do not fit together or the vocabulary.
        """
        stats = cls(vocab_size, int(rows.shape[1]), max_pairs=max_pairs)
        if (
            keys.shape != values.shape
            or rows.shape[0] != tokens.shape[0]
            or (keys.size and (keys.min() < 0 or keys.max() >= vocab_size * vocab_size))
            or (tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size))
        ):
            raise ValueError("saved ridge statistics are inconsistent")
        stats.keys, stats.values = keys.astype(np.int64), values.astype(np.float32)
        stats._solver_keys, stats._solver_values = stats.keys, stats.values
        stats.tokens = tokens.tolist()
        stats.slot_of[tokens] = np.arange(tokens.size, dtype=np.int32)
        stats.rows = stats._row_buffer = rows.astype(np.float32)
        stats.texts = texts
        return stats


class StartRows(Protocol):
    """The starting table ``W0``, read by rows (``start[tokens]``): an array, or one mapped
    when read (``table.MappedRows``)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def __getitem__(self, tokens: I64, /) -> F32: ...


def solve(
    stats: RidgeSystem | tuple[I64, F32, I64, F32, int],
    start: StartRows,
    *,
    vocab_size: int,
    ridge: float,
    iterations: int = 40,
    tolerance: float = 1e-4,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[npt.NDArray[np.int64], F32]:
    """The fitted rows of every token seen: ``(tokens, rows)``; others keep ``start``.

    Args:
        stats: a ``RidgeStats.system()`` (or a ``snapshot()``, all of whose ``G`` is pairs).
        start: the starting table ``W0``, one row per token id.
        ridge: the pull towards ``start`` (larger: closer to it).
        iterations: most conjugate-gradient steps (each is one sparse product).
        tolerance: stop when every column's residual fell by this factor.
        should_stop: asked before every step; true stops the solve.

    Raises:
        Stopped: ``should_stop`` said so (nothing is returned half-solved).
    """
    system = stats if isinstance(stats, RidgeSystem) else RidgeSystem.from_snapshot(stats)
    tokens, rows = system.tokens, system.rows
    if tokens.size == 0:
        return tokens, np.zeros((0, start.shape[1]), dtype=np.float32)
    slot_of = np.full(vocab_size, -1, dtype=np.int64)
    slot_of[tokens] = np.arange(tokens.size)
    # Pairs whose tokens are both seen (always true unless a snapshot was edited).
    a, b = slot_of[system.keys // vocab_size], slot_of[system.keys % vocab_size]
    known = (a >= 0) & (b >= 0)
    check = _Checkpoint(should_stop)
    pairs = _SymmetricProduct(a[known], b[known], system.values[known], tokens.size, check)
    bags = _BagProduct(system.bag_starts, slot_of[system.bag_tokens], system.bag_weights,
                       tokens.size, check)  # fmt: skip
    diagonal = pairs.diagonal + bags.diagonal + ridge
    base = start[tokens].astype(np.float32)
    rhs = rows + np.float32(ridge) * base

    def apply(x: F32) -> F32:
        return pairs(x) + bags(x) + np.float32(ridge) * x

    # Preconditioned conjugate gradients, one independent system per column at once.
    x = base.copy()
    residual = rhs - apply(x)
    z = residual / diagonal[:, None]
    direction = z.copy()
    rz = np.einsum("ij,ij->j", residual, z)
    first = np.sqrt(np.einsum("ij,ij->j", residual, residual)).max()
    for _ in range(iterations):
        check()
        if first == 0 or np.sqrt(np.einsum("ij,ij->j", residual, residual)).max() <= (
            tolerance * first
        ):
            break
        moved = apply(direction)
        step = rz / np.maximum(np.einsum("ij,ij->j", direction, moved), 1e-30)
        x += step * direction
        residual -= step * moved
        z = residual / diagonal[:, None]
        rz_next = np.einsum("ij,ij->j", residual, z)
        direction = z + (rz_next / np.maximum(rz, 1e-30)) * direction
        rz = rz_next
    return tokens, x.astype(np.float32)


class _BagProduct:
    """``A^T (A x)`` for bags ``A`` (one row of token weights per text): ``G x`` without ``G``."""

    def __init__(
        self, starts: I64, slots: I64, weights: F32, size: int, check: _Checkpoint
    ) -> None:
        self.check = check
        self.bag_of = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
        self.starts, self.slots, self.weights = starts, slots, weights.astype(np.float32)
        self.texts = len(starts) - 1
        # A^T runs over the same entries sorted by token.
        self.by_slot = np.argsort(slots, kind="stable")
        self.diagonal = np.bincount(slots, weights=weights**2, minlength=size).astype(np.float32)
        self.size = size

    def __call__(self, x: F32) -> F32:
        out = np.zeros_like(x)
        if not self.slots.size:
            return out
        per_text = np.zeros((self.texts, x.shape[1]), dtype=np.float32)
        _add_runs(per_text, self.bag_of, self.weights, x, self.slots, self.check)
        order = self.by_slot
        _add_runs(
            out, self.slots[order], self.weights[order], per_text, self.bag_of[order], self.check
        )
        return out


class _Checkpoint:
    """Asks ``should_stop`` before every chunk of a product, not only between iterations:
    it is how a background solve stands aside for foreground requests (a chunk is well under
    a millisecond), and a step at the lowest priority on a loaded machine can take long."""

    def __init__(self, should_stop: Callable[[], bool] | None) -> None:
        self._should_stop = should_stop

    def __call__(self) -> None:
        if self._should_stop is not None and self._should_stop():
            raise Stopped("the ridge solve was stopped")


def _add_runs(
    out: F32, targets: I64, weights: F32, x: F32, sources: I64, check: _Checkpoint
) -> None:
    """``out[targets[e]] += weights[e] * x[sources[e]]`` for entries sorted by target."""
    for start in range(0, targets.size, _CHUNK):
        check()
        into = targets[start : start + _CHUNK]
        terms = weights[start : start + _CHUNK, None] * x[sources[start : start + _CHUNK]]
        firsts = np.flatnonzero(np.r_[True, into[1:] != into[:-1]])
        # Summed along contiguous memory: reduceat down axis 0 strides a whole row per add
        # (1.5-2x slower than the transposed copy).
        out[into[firsts]] += np.add.reduceat(np.ascontiguousarray(terms.T), firsts, axis=1).T


class _SymmetricProduct:
    """``G @ x`` for ``G`` given by its upper triangle, as sorted CSR rows."""

    def __init__(
        self,
        a: npt.NDArray[np.int64],
        b: npt.NDArray[np.int64],
        values: F32,
        size: int,
        check: _Checkpoint,
    ) -> None:
        self.check = check
        off = a != b
        rows = np.concatenate([a, b[off]])
        cols = np.concatenate([b, a[off]])
        vals = np.concatenate([values, values[off]]).astype(np.float32)
        order = np.argsort(rows, kind="stable")
        self.rows, self.cols, self.vals = rows[order], cols[order], vals[order]
        self.size = size
        self.diagonal = np.bincount(a[~off], weights=values[~off], minlength=size).astype(
            np.float32
        )

    def __call__(self, x: F32) -> F32:
        out = np.zeros_like(x)
        _add_runs(out, self.rows, self.vals, x, self.cols, self.check)
        return out


class SpaceMap:
    """A linear map from the starting table's space into the targets' space, fitted on text
    means: ``mean(start rows of a text) @ M ≈ target``. Its statistics are two ``dim x dim``
    sums. Starting the per-token fit from ``start @ M`` moves the rows of tokens no text has
    shown yet into the targets' space too (held-out dev requests: MetaTool hit@5 0.409 ->
    0.461 before any traffic, BFCL 0.781 -> 0.779)."""

    def __init__(self, dim: int) -> None:
        self.xtx = np.zeros((dim, dim), dtype=np.float64)
        self.xty = np.zeros((dim, dim), dtype=np.float64)
        self._lock = threading.Lock()

    def add(self, features: F32, targets: F32) -> None:
        features64, targets64 = features.astype(np.float64), targets.astype(np.float64)
        with self._lock:
            self.xtx += features64.T @ features64
            self.xty += features64.T @ targets64

    def snapshot(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        with self._lock:
            return self.xtx.copy(), self.xty.copy()

    @classmethod
    def restore(cls, xtx: npt.NDArray[np.float64], xty: npt.NDArray[np.float64]) -> SpaceMap:
        """Statistics saved with ``snapshot``.

        Raises:
            ValueError: the arrays are not two finite square matrices of one size.
        """
        if xtx.ndim != 2 or xtx.shape[0] != xtx.shape[1] or xtx.shape != xty.shape:
            raise ValueError("saved map statistics are inconsistent")
        if not (np.isfinite(xtx).all() and np.isfinite(xty).all()):
            raise ValueError("saved map statistics are not finite")
        space = cls(int(xtx.shape[0]))
        space.xtx, space.xty = xtx.astype(np.float64), xty.astype(np.float64)
        return space

    def mapping(self, ridge: float) -> F32 | None:
        """The map ``M`` (``None`` before any text was added: rows stay as they are)."""
        xtx, xty = self.snapshot()
        if not xtx.any():
            return None
        mapping: F32 = np.linalg.solve(xtx + ridge * np.eye(len(xtx)), xty).astype(np.float32)
        return mapping
