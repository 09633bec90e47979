"""The step actor: a session's steps in arrival order, different sessions side by side, a
caller that gave up costing nothing further, a session never evicted with steps queued or
running.

Each generated example runs its own ``trio.run`` under a ``MockClock`` (virtual time); CPU
work runs inline, and a step's request embedding takes the virtual time its text asks for.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from event_snapshot import skip_snapshot
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, Outcome, ToolSet
from toolroute._core.config import Deadlines, EngineConfig, WarmupConfig
from toolroute._core.stores import Stores
from toolroute._runtime.engine import open_engine
from toolroute._stores.sessions import MemorySessionStore
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "read_file", "description": "Read a file from disk"},
        {"name": "book_flight", "description": "Book a flight ticket"},
        {"name": "get_weather", "description": "Weather forecast for a city"},
    ]
)
TRAVEL = ToolSet(name="travel", members=["book_flight", "get_weather"], anchors=["book_flight"])
CONFIG = EngineConfig(
    cache=False,
    warmup=WarmupConfig(wait=True),
    deadlines=Deadlines(embed_s=1000),  # recall never degrades here: only order is under test
)
STEP_TEXT = re.compile(r"step (\d+) of (\w+) for ([\d.]+)")


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@attrs.define
class ModelLog:
    """When each step's request embedding entered and left the (virtual) model."""

    sessions: MemorySessionStore
    started: dict[int, float] = attrs.field(factory=dict)
    ended: dict[int, float] = attrs.field(factory=dict)
    unheld: list[int] = attrs.field(factory=list)  # steps that ran with their session unheld

    async def run_cpu(
        self, fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter
    ) -> Any:
        texts = args[0] if args and isinstance(args[0], list) else []
        steps = [m for m in (STEP_TEXT.search(t) for t in texts if isinstance(t, str)) if m]
        for match in steps:
            number, session = int(match[1]), match[2]
            self.started[number] = trio.current_time()
            entry = self.sessions._sessions.get(session)
            if entry is None or entry.holders == 0:
                self.unheld.append(number)
        if steps:
            await trio.sleep(max(float(m[3]) for m in steps))
            for match in steps:
                self.ended[int(match[1])] = trio.current_time()
        return fn(*args)


@attrs.frozen
class Op:
    session: int
    gap: float  # virtual seconds before this step arrives
    seconds: float  # how long its request embedding takes
    give_up_after: float | None  # the caller's deadline, if it has one


OPS = st.lists(
    st.builds(
        Op,
        session=st.integers(0, 3),
        gap=st.sampled_from([0.0, 0.0, 0.1, 0.7, 2.5]),
        seconds=st.sampled_from([0.0, 0.3, 1.0, 3.0]),
        give_up_after=st.one_of(st.none(), st.sampled_from([0.0, 0.2, 0.9, 2.0, 5.0])),
    ),
    min_size=1,
    max_size=25,
)


