"""The fast tier as an engine service: built after warm-up, then fitted to served traffic.

The tier is opened in a worker thread once the catalogue's tool vectors exist (a first build
distils the model: ~20-90 s on two cores; afterwards ~0.3 s from the cache). Until it is
open, and until its table was fitted on at least ``load.min_served`` requests the full tier
answered, recall does not use it: before that it ranks below keyword-only on paraphrased
requests (README, Under load).

Every request the full tier answers is a free training pair. Pairs wait in memory (at most
``load.learn_buffer``; the oldest go first) and are learned and refitted in a worker thread;
the old table keeps serving meanwhile. Fits get rarer as the tier learns (the gap doubles
with what it has learned, from ``load.refit_every``), so a busy server does not spend a core
refitting. Only statistics reach the disk, never request text.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt
import trio

from .._core.config import LoadConfig
from .._core.events import Event, FailOpen
from .._core.recall.index import RecallIndex, brief
from .workers import EngineClosing, WorkerCalls

Vectors = npt.NDArray[np.float32]


class FastTierModel(Protocol):
    """What the service needs of a fast tier (``toolroute.providers`` ``FastTier``)."""

    @property
    def served_texts(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...

    def learn(self, texts: Sequence[str], vectors: Vectors) -> None: ...

    def learn_tools(self, texts: Sequence[str], vectors: Vectors) -> None: ...

    def refit(self) -> None: ...

    def save(self) -> None: ...


#: ``opener(index, should_stop)``: the fast tier for ``index``'s tool vectors (worker thread).
Opener = Callable[[RecallIndex, Callable[[], bool]], FastTierModel]


class FastTierService:
    """Holds the engine's fast tier; ``run`` builds it and keeps it learning.

    Args:
        opener: builds or loads the tier (runs in a worker thread).
        config: the engine's ``load`` section.
        workers: where the build and the fits run.
        publish: the event hub's ``publish``.
    """

    def __init__(
        self,
        opener: Opener,
        *,
        config: LoadConfig,
        workers: WorkerCalls,
        publish: Callable[[Event], None],
    ) -> None:
        self._opener = opener
        self._config = config
        self._workers = workers
        self._publish = publish
        self._tier: FastTierModel | None = None
        self._fitted_served = 0  # served requests the table in use was fitted on
        self._pairs: collections.deque[tuple[str, Vectors]] = collections.deque(
            maxlen=config.learn_buffer
        )
        self._learned_since_fit = 0
        self._wanted = trio.Event()
        self._limiter = trio.CapacityLimiter(1)  # background work: one thread at most
        self.failure = ""

    @property
    def usable(self) -> FastTierModel | None:
        """The tier, once open and fitted on at least ``min_served`` served requests."""
        if self._tier is None or self._fitted_served < self._config.min_served:
            return None
        return self._tier

    @property
    def served(self) -> int:
        """Served requests the table in use was fitted on."""
        return self._fitted_served

    @property
    def is_open(self) -> bool:
        return self._tier is not None

    def offer(self, text: str, vector: Vectors) -> None:
        """One request the full tier answered, to learn from (dropped if learning is off)."""
        if not self._config.learn or self._tier is None:
            return
        # A copy: the row is a view into its batch's matrix, which it would keep alive.
        self._pairs.append((text, np.array(vector, dtype=np.float32)))
        due = max(1, self._next_fit_gap() - self._learned_since_fit)
        if len(self._pairs) >= min(due, self._config.learn_buffer):
            self._wanted.set()

    async def run(self, index_of: Callable[[], RecallIndex], ready: Callable[[], object]) -> None:
        """Open the tier once the catalogue is embedded, then learn until cancelled.

        **Fail-open:** a failed build publishes ``fail_open`` (``fast tier``) and leaves recall
        with its other rungs; a failed fit keeps the old table. Nothing raises.
        """
        await ready()  # type: ignore[misc]
        index = index_of()
        if index.vectors is None:
            return  # the catalogue has no vectors to compare with: no fast tier
        try:
            self._tier = await self._workers.run(
                self._opener, index, lambda: self._workers.closing, limiter=self._limiter
            )
        except EngineClosing:
            return
        except Exception as exc:
            self._fail("open_engine", f"the fast tier could not be built: {brief(exc)}")
            return
        self._fitted_served = self._tier.served_texts
        await self._learn_forever(index_of)

    async def _learn_forever(self, index_of: Callable[[], RecallIndex]) -> None:
        assert self._tier is not None
        tier, known = self._tier, index_of()
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            pairs = list(self._pairs)
            self._pairs.clear()
            index = index_of()
            new_tools = index if index is not known and index.vectors is not None else None
            self._learned_since_fit += len(pairs)
            refit = new_tools is not None or self._learned_since_fit >= self._next_fit_gap()
            try:
                await self._workers.run(
                    self._fit, tier, pairs, new_tools, refit, limiter=self._limiter
                )
            except EngineClosing:
                return
            except Exception as exc:
                self._fail("select", f"the fast tier's fit failed (old table kept): {brief(exc)}")
                continue
            known = index
            if refit:
                self._learned_since_fit = 0
                self._fitted_served = tier.served_texts

    @staticmethod
    def _fit(
        tier: FastTierModel,
        pairs: list[tuple[str, Vectors]],
        index: RecallIndex | None,
        refit: bool,
    ) -> None:
        """In a worker thread: learn (milliseconds), then refit and persist when due."""
        if index is not None and index.vectors is not None:
            tier.learn_tools(index.embedding_texts(), index.vectors.matrix)
        if pairs:
            tier.learn([text for text, _ in pairs], np.stack([v for _, v in pairs]))
        if refit:
            tier.refit()
            tier.save()

    def _next_fit_gap(self) -> int:
        return max(self._config.refit_every, self._fitted_served)

    def _fail(self, operation: str, reason: str) -> None:
        self.failure = reason
        self._publish(FailOpen(operation=operation, what_failed="fast tier", reason=reason))
