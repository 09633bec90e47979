"""Supervision: crashed services restart with backoff; past the budget the engine stops loudly."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
import trio.testing

from toolroute import Catalog, EngineConfig, Outcome
from toolroute._core.config import Deadlines, WarmupConfig
from toolroute._core.errors import EngineCrashed
from toolroute._core.events import ServiceRestarted
from toolroute._runtime.engine import open_engine
from toolroute._runtime.supervisor import RestartPolicy, run_supervised
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
    ]
)


async def inline(fn: Any, *args: Any, limiter: trio.CapacityLimiter) -> Any:
    return fn(*args)


async def test_a_crashing_service_is_restarted_with_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    starts: list[float] = []
    events: list[Any] = []

    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        starts.append(trio.current_time())
        task_status.started()
        if len(starts) <= 3:
            raise RuntimeError(f"crash {len(starts)}")

    policy = RestartPolicy(max_restarts=5, window_s=60, backoff_s=0.1, max_backoff_s=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_supervised, "svc", service, policy, events.append)
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(starts)]
    assert gaps == [0.1, 0.2, 0.4]  # doubling backoff
    assert [e.attempt for e in events] == [1, 2, 3]
    assert all(isinstance(e, ServiceRestarted) for e in events)


async def test_budget_exceeded_raises_engine_crashed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        raise RuntimeError("always")

    policy = RestartPolicy(max_restarts=2, window_s=60, backoff_s=0.01)
    with pytest.RaisesGroup(pytest.RaisesExc(EngineCrashed, match="crashed 3 times")):
        async with trio.open_nursery() as nursery:
            await nursery.start(run_supervised, "svc", service, policy, lambda e: None)


async def test_engine_survives_a_batcher_crash(autojump_clock: trio.testing.MockClock) -> None:
    config = EngineConfig(
        cache=False, warmup=WarmupConfig(wait=True), deadlines=Deadlines(embed_s=5)
    )
    async with open_engine(
        TOOLS, config=config, embedder=HashingEmbedder(), run_cpu=inline
    ) as engine:
        assert engine._selector._recall.batcher is not None
        batcher = engine._selector._recall.batcher
        real = batcher._embed_batch
        crashes = [1]

        def flaky() -> Any:
            if crashes[0]:
                crashes[0] -= 1
                raise RuntimeError("bug in the batcher")
            return real()

        batcher._embed_batch = flaky
        async with engine.subscribe(buffer=16) as events:
            first = await engine.select("weather in Rome")
            assert first.outcome is Outcome.DEGRADED  # the service died under this request
            assert first.tool_ids[0] == "get_weather"  # keyword recall answered
            await trio.sleep(1)  # restarts and backoff, in virtual time
            later = await engine.select("weather in Rome")
            assert later.outcome is Outcome.APPLIED
            kinds = []
            while True:
                try:
                    kinds.append(events.receive_nowait().event.type)
                except trio.WouldBlock:
                    break
        assert "service.restarted" in kinds


async def test_engine_crash_surfaces_as_engine_crashed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = EngineConfig(
        cache=False,
        warmup=WarmupConfig(wait=True),
        restarts=RestartPolicy(max_restarts=1, backoff_s=0.01),
    )

    def broken() -> Any:
        raise RuntimeError("bug")

    async def crash_it() -> None:
        async with open_engine(
            TOOLS, config=config, embedder=HashingEmbedder(), run_cpu=inline
        ) as engine:
            assert engine._selector._recall.batcher is not None
            engine._selector._recall.batcher._embed_batch = broken
            for _ in range(5):
                await engine.select("weather")
                await trio.sleep(0.1)
            await trio.sleep_forever()

    with pytest.raises(EngineCrashed, match="query batcher"):
        await crash_it()


async def test_errors_from_the_body_come_out_unwrapped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(KeyError, match="boom"):
        async with open_engine(TOOLS, config=EngineConfig(cache=False), embedder=None):
            raise KeyError("boom")


async def test_a_cancelled_service_is_not_a_crash(autojump_clock: trio.testing.MockClock) -> None:
    """Shutdown cancels services; what their cleanup raises then is not a crash to restart."""
    events: list[Any] = []
    starts: list[float] = []

    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        starts.append(trio.current_time())
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            raise trio.ClosedResourceError("inbox closed during shutdown")

    policy = RestartPolicy(max_restarts=0, window_s=60, backoff_s=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_supervised, "svc", service, policy, events.append)
        await trio.sleep(1)
        nursery.cancel_scope.cancel("engine shutdown")
    assert events == []  # no ServiceRestarted, no EngineCrashed out of the nursery
    assert starts == [0.0]


async def test_a_service_cancelled_before_it_started_is_not_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[Any] = []

    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            return  # ends quietly without ever starting: nursery.start raises RuntimeError

    policy = RestartPolicy(max_restarts=0, window_s=60, backoff_s=0.1)
    with trio.move_on_after(1) as scope:
        await run_supervised("svc", service, policy, events.append)
    assert scope.cancelled_caught
    assert events == []
