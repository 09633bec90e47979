"""Recall: a request's ranking from the current snapshot, its embedding under a deadline.

A request's vector comes down a ladder (query cache, full tier, fast tier, keyword-only);
which rung, strategy, outcome and reason is decided by the pure functions of
``_core.recall.plan``. This shell only carries the plan out: it awaits the query batcher
(concurrent requests share one model call) under ``deadlines.embed_s``, calls the fast tier,
counts and publishes. Scoring a large catalogue runs off the event loop.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs
import numpy as np
import numpy.typing as npt
import trio

from .._core.events import Event, FailOpen
from .._core.recall.cascade import fast_ranking_stands
from .._core.recall.index import RecallIndex, brief, checked_query_vectors
from .._core.recall.parts import request_vectors
from .._core.recall.plan import (
    Rung,
    Step,
    after_fast_tier_failed,
    after_full_tier,
    fast_tier_answered,
    first_rung,
    full_tier_failed,
    full_tier_missed,
    full_tier_too_slow,
)
from .._core.select.plan import (
    RequestVector,
    chosen_strategy,
    default_strategy,
    needs_request_vector,
)
from .._core.select.selection import Ranking, Strategy
from .batcher import ModelTooSlow, QueryBatcher, ewma
from .fast_batch import FastTierBatch
from .fast_tier_service import FastTierService
from .query_cache import QueryCache
from .workers import WorkerCalls

if TYPE_CHECKING:
    from ..providers import Embedder

Vectors = npt.NDArray[np.float32]

#: Share of the embed deadline a request may be predicted to wait for the full model before
#: the fast tier answers (``load.budget_s`` unset): the prediction counts model time only,
#: and under a burst scoring and the event loop take their share of the deadline too
#: (at 1.0, MetaTool bursts of 200 saw the last requests sent to the model miss it).
DEFAULT_BUDGET_SHARE = 0.5

#: Catalogues at least this large are scored in a worker thread (about 1 ms of numpy work
#: per request at this size; below it the thread hop costs more than it saves).
SCORE_IN_THREAD_FROM = 20_000

#: Weight of the newest request in the loop time per request (an EWMA, as the batcher's).
_LOOP_EWMA_WEIGHT = 0.2

#: When the running request's vector arrived (``trio.current_time()``): what it does on the
#: event loop from then on is the loop time ``Recall.finished`` measures.
_VECTOR_ARRIVED: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "vector_arrived", default=None
)


class LoopTime:
    """Event-loop seconds a request takes once its vector is in hand (scoring, the policy,
    its event): an EWMA over finished requests. Requests queued for the model get their
    vectors in order, often together, so each one's wait for the model leaves room for the
    ones ahead of it to be scored before its deadline (its own scoring comes after, as for a
    lone caller, whose wait is the whole deadline)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def measured(self, seconds: float) -> None:
        self.seconds = ewma(self.seconds, seconds, _LOOP_EWMA_WEIGHT)

    def model_wait(self, deadline_s: float, ahead: int) -> float:
        """How long a request with ``ahead`` requests before it in the model's queue may
        wait for its vector so that they are scored by ``deadline_s``."""
        return max(0.0, deadline_s - self.seconds * ahead)


def request_batch(embedder: Embedder) -> int:
    """Requests per model call: the embedder's ``query_batch`` when it names one, else its
    ``max_batch``. A model on the CPU gains little from a batch, and every request in one
    waits for the longest: a batch of 15 of a burst's requests missed the deadline together
    where batches of 2 answered 10-12 of them in time (``tests/bench/bench_burst.py``)."""
    return max(1, int(getattr(embedder, "query_batch", 0) or embedder.max_batch))


class _Embeds(Protocol):
    def embed(self, texts: Sequence[str]) -> Vectors: ...


def query_vectors(embedder: _Embeds, queries: Sequence[str], dim: int) -> Vectors:
    """Request vectors, checked: one row per request, width ``dim``, finite, non-zero; a
    request longer than the model reads is embedded by parts (``request_vectors``).

    Raises:
        ValueError: the embedder answered something else (the request degrades).
        Exception: whatever the embedder raised.
    """
    return checked_query_vectors(request_vectors(embedder, queries), len(queries), dim)


