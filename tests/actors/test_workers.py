"""Worker calls are counted until their thread really ends, and none starts after closing."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from toolroute._runtime.workers import EngineClosing, WorkerCalls


async def test_an_abandoned_call_is_waited_for_on_close() -> None:
    workers = WorkerCalls()
    release, finished = threading.Event(), threading.Event()

    def model_call() -> str:
        release.wait(30)
        finished.set()
        return "vector"

    limiter = trio.CapacityLimiter(1)
    with trio.move_on_after(0.05):
        await workers.run(model_call, limiter=limiter)  # abandoned at the deadline
    assert workers.running == 1  # the thread is still inside the model
    async with trio.open_nursery() as nursery:
        nursery.start_soon(workers.aclose)
        await trio.sleep(0.05)
        assert not finished.is_set()
        release.set()  # the model call ends; aclose returns only after it
    assert finished.is_set()
    assert workers.running == 0


async def test_a_call_abandoned_before_its_thread_began_never_begins() -> None:
    gate, thread_done = threading.Event(), threading.Event()
    began: list[str] = []

    async def slow_to_start(fn: Any, *args: Any, limiter: trio.CapacityLimiter) -> Any:
        def late() -> Any:
            try:
                gate.wait(30)  # the thread exists but has not reached fn yet
                return fn(*args)
            finally:
                thread_done.set()

        return await trio.to_thread.run_sync(late, limiter=limiter, abandon_on_cancel=True)

    workers = WorkerCalls(slow_to_start)
    with trio.move_on_after(0.01):
        await workers.run(began.append, "model", limiter=trio.CapacityLimiter(1))
    assert workers.running == 0  # dropped: nothing to wait for
    gate.set()
    await trio.to_thread.run_sync(thread_done.wait, 30)
    assert began == []  # the abandoned call never began


async def test_nothing_new_starts_once_closing() -> None:
    workers = WorkerCalls()
    await workers.aclose()
    with pytest.raises(EngineClosing, match="shutting down"):
        await workers.run(lambda: None, limiter=trio.CapacityLimiter(1))


async def test_close_waits_no_longer_than_its_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(30)

    workers = WorkerCalls()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(workers.run, stuck, limiter=trio.CapacityLimiter(1)))
        await trio.to_thread.run_sync(entered.wait, 30)
        nursery.cancel_scope.cancel()  # the caller gives up; the thread is still inside
    assert workers.running == 1
    started = trio.current_time()
    await workers.aclose(grace_s=2.0)
    assert trio.current_time() - started == pytest.approx(2.0)
    release.set()
