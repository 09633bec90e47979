"""Recall: a request's ranking from the current snapshot, its embedding under a deadline.

The request's embedding goes through the query batcher (concurrent requests share one model
call) and is abandoned at ``deadlines.embed_s``: recall then answers keyword-only, marked
``degraded`` with the reason. Scoring a large catalogue runs off the event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import trio

from .._core.events import Event, FailOpen
from .._core.index import Strategy, brief
from .._core.selection import Ranking
from .batcher import QueryBatcher
from .tool_index import ToolIndex
from .workers import WorkerCalls

if TYPE_CHECKING:
    from ..providers import Embedder

Vectors = npt.NDArray[np.float32]

#: Catalogues at least this large are scored in a worker thread (about 1 ms of numpy work
#: per request at this size; below it the thread hop costs more than it saves).
SCORE_IN_THREAD_FROM = 20_000


def query_vectors(embedder: Embedder, queries: Sequence[str], dim: int) -> Vectors:
    """Request vectors, checked: one row per request, width ``dim``, finite, non-zero.

    Raises:
        ValueError: the embedder answered something else (the request degrades).
        Exception: whatever the embedder raised.
    """
    vectors = np.asarray(embedder.embed(list(queries)), dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(queries):
        raise ValueError(f"embedder returned shape {vectors.shape}, expected ({len(queries)}, dim)")
    if vectors.shape[1] != dim:
        raise ValueError(
            f"embedder returned vectors of width {vectors.shape[1]}, "
            f"the tool vectors have width {dim}"
        )
    if not np.isfinite(vectors).all():
        raise ValueError("embedder returned NaN or infinite values")
    if not np.abs(vectors).sum(axis=1).all():
        raise ValueError("embedder returned a zero vector (no evidence) for the query")
    return vectors


class Recall:
    """Ranks requests against a snapshot's index; ``run`` is the query batcher service.

    Args:
        embedder: the engine's embedder; ``None`` for keyword-only recall.
        embed_deadline_s: how long a request may wait for its embedding.
        workers: where model and scoring work runs.
        cpu: the limiter that work shares with the catalogue keeper.
        publish: the event hub's ``publish``.
    """

    def __init__(
        self,
        embedder: Embedder | None,
        *,
        embed_deadline_s: float,
        workers: WorkerCalls,
        cpu: trio.CapacityLimiter,
        publish: Callable[[Event], None],
    ) -> None:
        self._embedder = embedder
        self._deadline = embed_deadline_s
        self._workers = workers
        self._cpu = cpu
        self._publish = publish
        self._dim = 0  # the tool vectors' width, from the index being served
        self._batcher: QueryBatcher | None = None
        if embedder is not None:
            self._batcher = QueryBatcher(
                self._embed_batch,
                workers.run,
                max_batch=max(1, int(embedder.max_batch)),
                limiter=cpu,
            )

    @property
    def batcher(self) -> QueryBatcher | None:
        """The query batcher service (``None`` without an embedder)."""
        return self._batcher

    @property
    def default_strategy(self) -> Strategy:
        return "combined" if self._embedder is not None else "keyword"

    def _embed_batch(self) -> Callable[[Sequence[str]], Vectors]:
        assert self._embedder is not None
        return functools.partial(query_vectors, self._embedder, dim=self._dim)

    async def rank(
        self, index: ToolIndex, query: str, k: int, strategy: Strategy | None, *, warming: bool
    ) -> Ranking:
        """The ``k`` best tools of ``index`` for ``query``; keyword-only (``degraded``, with
        the reason) while ``warming``, when the index has no vectors, or when the request's
        embedding fails or misses its deadline."""
        chosen = strategy or self.default_strategy
        vector: Vectors | None = None
        reason = index.degraded_reason or ("warming up" if warming else "")
        if chosen != "keyword" and index.vectors is not None and query.strip() and self._batcher:
            self._dim = index.vectors.dim
            vector, reason = await self._embed_query(query)
        if len(index.catalog) < SCORE_IN_THREAD_FROM:
            return index.rank(query, vector, k, strategy=chosen, reason=reason)
        # Scoring a large catalogue takes milliseconds: off the event loop, so other tasks run.
        ranked: Ranking = await self._workers.run(
            functools.partial(index.rank, strategy=chosen, reason=reason),
            query,
            vector,
            k,
            limiter=self._cpu,
        )
        return ranked

    async def _embed_query(self, query: str) -> tuple[Vectors | None, str]:
        assert self._batcher is not None
        reason = f"the request's embedding took longer than {self._deadline} s"
        with trio.move_on_after(self._deadline):
            try:
                return await self._batcher.embed(query), ""
            except Exception as exc:  # the request degrades to keyword-only; it never raises
                reason = f"embedder failed on the query: {brief(exc)}"
        self._publish(FailOpen(operation="select", what_failed="embedder", reason=reason))
        return None, reason
