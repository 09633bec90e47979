"""The step actor's hand-over: the one-shot reply, the unbounded inbox, and fairness
between sessions when a step finishes without awaiting anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from toolroute import Catalog, Outcome
from toolroute._core.config import EngineConfig
from toolroute._runtime.engine import open_engine
from toolroute._runtime.one_shot import OneShot
from toolroute._runtime.steps import Steps

TOOLS = Catalog.from_plain(
    [
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "read_file", "description": "Read a file from disk"},
        {"name": "book_flight", "description": "Book a flight ticket"},
    ]
)


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def inline(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
    return fn(*args)


async def test_a_reply_delivered_before_the_caller_waits_is_returned() -> None:
    reply = OneShot[str]()
    reply.deliver("first")
    reply.deliver("second")  # settled once: later deliveries change nothing
    assert reply.settled
    assert await reply.wait() == "first"


async def test_a_parked_caller_is_woken_with_the_reply() -> None:
    reply = OneShot[str]()
    got: list[str | None] = []

    async def caller() -> None:
        got.append(await reply.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        reply.deliver("answer")
    assert got == ["answer"]


async def test_a_caller_that_gives_up_marks_its_reply_abandoned() -> None:
    reply = OneShot[str]()
    with trio.move_on_after(1) as scope:
        await reply.wait()
    assert scope.cancelled_caught
    assert reply.abandoned
    reply.deliver("too late")  # nobody is woken, nothing raises


async def test_requests_left_in_the_inbox_by_a_crash_fail_open(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch = Steps._dispatch
    crashed: list[bool] = []

    def crash_once(self: Steps, *args: Any) -> None:
        if not crashed:
            crashed.append(True)
            raise RuntimeError("a bug in the step actor")
        dispatch(self, *args)

    monkeypatch.setattr(Steps, "_dispatch", crash_once)
    selections = []
    with trio.fail_after(60):  # in trio time: a caller left hanging fails here
        async with open_engine(
            TOOLS, config=EngineConfig(cache=False), embedder=None, run_cpu=inline
        ) as engine:

            async def step(session: str) -> None:
                selections.append(await engine.prepare_step(user("read a file"), session=session))

            async with trio.open_nursery() as nursery:
                for session in ("a", "b", "c", "a"):  # all sent before the actor runs
                    nursery.start_soon(step, session)
    assert len(selections) == 4
    assert all(s.outcome is Outcome.FAILED_OPEN and s.tool_ids is None for s in selections)


async def test_a_long_queue_of_one_session_lets_other_sessions_step() -> None:
    finished: list[str] = []
    async with open_engine(
        TOOLS, config=EngineConfig(cache=False), embedder=None, run_cpu=inline
    ) as engine:

        async def step(session: str, number: int) -> None:
            await engine.prepare_step(user(f"read a file {number}"), session=session)
            finished.append(f"{session}{number}")

        async with trio.open_nursery() as nursery:
            for number in range(30):
                nursery.start_soon(step, "a", number)
            nursery.start_soon(step, "b", 0)
    assert len(finished) == 31
    assert finished.index("b0") < 3  # not behind the whole of a's queue
