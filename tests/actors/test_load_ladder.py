"""The load ladder in recall: query cache, full tier, fast tier, keyword-only.

Virtual time (``MockClock``) with CPU work inline: the scripted model takes ``delay`` seconds
of trio time per call, so predicted waits and deadlines are exact.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import numpy as np
import numpy.typing as npt
import pytest
import trio
import trio.testing

from toolroute import Catalog, EngineConfig, Outcome
from toolroute._core.config import Deadlines, LoadConfig, WarmupConfig
from toolroute._core.events import Event, FailOpen
from toolroute._core.recall.index import RecallIndex
from toolroute._core.select.plan import RequestVector
from toolroute._core.select.selection import Ranking, Strategy
from toolroute._runtime.engine import open_engine
from toolroute._runtime.fast_batch import FastTierBatch
from toolroute._runtime.fast_tier_service import FastTierService
from toolroute._runtime.recall import Recall
from toolroute._runtime.tool_index import ToolIndex
from toolroute._runtime.workers import WorkerCalls
from toolroute.testing import ScriptedEmbedder, inline_cpu

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Current weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a recipient"},
        {"name": "create_issue", "description": "Create an issue in the bug tracker"},
        {"name": "play_song", "description": "Play a song from the music library"},
        {"name": "book_flight", "description": "Book a flight ticket between two airports"},
    ]
)
QUERIES = [
    f"{verb} {thing} number {n}"
    for n in range(10)
    for verb, thing in [("weather", "city"), ("send", "email"), ("play", "song")]
]
BUDGET = 0.25


class ScriptedFastTier:
    """A fast tier with the scripted embedder's vectors (so it agrees with the full tier),
    counting what it learns; ``fail`` makes ``embed`` raise."""

    def __init__(self, served: int, dim: int = 64, *, fail: bool = False) -> None:
        self._served = served
        self._model = ScriptedEmbedder(dim=dim)
        self.fail = fail
        self.learned: list[str] = []
        self.refits = 0
        self.saves = 0
        self.tool_texts: list[str] = []

    @property
    def served_texts(self) -> int:
        return self._served + len(self.learned)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.fail:
            raise RuntimeError("fast tier table unreadable")
        return self._model.embed(texts)

    def learn(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        assert vectors.shape == (len(texts), 64)
        self.learned.extend(texts)

    def learn_tools(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        self.tool_texts.extend(texts)

    def refit(self, *, should_stop: Callable[[], bool] | None = None) -> None:
        self.refits += 1

    def save(self) -> None:
        self.saves += 1


class Harness:
    def __init__(self, recall: Recall, index: RecallIndex, events: list[Event]) -> None:
        self.recall, self.index, self.events = recall, index, events

    async def rank(self, query: str) -> tuple[Outcome, str, float]:
        started = trio.current_time()
        ranked = await self.recall.rank(self.index, query, 3, None, warming=False)
        return ranked.outcome, ranked.reason, trio.current_time() - started


@asynccontextmanager
async def ladder(
    model: ScriptedEmbedder,
    tier: ScriptedFastTier | None,
    *,
    load: LoadConfig | None = None,
    deadline: float = BUDGET,
    cascade: bool = False,
) -> AsyncIterator[Harness]:
    """Recall with its batcher and fast-tier service running, over an embedded index."""
    load = load or LoadConfig(min_served=100, refit_every=4)
    events: list[Event] = []
    index = ToolIndex(TOOLS, embedder=ScriptedEmbedder(dim=model.dim), cache=None)
    workers = WorkerCalls(inline_cpu(model))
    service = None
    if tier is not None:
        chosen = tier

        def opener(_index: ToolIndex, _stop: Callable[[], bool]) -> ScriptedFastTier:
            return chosen

        service = FastTierService(opener, config=load, workers=workers, publish=events.append)
    recall = Recall(
        model,
        embed_deadline_s=deadline,
        workers=workers,
        cpu=trio.CapacityLimiter(2),
        publish=events.append,
        query_cache=load.query_cache,
        fast_tier=service,
        budget_s=load.budget_s,
        cascade=cascade,
    )
    assert recall.batcher is not None
    async with trio.open_nursery() as nursery:
        await nursery.start(recall.batcher.run)
        if service is not None:
            ready = trio.Event()
            ready.set()
            nursery.start_soon(service.run, lambda: index, ready.wait)
        await trio.testing.wait_all_tasks_blocked()
        yield Harness(recall, index.recall, events)
        nursery.cancel_scope.cancel()


async def burst(harness: Harness, queries: Sequence[str]) -> list[tuple[Outcome, str, float]]:
    results: list[tuple[Outcome, str, float]] = []

    async def one(query: str) -> None:
        results.append(await harness.rank(query))

    async with trio.open_nursery() as nursery:
        for query in queries:
            nursery.start_soon(one, query)
    return results


async def test_a_lone_caller_gets_the_full_tier(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, ScriptedFastTier(served=500)) as harness:
        for query in QUERIES[:5]:
            outcome, reason, waited = await harness.rank(query)
            assert (outcome, reason) == (Outcome.APPLIED, "")
            assert waited == pytest.approx(0.05)
        stats = harness.recall.statistics()
        assert (stats.full_tier, stats.fast_tier, stats.keyword_only) == (5, 0, 0)


async def test_under_a_burst_no_request_waits_past_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)  # one text per call: 20 texts/s
    async with ladder(model, ScriptedFastTier(served=500)) as harness:
        await harness.rank("calibrate the model time")  # one measured call
        results = await burst(harness, QUERIES)
    outcomes = [outcome for outcome, _, _ in results]
    assert max(waited for _, _, waited in results) <= BUDGET
    fast = [reason for _, reason, _ in results if reason.startswith("fast tier: full model busy")]
    assert len(fast) >= len(QUERIES) - BUDGET / 2 / 0.05  # the rest fit in half the deadline
    assert outcomes.count(Outcome.APPLIED) == 2  # 2 x 50 ms fit in the 125 ms budget
    assert all(o is Outcome.DEGRADED for o, r, _ in results if r)
    assert "predicted wait" in fast[0]
    assert "> 125 ms" in fast[0]
    assert harness.recall.statistics().keyword_only == 0


async def test_without_a_fast_tier_a_burst_waits_for_the_deadline_as_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, None) as harness:
        await harness.rank("calibrate the model time")
        results = await burst(harness, QUERIES)
    keyword = [r for o, r, _ in results if o is Outcome.DEGRADED]
    assert keyword
    assert all(r == f"the request's embedding took longer than {BUDGET} s" for r in keyword)
    assert max(waited for _, _, waited in results) == pytest.approx(BUDGET)


async def test_a_fast_tier_that_learned_too_little_is_not_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    tier = ScriptedFastTier(served=10)
    async with ladder(model, tier, load=LoadConfig(min_served=100, learn=False)) as harness:
        await harness.rank("calibrate the model time")
        results = await burst(harness, QUERIES)
        assert not harness.recall.statistics().fast_tier_ready
    assert not [r for _, r, _ in results if r.startswith("fast tier")]
    assert harness.recall.statistics().keyword_only > 0


async def test_a_failing_fast_tier_answers_keyword_only_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, ScriptedFastTier(served=500, fail=True)) as harness:
        await harness.rank("calibrate the model time")
        results = await burst(harness, QUERIES)
    stepped = [(r, w) for _, r, w in results if r.startswith("keyword only: fast tier failed")]
    assert stepped
    assert all(w == 0 for r, w in stepped if "full model busy" in r)  # no wait spent for nothing
    assert "fast tier table unreadable" in stepped[0][0]
    failures = [e for e in harness.events if isinstance(e, FailOpen)]
    assert {e.what_failed for e in failures} >= {"fast tier"}


async def test_a_request_past_its_deadline_steps_to_the_fast_tier(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, faults=["hang"])
    async with ladder(model, ScriptedFastTier(served=500)) as harness:
        outcome, reason, waited = await harness.rank("weather in Oslo")
    assert outcome is Outcome.DEGRADED
    assert reason == f"fast tier: the request's embedding took longer than {BUDGET} s"
    assert waited == pytest.approx(BUDGET)


async def test_cancelling_a_caller_in_a_burst_leaves_the_others_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    answered: list[Outcome] = []
    async with ladder(model, ScriptedFastTier(served=500)) as harness:
        await harness.rank("calibrate the model time")

        async def one(query: str) -> None:
            answered.append((await harness.rank(query))[0])

        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as doomed:
                doomed.cancel()
                await harness.rank("never answered")
            for query in QUERIES[:10]:
                nursery.start_soon(one, query)
        assert doomed.cancelled_caught
        assert harness.recall.batcher is not None
        assert harness.recall.batcher.load.outstanding == 0
    assert len(answered) == 10


async def test_a_repeated_request_costs_no_model_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05)
    async with ladder(model, None, load=LoadConfig(query_cache=8)) as harness:
        first = await harness.rank("weather in Oslo")
        second = await harness.rank("weather in Oslo")
        stats = harness.recall.statistics()
    assert first[:2] == second[:2] == (Outcome.APPLIED, "")
    assert second[2] == 0  # answered from the cache, no model time
    assert model.texts == ["weather in Oslo"]
    assert (stats.query_cache_hits, stats.query_cache_misses) == (1, 1)
    assert stats.query_cache_hit_rate == 0.5


async def test_the_query_cache_can_be_turned_off(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedEmbedder(delay=0.05)
    async with ladder(model, None, load=LoadConfig(query_cache=0)) as harness:
        await harness.rank("weather in Oslo")
        await harness.rank("weather in Oslo")
    assert model.texts == ["weather in Oslo"] * 2


async def test_the_fast_tier_learns_from_what_the_full_tier_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.01)
    tier = ScriptedFastTier(served=0)
    async with ladder(model, tier, load=LoadConfig(refit_every=4, min_served=4)) as harness:
        assert tier.tool_texts == []  # tools are learned by FastTier.open, not again here
        for query in QUERIES[:4]:
            await harness.rank(query)
        await trio.sleep(1)  # the fit runs in the background
        assert tier.learned == QUERIES[:4]
        assert (tier.refits, tier.saves) == (1, 1)
        assert harness.recall.statistics().fast_tier_served == 4
        assert harness.recall.statistics().fast_tier_ready
        # Fits get rarer: the next is due after as many pairs as the table was fitted on.
        for query in QUERIES[4:8]:
            await harness.rank(query)
        await trio.sleep(1)
        assert (tier.refits, harness.recall.statistics().fast_tier_served) == (2, 8)
        for query in QUERIES[8:12]:
            await harness.rank(query)
        await trio.sleep(1)
        assert tier.learned == QUERIES[:8]  # 4 pairs wait: 8 are due
        for query in QUERIES[12:16]:
            await harness.rank(query)
        await trio.sleep(1)
        assert tier.learned == QUERIES[:16]
        assert (tier.refits, harness.recall.statistics().fast_tier_served) == (3, 16)


async def test_learning_off_learns_nothing(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedEmbedder(delay=0.01)
    tier = ScriptedFastTier(served=0)
    async with ladder(model, tier, load=LoadConfig(refit_every=1, learn=False)) as harness:
        for query in QUERIES[:4]:
            await harness.rank(query)
        await trio.sleep(1)
    assert (tier.learned, tier.refits) == ([], 0)


async def test_a_fast_tier_that_cannot_be_built_leaves_the_other_rungs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[Event] = []
    model = ScriptedEmbedder(delay=0.01)
    workers = WorkerCalls(inline_cpu(model))

    def opener(_index: ToolIndex, _stop: Callable[[], bool]) -> ScriptedFastTier:
        raise OSError("cache directory is read-only")

    service = FastTierService(opener, config=LoadConfig(), workers=workers, publish=events.append)
    index = ToolIndex(TOOLS, embedder=ScriptedEmbedder(), cache=None)
    ready = trio.Event()
    ready.set()
    await service.run(lambda: index, ready.wait)
    assert service.usable is None
    assert [(type(e), e.operation, e.what_failed, e.reason) for e in events] == [  # type: ignore[attr-defined]
        (
            FailOpen,
            "open_engine",
            "fast tier",
            "the fast tier could not be built: OSError: cache directory is read-only",
        )
    ]


async def test_an_engine_without_the_bundled_model_has_no_fast_tier_and_shares_its_cache(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05)
    config = EngineConfig(cache=False, warmup=WarmupConfig(wait=True), deadlines=Deadlines())
    async with open_engine(TOOLS, config=config, embedder=model, run_cpu=inline_cpu(model)) as e:
        calls = len(model.calls)
        async with trio.open_nursery() as nursery:
            for _ in range(3):  # three callers, one request: one model call
                nursery.start_soon(e.select, "weather in Oslo")
        await e.select("weather in Oslo")
        stats = e.statistics().recall
    assert len(model.calls) - calls == 1
    assert not stats.fast_tier_ready
    assert (stats.query_cache_hits, stats.query_cache_misses) == (1, 3)


async def test_one_slow_call_does_not_keep_a_lone_caller_off_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=1.5)  # within the 2 s deadline, past the 1 s budget
    async with ladder(model, ScriptedFastTier(served=500), deadline=2.0) as harness:
        await harness.rank("a slow start")
        assert harness.recall.batcher is not None
        assert harness.recall.batcher.load.predicted_wait() == pytest.approx(1.5)
        model.delay = 0.01
        outcome, reason, _ = await harness.rank("weather in Oslo")
        assert (outcome, reason) == (Outcome.APPLIED, "")  # the model was idle: it answers
        assert harness.recall.batcher.load.seconds_per_text < 1.5  # and is measured again


async def test_queued_requests_leave_the_model_in_time_to_be_scored_by_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Once requests are measured to take 5 ms of loop time after their vector, a request
    # queued behind n others for a slow model waits at most the deadline less n of those.
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, None) as harness:
        await harness.rank("calibrate the model time")
        harness.recall.loop_time.measured(0.005)
        results = await burst(harness, QUERIES)
    late = sorted((w, r) for o, r, w in results if o is Outcome.DEGRADED)
    assert late
    assert all(w < BUDGET for w, _ in late)
    assert late[0][0] == pytest.approx(BUDGET - 0.005 * (len(QUERIES) - 1))  # the last queued
    assert "left after scoring the requests queued with it" in late[0][1]


async def test_the_loop_time_is_measured_from_the_vector_to_the_finished_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, None) as harness:
        await harness.rank("weather in Oslo")
        await trio.sleep(0.02)  # stands for the scoring and policy after the vector
        harness.recall.finished()
        assert harness.recall.loop_time.seconds == pytest.approx(0.02)
        harness.recall.finished()  # once per request: a second call measures nothing
        assert harness.recall.loop_time.seconds == pytest.approx(0.02)
        await harness.rank("weather in Bergen")
        await trio.sleep(60)  # a paused process: counts as one deadline at most
        harness.recall.finished()
        assert harness.recall.loop_time.seconds <= 0.02 + 0.2 * BUDGET


async def test_a_new_engines_first_burst_waits_for_the_model_only_with_its_first_wave(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Nothing measured yet: one model batch (4 texts) waits for the model; the rest of the
    # burst is answered by the ready fast tier at once instead of waiting out the deadline.
    model = ScriptedEmbedder(delay=0.05, max_batch=4)
    async with ladder(model, ScriptedFastTier(served=500)) as harness:
        while not harness.recall.statistics().fast_tier_ready:  # noqa: ASYNC110 (opens in the background)
            await trio.sleep(0.01)
        results = await burst(harness, QUERIES)
    waited = [w for o, _, w in results if o is Outcome.APPLIED]
    at_once = [(r, w) for _, r, w in results if r.startswith("fast tier: full model busy (not")]
    assert len(waited) == 4
    assert len(at_once) == len(QUERIES) - 4
    assert all(w == 0 for _, w in at_once)
    assert "a first wave of 4" in at_once[0][0]


# The cascade: the fast tier ranks first; a ranking sure enough stands without the model.
SURE = "send an email message to a recipient"  # a tool's own words: fused score far above
UNSURE = "zebra quantum marmalade"  # no word of any tool: fused score well below the floor
OPENED = 1.0  # trio seconds: the fast tier opens through the scripted model's delay


async def test_a_sure_fast_ranking_answers_without_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, ScriptedFastTier(served=500), cascade=True) as harness:
        await trio.sleep(OPENED)
        ranked = await harness.recall.rank(harness.index, SURE, 3, None, warming=False)
        waited_for = trio.current_time() - OPENED
        stats = harness.recall.statistics()
    assert (ranked.outcome, ranked.reason, ranked.tier) == (Outcome.APPLIED, "", "fast")
    assert ranked.tool_ids[0] == "send_email"
    assert waited_for == 0  # no model call
    assert SURE not in model.texts
    assert (stats.fast_tier_sure, stats.full_tier, stats.fast_tier) == (1, 0, 0)


async def test_an_unsure_fast_ranking_waits_for_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, ScriptedFastTier(served=500), cascade=True) as harness:
        await trio.sleep(OPENED)
        outcome, reason, waited = await harness.rank(UNSURE)
        stats = harness.recall.statistics()
    assert (outcome, reason) == (Outcome.APPLIED, "")
    assert waited == pytest.approx(0.05)
    assert UNSURE in model.texts
    assert (stats.fast_tier_sure, stats.full_tier) == (0, 1)


async def test_without_the_cascade_the_model_reads_every_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, ScriptedFastTier(served=500), cascade=False) as harness:
        await trio.sleep(OPENED)
        outcome, _, waited = await harness.rank(SURE)
        stats = harness.recall.statistics()
    assert outcome is Outcome.APPLIED
    assert waited == pytest.approx(0.05)
    assert (stats.fast_tier_sure, stats.full_tier) == (0, 1)


async def test_a_failing_fast_tier_leaves_the_cascade_to_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    tier = ScriptedFastTier(served=500, fail=True)
    async with ladder(model, tier, cascade=True) as harness:
        await trio.sleep(OPENED)
        outcome, reason, waited = await harness.rank(SURE)
        stats = harness.recall.statistics()
    assert (outcome, reason) == (Outcome.APPLIED, "")  # an optimisation failed: no step down
    assert waited == pytest.approx(0.05)
    assert (stats.fast_tier_sure, stats.full_tier) == (0, 1)
    assert not [e for e in harness.events if isinstance(e, FailOpen)]


async def test_a_cached_vector_of_the_model_comes_before_the_cascade(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    load = LoadConfig(min_served=100, refit_every=4, query_cache=16)
    tier = ScriptedFastTier(served=500)
    async with ladder(model, tier, load=load, cascade=True) as harness:
        await trio.sleep(OPENED)
        tier.fail = True  # the cascade cannot answer: the model does, and its vector is cached
        await harness.rank(SURE)
        tier.fail = False
        ranked = await harness.recall.rank(harness.index, SURE, 3, None, warming=False)
        stats = harness.recall.statistics()
    assert ranked.tier == "full"
    assert (stats.query_cache_hits, stats.fast_tier_sure) == (1, 0)


async def test_under_load_the_fast_tier_answers_once_without_the_cascade(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The cascade is for a request that would wait for the model: once the predicted wait is
    # past the budget the fast tier answers anyway, ranked once, as a step down.
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, ScriptedFastTier(served=500), cascade=True) as harness:
        await trio.sleep(OPENED)
        await harness.rank("calibrate the model time")
        async with trio.open_nursery() as nursery:
            for n in range(4):  # queued for the model: the predicted wait passes the budget
                nursery.start_soon(harness.rank, f"{UNSURE} {n}")
            await trio.testing.wait_all_tasks_blocked()
            outcome, reason, waited = await harness.rank(SURE)
        stats = harness.recall.statistics()
    assert outcome is Outcome.DEGRADED
    assert reason.startswith("fast tier: full model busy")
    assert waited == 0
    assert stats.fast_tier_sure == 0


async def test_a_request_whose_batch_would_end_too_late_leaves_the_queue_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Calibrated at 50 ms a request, the model then slows to 200 ms (as under a burst): a
    # queued request whose batch is predicted to end past its deadline steps down when the
    # batch forms, instead of waiting out the deadline for an answer that cannot come. (A
    # budget this loose leaves the queue to the batcher.)
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    load = LoadConfig(min_served=100, refit_every=4, budget_s=5.0)
    async with ladder(model, ScriptedFastTier(served=500), load=load) as harness:
        for n in range(3):  # nothing is predicted before three batches
            await harness.rank(f"calibrate the model time {n}")
        model.delay = 0.2
        results = await burst(harness, [f"send email number {n}" for n in range(4)])
    early = [(r, w) for _, r, w in results if "busy model would have answered" in r]
    assert early
    assert all(w < BUDGET for _, w in early)  # left before the deadline
    assert all(r.startswith("fast tier: ") for r, _ in early)
    assert max(w for _, _, w in results) <= BUDGET
    texts = set(model.texts)
    assert sum(f"send email number {n}" in texts for n in range(4)) < 4  # not all sent


async def test_one_slow_first_batch_does_not_turn_a_burst_away(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A cold first call (400 ms) would predict a burst's batch of six far past the deadline;
    # one batch is not a load, so the batch runs, and every request gets the model's answer.
    # (A budget this loose leaves the queue to the batcher.)
    model = ScriptedEmbedder(delay=0.4, max_batch=8)
    load = LoadConfig(min_served=100, refit_every=4, budget_s=5.0)
    async with ladder(model, ScriptedFastTier(served=500), load=load) as harness:
        await harness.rank("a slow first call")
        await trio.sleep(1)
        model.delay = 0.01
        results = await burst(harness, [f"book flight number {n}" for n in range(6)])
    assert [(outcome, reason) for outcome, reason, _ in results] == [(Outcome.APPLIED, "")] * 6


async def test_a_lone_request_runs_however_slow_the_model_was_measured(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The model's time is measured again by a lone request, never skipped for it.
    model = ScriptedEmbedder(delay=0.4, max_batch=1)
    async with ladder(model, ScriptedFastTier(served=500)) as harness:
        await harness.rank("a slow first call")  # 400 ms a text, past the deadline
        await trio.sleep(1)  # the slow call has ended
        model.delay = 0.05
        outcome, reason, waited = await harness.rank("weather in Oslo")
    assert (outcome, reason) == (Outcome.APPLIED, "")
    assert waited == pytest.approx(0.05)


class CountingFastTier(ScriptedFastTier):
    """A scripted fast tier that records how many texts each ``embed`` call got."""

    def __init__(self, served: int, *, fail: bool = False) -> None:
        super().__init__(served, fail=fail)
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        return super().embed(texts)


async def test_a_bursts_fast_tier_answers_are_embedded_and_scored_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # One tokeniser call and one matrix product for the requests of one scheduler pass; each
    # ranking the same as the request's alone.
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    tier = CountingFastTier(served=500)
    async with ladder(model, tier) as harness:
        await harness.rank("calibrate the model time")
        tier.calls.clear()
        ranked: dict[str, Ranking] = {}

        async def one(query: str) -> None:
            ranked[query] = await harness.recall.rank(harness.index, query, 3, None, warming=False)

        async with trio.open_nursery() as nursery:
            for query in QUERIES:
                nursery.start_soon(one, query)
        together = list(tier.calls)
        alone = {
            q: harness.index.ranked(
                q,
                RequestVector.stepped_down(tier.embed([q])[0], "alone"),
                3,
                Strategy.COMBINED,
            )
            for q, r in ranked.items()
            if r.reason.startswith("fast tier")
        }
    assert len(alone) >= len(QUERIES) - 3  # the rest went to the model
    assert max(together) >= len(alone) - 1  # embedded together
    for query, expected in alone.items():
        assert ranked[query].tool_ids == expected.tool_ids
        assert ranked[query].scores == pytest.approx(expected.scores, abs=1e-5)


async def test_a_failing_fast_tier_fails_its_whole_batch_to_keyword_only_and_none_hangs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedEmbedder(delay=0.05, max_batch=1)
    async with ladder(model, CountingFastTier(served=500, fail=True)) as harness:
        await harness.rank("calibrate the model time")
        with trio.fail_after(5):
            results = await burst(harness, QUERIES)
    stepped = [r for _, r, _ in results if r.startswith("keyword only: fast tier failed")]
    assert len(stepped) >= len(QUERIES) - 3
    assert all("fast tier table unreadable" in r for r in stepped)


async def test_a_request_that_gives_up_in_a_fast_tier_batch_leaves_the_rest_answered() -> None:
    index = ToolIndex(TOOLS, embedder=ScriptedEmbedder(dim=64), cache=None).recall
    tier = CountingFastTier(served=500)
    batch = FastTierBatch()
    answers: dict[str, object] = {}

    async def ask(query: str, *, give_up: bool) -> None:
        with trio.move_on_after(0 if give_up else 60):  # 0: cancelled at its first wait
            answers[query] = await batch.answer(tier, index, query, 64)

    with trio.fail_after(60):  # a hang guard only
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(ask, "weather in Oslo", give_up=False))
            nursery.start_soon(functools.partial(ask, "send an email", give_up=True))
            nursery.start_soon(functools.partial(ask, "play a song", give_up=False))
    assert {"weather in Oslo", "play a song"} <= set(answers)  # none hangs, both answered
    assert tier.calls == [3]  # one batch, the one that gave up in it too
