"""Direct tests of runtime fail-open rules that a mutation check found unguarded: the
supervisor's crash window and the ``fail_open`` event of a failed request embedding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio
import trio.testing

from toolroute import Catalog, EngineConfig, Outcome
from toolroute._core.config import Deadlines, WarmupConfig
from toolroute._core.errors import EngineCrashed
from toolroute._core.events import Event, FailOpen, ServiceRestarted
from toolroute._runtime.engine import open_engine
from toolroute._runtime.supervisor import RestartPolicy, run_supervised
from toolroute.providers import HashingEmbedder

# --- the supervisor's crash window ---------------------------------------------------------


def crashing_every(period_s: float, crashes: int, starts: list[float]) -> Callable[..., Any]:
    """A service that runs ``period_s`` then crashes, ``crashes`` times, then returns."""

    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        starts.append(trio.current_time())
        task_status.started()
        if len(starts) > crashes:
            return
        await trio.sleep(period_s)
        raise RuntimeError(f"crash {len(starts)}")

    return service


async def test_crashes_that_left_the_window_no_longer_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Six crashes a minute apart with a budget of two per 30 s: never more than one in the
    # window, so the service is restarted every time and then returns normally.
    starts: list[float] = []
    events: list[Any] = []
    policy = RestartPolicy(max_restarts=2, window_s=30, backoff_s=0.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            run_supervised, "rare", crashing_every(60.0, 6, starts), policy, events.append
        )
    assert len(starts) == 7
    assert [e.attempt for e in events if isinstance(e, ServiceRestarted)] == [1] * 6


async def test_crashes_inside_the_window_still_exhaust_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    starts: list[float] = []
    policy = RestartPolicy(max_restarts=2, window_s=30, backoff_s=0.0)
    with pytest.raises(EngineCrashed, match="crashed 3 times within 30"):
        await run_supervised("often", crashing_every(10.0, 6, starts), policy, lambda e: None)
    assert len(starts) == 3


async def test_a_crash_exactly_one_window_after_the_first_still_counts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Crashes at 30 s, 60 s, 90 s: the one at 30 s is exactly 60 s old at the third crash,
    # on the window's edge, and is still in it.
    starts: list[float] = []
    policy = RestartPolicy(max_restarts=2, window_s=60, backoff_s=0.0)
    with pytest.raises(EngineCrashed, match="crashed 3 times within 60"):
        await run_supervised("edge", crashing_every(30.0, 6, starts), policy, lambda e: None)
    assert len(starts) == 3


# --- a failed request embedding is announced -----------------------------------------------

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "read_file", "description": "Read a file from disk"},
    ]
)


class SwitchableEmbedder:
    """A hashing embedder that fails once ``fail`` is set (after warm-up, say)."""

    identity, dim, max_batch = "switchable", 64, 16

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.fail = False

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.fail:
            raise RuntimeError("model crashed")
        return self.inner.embed(texts)


async def inline(fn: Any, *args: Any, limiter: trio.CapacityLimiter) -> Any:
    return fn(*args)  # no threads under the mock clock


async def test_a_failed_request_embedding_publishes_fail_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SwitchableEmbedder()
    config = EngineConfig(
        cache=False, deadlines=Deadlines(embed_s=5.0), warmup=WarmupConfig(wait=True)
    )
    async with open_engine(TOOLS, config=config, embedder=embedder, run_cpu=inline) as engine:
        await engine.ready()
        embedder.fail = True
        seen: list[Event] = []
        async with engine.subscribe(buffer=16) as deliveries:
            selection = await engine.select("email my boss")
            while not any(e.type == "selection.finished" for e in seen):
                seen.append((await deliveries.receive()).event)
    assert selection.outcome is Outcome.DEGRADED
    assert "embedder failed on the query" in selection.reason
    failures = [e for e in seen if isinstance(e, FailOpen)]
    assert [(e.operation, e.what_failed) for e in failures] == [("select", "embedder")]
    assert "model crashed" in failures[0].reason


async def test_a_request_embedding_that_works_publishes_no_fail_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SwitchableEmbedder()
    config = EngineConfig(cache=False, warmup=WarmupConfig(wait=True))
    async with open_engine(TOOLS, config=config, embedder=embedder, run_cpu=inline) as engine:
        await engine.ready()
        seen: list[Event] = []
        async with engine.subscribe(buffer=16) as deliveries:
            selection = await engine.select("email my boss")
            while not any(e.type == "selection.finished" for e in seen):
                seen.append((await deliveries.receive()).event)
    assert selection.outcome is Outcome.APPLIED
    assert not [e for e in seen if isinstance(e, FailOpen)]