@given(
    ops=OPS,
    max_sessions=st.integers(1, 3),
    idle_s=st.sampled_from([0.5, 2.0, 100.0]),
)
def test_steps_of_a_session_apply_in_arrival_order_under_cancellations_and_evictions(
    ops: list[Op], max_sessions: int, idle_s: float
) -> None:
    sessions = MemorySessionStore(max_sessions=max_sessions, idle_s=idle_s)
    log = ModelLog(sessions)
    arrived: list[tuple[int, str, float]] = []  # (step, session, time) in arrival order
    answered: dict[int, Outcome] = {}
    gave_up: dict[int, float] = {}

    async def step(number: int, op: Op) -> None:
        session = f"s{op.session}"
        arrived.append((number, session, trio.current_time()))
        deadline = math.inf if op.give_up_after is None else op.give_up_after
        with trio.move_on_after(deadline) as scope:
            selection = await engine.prepare_step(
                user(f"step {number} of {session} for {op.seconds} read a file"),
                session=session,
            )
            answered[number] = selection.outcome
        if scope.cancelled_caught:
            gave_up[number] = trio.current_time()

    async def main() -> None:
        nonlocal engine
        async with (
            open_engine(
                TOOLS,
                config=CONFIG,
                embedder=HashingEmbedder(dim=64),
                run_cpu=log.run_cpu,
                stores=Stores(sessions=sessions),
            ) as engine,
            trio.open_nursery() as nursery,
        ):
            for number, op in enumerate(ops):
                await trio.sleep(op.gap)
                nursery.start_soon(step, number, op)
        assert all(entry.holders == 0 for entry in sessions._sessions.values())

    engine: Any = None
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    # Every caller either got its step or gave up at its own deadline.
    assert set(answered) | set(gave_up) == set(range(len(ops)))
    assert set(answered).isdisjoint(gave_up)
    assert all(outcome is Outcome.APPLIED for outcome in answered.values())
    when = {number: at for number, _, at in arrived}
    for number, at in gave_up.items():
        assert at == pytest.approx(when[number] + ops[number].give_up_after)  # type: ignore[operator]
    # Nothing of a step whose caller gave up starts later.
    for number, at in gave_up.items():
        assert log.started.get(number, -math.inf) <= at
    # A session is held (never evicted) while one of its steps runs.
    assert log.unheld == []
    # Per session: the steps that ran started in arrival order, one after another.
    for session in {s for _, s, _ in arrived}:
        ran = [n for n, s, _ in arrived if s == session and n in log.started]
        assert sorted(ran, key=log.started.__getitem__) == ran
        for earlier, later in itertools.pairwise(ran):
            if earlier in log.ended:
                assert log.started[later] >= log.ended[earlier]


async def test_different_sessions_run_side_by_side(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from toolroute._core.config import SelectionDefaults
    from toolroute.testing import ScriptedDecider

    servers = Catalog.from_plain(
        [
            {"name": "send_email", "description": "Send an email", "server": "mail"},
            {"name": "book_flight", "description": "Book a flight", "server": "travel"},
        ]
    )
    config = EngineConfig(cache=False, selection=SelectionDefaults(route_servers=True))
    decider = ScriptedDecider(default=0.9, delay=2.0)  # every routing takes 2 s
    async with open_engine(servers, config=config, embedder=None, decider=decider) as engine:
        ended: dict[int, float] = {}

        async def step(number: int, session: str) -> None:
            await engine.prepare_step(user(f"step {number} send an email"), session=session)
            ended[number] = trio.current_time()

        async with trio.open_nursery() as nursery:
            for number, session in enumerate(["a", "b", "a", "b"]):
                nursery.start_soon(step, number, session)
                await trio.lowlevel.checkpoint()
    # Each session's two steps one after the other, the two sessions side by side.
    assert ended == {0: 2.0, 1: 2.0, 2: 4.0, 3: 4.0}


async def test_a_queued_step_whose_caller_gave_up_never_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sessions = MemorySessionStore()
    log = ModelLog(sessions)
    async with open_engine(
        TOOLS,
        config=CONFIG,
        embedder=HashingEmbedder(dim=64),
        run_cpu=log.run_cpu,
        stores=Stores(sessions=sessions),
    ) as engine:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: engine.prepare_step(user("step 0 of a for 5 read a file"), session="a")
            )
            await trio.sleep(1)
            with trio.move_on_after(1):  # queued behind step 0 all along
                await engine.prepare_step(user("step 1 of a for 5 read a file"), session="a")
            third = await engine.prepare_step(user("step 2 of a for 0 read a file"), session="a")
        assert 1 not in log.started
        assert third.outcome is Outcome.APPLIED
        assert log.started[2] == log.ended[0] == 5  # straight after step 0: 1 cost nothing


