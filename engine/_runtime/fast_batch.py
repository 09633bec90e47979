"""A burst's fast-tier answers, embedded and scored together.

Under a burst most requests are answered by the fast tier at once, one after another on the
event loop: each one tokenised alone and scored against every tool alone (a matrix-vector
product), ~1 ms of loop each, 200 of them in one scheduler pass. Here the requests of one
pass join one batch: the first to arrive leads, yields once so that the others of its pass
join, then embeds them in one tokeniser call and scores them in one matrix product; each
request goes on with its own row (keyword evidence, fusion and the policy stay its own).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt
import trio

from .._core.protocols import FastTierModel
from .._core.recall.index import RecallIndex, checked_query_vectors

Vectors = npt.NDArray[np.float32]


@attrs.define(eq=False)
class _Ask:
    query: str
    index: RecallIndex
    done: trio.Event = attrs.field(factory=trio.Event)
    vector: Vectors | None = None
    cosines: Vectors | None = None
    error: Exception | None = None


class FastTierBatch:
    """Collects the fast-tier answers of one scheduler pass (see the module docstring)."""

    def __init__(self) -> None:
        self._waiting: list[_Ask] = []

    async def answer(
        self, tier: FastTierModel, index: RecallIndex, query: str, dim: int
    ) -> tuple[Vectors, Vectors]:
        """``query``'s fast-tier vector and its cosine with every tool of ``index``.

        Raises:
            Exception: whatever the fast tier raised, or ``ValueError`` for a vector of
                the wrong shape (the caller degrades, as for a lone answer).

        **Cancellation:** the leader finishes the batch whatever happens (it yields once,
        shielded); a waiter cancelled meanwhile just does not read its answer.
        """
        ask = _Ask(query, index)
        self._waiting.append(ask)
        if len(self._waiting) == 1:
            await trio.lowlevel.cancel_shielded_checkpoint()  # the rest of this pass joins
            batch, self._waiting = self._waiting, []
            _answer_all(tier, batch, dim)
        else:
            await ask.done.wait()
        if ask.error is not None:
            raise ask.error
        if ask.vector is None or ask.cosines is None:
            raise RuntimeError("the fast tier's batch ended without an answer")
        return ask.vector, ask.cosines


def _answer_all(tier: FastTierModel, batch: Sequence[_Ask], dim: int) -> None:
    """Every ask answered (a vector and cosines, or the error), and every ask woken."""
    try:
        vectors = checked_query_vectors(tier.embed([a.query for a in batch]), len(batch), dim)
        # One product per index the batch ranks on (one, but for a snapshot swapped mid-pass).
        for index in {id(a.index): a.index for a in batch}.values():
            rows = [i for i, a in enumerate(batch) if a.index is index]
            assert index.vectors is not None
            cosines = index.vectors.scores_many(vectors[rows])
            for row, scores in zip(rows, cosines, strict=True):
                batch[row].vector, batch[row].cosines = vectors[row], scores
    except Exception as exc:  # every request of the batch degrades on its own
        for ask in batch:
            ask.error = exc
    finally:
        for ask in batch:
            ask.done.set()