@attrs.frozen(kw_only=True)
class RecallStatistics:
    """How recall answered so far (``Engine.statistics``).

    Attributes:
        query_cache_hits: request vectors served from the query cache (no model call).
        query_cache_misses: lookups that missed it.
        full_tier: requests answered with a fresh full-model vector.
        fast_tier: requests answered from the fast tier (``degraded``).
        fast_tier_sure: requests whose fast-tier ranking was sure enough to stand without
            the full model (``load.cascade``; ``applied``, not degraded).
        keyword_only: requests that needed a vector and got keyword-only recall.
        fast_tier_open: whether the fast tier is built (it may still need traffic to answer).
        fast_tier_ready: whether the fast tier may answer now.
        fast_tier_served: served requests the fast tier's table was fitted on.
    """

    query_cache_hits: int
    query_cache_misses: int
    full_tier: int
    fast_tier: int
    keyword_only: int
    fast_tier_sure: int
    fast_tier_open: bool
    fast_tier_ready: bool
    fast_tier_served: int

    @property
    def query_cache_hit_rate(self) -> float:
        """Hits over lookups (0.0 before any)."""
        lookups = self.query_cache_hits + self.query_cache_misses
        return self.query_cache_hits / lookups if lookups else 0.0


class Recall:
    """Ranks requests against a snapshot's index; ``run`` is the query batcher service.

    Args:
        embedder: the engine's embedder; ``None`` for keyword-only recall.
        embed_deadline_s: how long a request may wait for its embedding.
        workers: where model and scoring work runs.
        cpu: the limiter that work shares with the catalogue keeper.
        publish: the event hub's ``publish``.
        query_cache: how many request vectors to remember (0: none).
        fast_tier: the fast tier service, if the embedder has one.
        budget_s: predicted wait past which the fast tier answers at once (default: half the
            embed deadline, ``DEFAULT_BUDGET_SHARE``).
        learned: the index with the learning service's evidence (``Learning.applied``).
        cascade: let a fast-tier ranking that is sure enough stand without the full model
            (``fast_ranking_stands``; catalogues scored on the loop only).
        correct_spelling: rank a request with its misspelled words corrected
            (``RecallIndex.spelled``).
    """

    def __init__(
        self,
        embedder: Embedder | None,
        *,
        embed_deadline_s: float,
        workers: WorkerCalls,
        cpu: trio.CapacityLimiter,
        publish: Callable[[Event], None],
        query_cache: int = 0,
        fast_tier: FastTierService | None = None,
        budget_s: float | None = None,
        learned: Callable[[RecallIndex], RecallIndex] | None = None,
        cascade: bool = False,
        correct_spelling: bool = True,
    ) -> None:
        self._embedder = embedder
        self._spelling = correct_spelling
        self._cascade = cascade
        self._learned = learned
        self._deadline = embed_deadline_s
        self._budget = embed_deadline_s * DEFAULT_BUDGET_SHARE if budget_s is None else budget_s
        self._cache = QueryCache(query_cache)
        self._fast = fast_tier
        self._answers = {"full": 0, "fast": 0, "sure": 0, "keyword": 0}
        self._workers = workers
        self._cpu = cpu
        self._publish = publish
        self._dim = 0  # the tool vectors' width, from the index being served
        self._batcher: QueryBatcher | None = None
        self.loop_time = LoopTime()
        self._fast_batch = FastTierBatch()
        if embedder is not None:
            self._batcher = QueryBatcher(
                self._embed_batch,
                workers.run,
                max_batch=request_batch(embedder),
                limiter=cpu,
            )

    @property
    def batcher(self) -> QueryBatcher | None:
        """The query batcher service (``None`` without an embedder)."""
        return self._batcher

    @property
    def fast_tier(self) -> FastTierService | None:
        return self._fast

    def statistics(self) -> RecallStatistics:
        """Counts of how requests were answered so far."""
        return RecallStatistics(
            query_cache_hits=self._cache.hits,
            query_cache_misses=self._cache.misses,
            full_tier=self._answers["full"],
            fast_tier=self._answers["fast"],
            keyword_only=self._answers["keyword"],
            fast_tier_sure=self._answers["sure"],
            fast_tier_open=self._fast is not None and self._fast.is_open,
            fast_tier_ready=self._fast is not None and self._fast.usable is not None,
            fast_tier_served=self._fast.served if self._fast is not None else 0,
        )

    @property
    def has_embedder(self) -> bool:
        return self._embedder is not None

    @property
    def default_strategy(self) -> Strategy:
        return default_strategy(has_embedder=self._embedder is not None)

    def _embed_batch(self) -> Callable[[Sequence[str]], Vectors]:
        assert self._embedder is not None
        return functools.partial(query_vectors, self._embedder, dim=self._dim)

    async def rank(
        self,
        index: RecallIndex,
        query: str,
        k: int,
        strategy: Strategy | str | None,
        *,
        warming: bool,
        checkpoint: bool = True,
    ) -> Ranking:
        """The ``k`` best tools of ``index`` for ``query``; keyword-only (``degraded``, with
        the reason) while ``warming``, when the index has no vectors, or when the request's
        embedding fails or misses its deadline. ``checkpoint=False``: the caller has yielded
        already (the step actor, whose caller is parked), so a keyword-only rank may finish
        without another pass of the scheduler.

        Raises:
            ConfigError: an unknown strategy (before any model call).
        """
        # A checkpoint even when nothing below awaits (keyword-only on a small catalogue):
        # the caller's cancel scope can end the call, and a loop of selects lets others run.
        if checkpoint:
            await trio.lowlevel.checkpoint()
        _VECTOR_ARRIVED.set(None)  # nothing of an earlier request that failed is measured
        chosen = chosen_strategy(strategy, has_embedder=self._embedder is not None, strict=False)
        if self._learned is not None:
            index = self._learned(index)
        if self._spelling:
            query = index.spelled(query)
        vector: Vectors | None = None
        cosines: Vectors | None = None
        reason = index.degraded_reason or ("warming up" if warming else "")
        wanted = needs_request_vector(query, chosen, tool_vectors=index.vectors_verdict)
        if wanted and index.vectors is not None and self._batcher:
            assert self._embedder is not None
            self._dim = index.vectors.dim
            owner = (str(self._embedder.identity), self._dim)
            cached = self._cache.get(query, owner)
            step = self._first_step(cached is not None)
            # The cascade, for a request that would wait for the model: under load the fast
            # tier answers anyway (``step``), ranked once, with its own weights.
            if step.rung is Rung.FULL_TIER and chosen is Strategy.COMBINED:
                standing = self._sure_fast_ranking(index, query, k)
                if standing is not None:
                    return standing
            vector, reason, cosines = await self._embed_query(index, query, cached, owner, step)
            _VECTOR_ARRIVED.set(trio.current_time())
        # The rung's answer as the planner reads it: no vector, the full tier's, or a step
        # down (a fast-tier vector ranks like any other, but the answer is degraded).
        if vector is None:
            request = RequestVector.missing(reason)
        elif reason:
            request = RequestVector.stepped_down(vector, reason, cosines)
        else:
            request = RequestVector.full(vector)
        if len(index.catalog) < SCORE_IN_THREAD_FROM:
            return index.ranked(query, request, k, chosen)
        # Scoring a large catalogue takes milliseconds: off the event loop.
        return await self._workers.run(index.ranked, query, request, k, chosen, limiter=self._cpu)

    def finished(self) -> None:
        """The running request is done with the event loop: measure its loop time (if it
        needed a vector) for the model waits of the requests after it."""
        arrived = _VECTOR_ARRIVED.get()
        if arrived is not None:
            _VECTOR_ARRIVED.set(None)
            # A request that held the loop longer than the deadline says nothing more about
            # the next ones (a paused process, a huge request): at most one deadline counts.
            spent = min(trio.current_time() - arrived, self._deadline)
            self.loop_time.measured(spent)

    def _sure_fast_ranking(self, index: RecallIndex, query: str, k: int) -> Ranking | None:
        """The cascade: the fast tier's ranking when it is sure enough to stand, else
        ``None`` (the full model reads the request, as without the cascade)."""
        tier = self._fast.usable if self._cascade and self._fast is not None else None
        if tier is None or len(index.catalog) >= SCORE_IN_THREAD_FROM:
            return None
        try:
            vector = query_vectors(tier, [query], self._dim)[0]
        except Exception:  # an optimisation only: the full model answers
            return None
        ranking = index.ranked(query, RequestVector.sure(vector), k, Strategy.COMBINED)
        if not fast_ranking_stands(ranking.scores):
            return None
        self._answers["sure"] += 1
        return ranking

    def _first_step(self, cached: bool) -> Step:
        """The rung a request tries first (``first_rung``), from the batcher's load now."""
        assert self._batcher is not None
        load = self._batcher.load
        return first_rung(
            cached=cached,
            outstanding=load.outstanding,
            predicted_wait_s=load.predicted_wait(),
            budget_s=self._budget,
            fast_tier_ready=self._fast_tier_usable(),
            first_wave=self._batcher.max_batch,
        )

    async def _embed_query(
        self,
        index: RecallIndex,
        query: str,
        cached: Vectors | None,
        owner: tuple[str, int],
        step: Step,
    ) -> tuple[Vectors | None, str, Vectors | None]:
        """The request's vector, why when it is not the full tier's (the rung taken), and
        its cosines with ``index``'s tools when a burst's fast-tier answers were scored
        together."""
        assert self._batcher is not None
        load = self._batcher.load
        if step.rung is Rung.QUERY_CACHE:
            self._answers["full"] += 1
            return cached, "", None
        if step.rung is Rung.FAST_TIER:
            return await self._from_fast_tier(index, query, step.reason)
        # Past this wait the request, and those queued before it, could not be scored in time.
        wait = self.loop_time.model_wait(self._deadline, load.outstanding)
        failure = full_tier_missed(self._deadline, wait)
        with trio.move_on_after(wait):
            try:
                vector = await self._batcher.embed(query, give_up_at=trio.current_time() + wait)
            except ModelTooSlow:  # left the queue before its deadline, not at it
                failure = full_tier_too_slow(self._deadline)
            except Exception as exc:  # the request degrades; it never raises
                failure = full_tier_failed(brief(exc))
            else:
                self._answers["full"] += 1
                self._cache.put(query, vector, owner)
                if self._fast is not None:
                    self._fast.offer(query, vector)
                return vector, "", None
        self._publish(FailOpen(operation="select", what_failed="embedder", reason=failure))
        step = after_full_tier(failure, fast_tier_ready=self._fast_tier_usable())
        if step.rung is Rung.FAST_TIER:
            return await self._from_fast_tier(index, query, step.reason)
        self._answers["keyword"] += 1
        return None, step.reason, None

    def _fast_tier_usable(self) -> bool:
        return self._fast is not None and self._fast.usable is not None

    async def _from_fast_tier(
        self, index: RecallIndex, query: str, why: str
    ) -> tuple[Vectors | None, str, Vectors | None]:
        """The fast tier's vector at once (on the event loop: a burst's answers of one
        scheduler pass embedded and scored together, ``FastTierBatch``); keyword-only if it
        fails."""
        assert self._fast is not None
        tier = self._fast.usable
        cosines: Vectors | None = None
        try:
            assert tier is not None
            if len(index.catalog) < SCORE_IN_THREAD_FROM:
                vector, cosines = await self._fast_batch.answer(tier, index, query, self._dim)
            else:  # scored off the loop, one request at a time
                vector = query_vectors(tier, [query], self._dim)[0]
        except Exception as exc:  # the last rung: keyword-only
            step = after_fast_tier_failed(brief(exc), why)
            self._publish(FailOpen(operation="select", what_failed="fast tier", reason=step.reason))
            self._answers["keyword"] += 1
            return None, step.reason, None
        self._answers["fast"] += 1
        return vector, fast_tier_answered(why), cosines