async def test_a_forced_set_carries_to_the_steps_queued_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sessions = MemorySessionStore(max_sessions=1, idle_s=1)
    log = ModelLog(sessions)
    async with open_engine(
        TOOLS,
        config=CONFIG,
        embedder=HashingEmbedder(dim=64),
        run_cpu=log.run_cpu,
        tool_sets=[TRAVEL],
        stores=Stores(sessions=sessions),
    ) as engine:
        results: dict[int, tuple[str, ...]] = {}

        async def step(number: int, seconds: float, session: str, **kw: Any) -> None:
            text = f"step {number} of {session} for {seconds} send an email"
            results[number] = (
                await engine.prepare_step(user(text), session=session, **kw)
            ).active_sets

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: step(0, 3, "a", force_sets=["travel"]))
            await trio.sleep(0.5)
            nursery.start_soon(lambda: step(1, 3, "a"))  # queued: runs from 3 to 6
            await trio.sleep(2)
            # Another session, past a's idle time and over the count bound: a is in use.
            nursery.start_soon(lambda: step(2, 0, "b"))
        assert results[1] == ("travel",)


async def test_engine_route_servers_with_a_session_queues_with_its_steps(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sessions = MemorySessionStore()
    log = ModelLog(sessions)
    async with open_engine(
        TOOLS,
        config=CONFIG,
        embedder=HashingEmbedder(dim=64),
        run_cpu=log.run_cpu,
        decider=None,
        stores=Stores(sessions=sessions),
    ) as engine:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: engine.prepare_step(user("step 0 of a for 4 read a file"), session="a")
            )
            await trio.sleep(1)
            routing = await engine.route_servers("read a file", session="a")
            assert trio.current_time() == 4  # waited for the step queued before it
        assert routing.outcome in (Outcome.SKIPPED, Outcome.FAILED_OPEN)


async def test_a_step_whose_actor_stopped_fails_open_with_every_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(
        TOOLS, config=EngineConfig(cache=False), embedder=None, run_cpu=inline
    ) as engine:
        engine._steps._inbox.close()  # the actor's inbox as it is between a crash and a restart
        async with engine.subscribe(buffer=4) as events:
            skip_snapshot(events)
            selection = await engine.prepare_step(user("read a file"), session="a")
            delivery = await events.receive()
    assert selection.tool_ids is None
    assert selection.outcome is Outcome.FAILED_OPEN
    assert delivery.event.type == "fail_open"


async def test_a_crashed_step_actor_fails_its_callers_open_and_is_restarted(
    autojump_clock: trio.testing.MockClock, monkeypatch: Any
) -> None:
    from toolroute._runtime.steps import Steps

    dispatch = Steps._dispatch
    crashed = []

    def crash_once(self: Steps, *args: Any) -> None:
        if not crashed:
            crashed.append(True)
            raise RuntimeError("a bug in the step actor")
        dispatch(self, *args)

    monkeypatch.setattr(Steps, "_dispatch", crash_once)
    with trio.fail_after(60):  # in trio time: a caller left hanging fails here
        await _crash_then_step_again()


async def _crash_then_step_again() -> None:
    """The first step crashes the actor; the second comes after its restart."""
    async with open_engine(
        TOOLS, config=EngineConfig(cache=False), embedder=None, run_cpu=inline
    ) as engine:
        async with engine.subscribe(buffer=8) as events:
            first = await engine.prepare_step(user("read a file"), session="a")
            restarted = None
            while restarted is None:
                delivery = await events.receive()
                if delivery.event.type == "service.restarted":
                    restarted = delivery.event
        await trio.sleep(5)  # past the supervisor's backoff
        second = await engine.prepare_step(user("read a file"), session="a")
    assert first.outcome is Outcome.FAILED_OPEN
    assert first.tool_ids is None
    assert restarted.service == "steps"
    assert second.outcome is Outcome.APPLIED
    assert second.tool_ids is not None


async def inline(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
    """CPU work in the trio thread: under the autojump clock a worker thread would let the
    clock jump past the test's deadlines while it runs."""
    return fn(*args)
