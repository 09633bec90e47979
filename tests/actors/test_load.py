"""Load: 10,000 concurrent selections with random cancellations on a 1k-tool catalogue."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from toolroute import Catalog, EngineConfig, Outcome
from toolroute._core.config import Deadlines, LoadConfig, WarmupConfig
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder

WORDS = (
    "weather email issue calendar file song flight invoice map news search send create list".split()
)


def catalog(size: int) -> Catalog:
    rng = random.Random(1)
    return Catalog.from_plain(
        [
            {"name": f"tool_{i}", "description": " ".join(rng.choices(WORDS, k=6))}
            for i in range(size)
        ]
    )


class CountedThreads:
    """The default worker-thread seam, counting calls in flight.

    Requests cancelled after their batch started leave that batch running in a worker thread
    for a moment (with this embedder ~10 MB of output per batch, plus the queued requests'
    reply channels). That is work in flight, not state left behind; measuring memory while
    it runs is what made this test fail now and then (25.8 MB once, on a slow machine).
    """

    def __init__(self) -> None:
        self.in_flight = 0

    async def __call__(
        self, fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter
    ) -> Any:
        self.in_flight += 1
        try:
            return await trio.to_thread.run_sync(fn, *args, limiter=limiter)
        finally:
            self.in_flight -= 1

    async def settled(self) -> None:
        """Until no call runs and every task waits (the batcher idle on its inbox)."""
        with trio.fail_after(60):
            while True:
                await trio.testing.wait_all_tasks_blocked()
                if self.in_flight == 0:
                    return
                await trio.sleep(0.01)


@pytest.mark.slow
async def test_ten_thousand_concurrent_selects_with_cancellations() -> None:
    # The query cache is bounded state by design (its bound is tested on its own); it is
    # off here so the measurement sees only what requests might leave behind.
    config = EngineConfig(
        cache=False,
        warmup=WarmupConfig(wait=True),
        deadlines=Deadlines(embed_s=30.0),
        load=LoadConfig(query_cache=0),
    )
    rng = random.Random(7)
    tools = catalog(1000)

    async def round_of(engine: object, count: int) -> tuple[int, int]:
        finished = cancelled = 0

        async def one(query: str, budget: float | None) -> None:
            nonlocal finished, cancelled
            with trio.move_on_after(budget if budget is not None else 1e9) as scope:
                selection = await engine.select(query)  # type: ignore[attr-defined]
                assert selection.outcome in (Outcome.APPLIED, Outcome.DEGRADED)
                assert set(selection.tool_ids) <= set(tools.ids)
                finished += 1
            if scope.cancelled_caught:
                cancelled += 1

        async with trio.open_nursery() as nursery:
            for _ in range(count):
                query = " ".join(rng.choices(WORDS, k=3))
                budget = rng.choice([None, None, None, 0.0, 0.001, 0.01])
                nursery.start_soon(one, query, budget)
        return finished, cancelled

    nurseries_before = len(trio.lowlevel.current_task().child_nurseries)
    threads = CountedThreads()
    with trio.fail_after(120):
        async with open_engine(
            tools, config=config, embedder=HashingEmbedder(), run_cpu=threads
        ) as engine:
            await round_of(engine, 2000)  # warm caches and pools before measuring memory
            await threads.settled()
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            finished, cancelled = await round_of(engine, 10_000)
            await threads.settled()  # measure what stays, not the work still in flight
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
    nurseries_after = len(trio.lowlevel.current_task().child_nurseries)
    assert finished + cancelled == 10_000
    assert finished > 4000  # half the requests carry a short budget
    assert cancelled > 100
    assert nurseries_after == nurseries_before  # nothing of the engine outlives its block
    assert after - before < 2_000_000  # flat: no per-request state left behind
