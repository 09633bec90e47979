"""The session store never evicts a held session: not by idle time, not by count, and not
the session just being held itself."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from toolroute import Catalog, ToolSet
from toolroute._core.config import Deadlines, EngineConfig, WarmupConfig
from toolroute._core.stores import Stores
from toolroute._runtime.engine import open_engine
from toolroute._stores.sessions import MemorySessionStore
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "book_flight", "description": "Book a flight ticket"},
        {"name": "get_weather", "description": "Weather forecast for a city"},
    ]
)
TRAVEL = ToolSet(name="travel", members=["book_flight", "get_weather"], anchors=["book_flight"])


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def test_a_session_held_past_its_idle_time_is_not_expired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sessions = MemorySessionStore(idle_s=1)
    async with sessions.hold("a") as state:
        state.force(["travel"])
        await trio.sleep(5)  # a long step: far past idle_s
        sessions.get("b")  # another session's use runs expiry
        assert "a" in sessions
    assert sessions.get("a").forced_sets == ("travel",)


async def test_a_session_held_while_all_others_are_held_is_not_evicted_by_its_own_arrival(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sessions = MemorySessionStore(max_sessions=1)

    async def hold_a() -> None:
        async with sessions.hold("a"):
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold_a)
        await trio.testing.wait_all_tasks_blocked()
        async with sessions.hold("b") as state:  # the only other session is in use
            assert "b" in sessions
            state.force(["travel"])
            await trio.sleep(2)  # a is released meanwhile, and evicted: b is in use
    assert "a" not in sessions
    assert sessions.get("b").forced_sets == ("travel",)


async def test_a_long_step_keeps_its_session_past_idle_time_and_the_next_step_sees_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def run_cpu(fn: Any, *args: Any, limiter: trio.CapacityLimiter) -> Any:
        texts = args[0] if args and isinstance(args[0], list) else []
        if any(isinstance(t, str) and "slowly" in t for t in texts):
            await trio.sleep(10)
        return fn(*args)

    sessions = MemorySessionStore(idle_s=1)
    config = EngineConfig(
        cache=False, warmup=WarmupConfig(wait=True), deadlines=Deadlines(embed_s=60)
    )
    async with open_engine(
        TOOLS,
        config=config,
        embedder=HashingEmbedder(dim=64),
        run_cpu=run_cpu,
        tool_sets=[TRAVEL],
        stores=Stores(sessions=sessions),
    ) as engine:
        results: dict[str, tuple[str, ...]] = {}

        async def step(name: str, text: str, session: str, **kw: Any) -> None:
            results[name] = (
                await engine.prepare_step(user(text), session=session, **kw)
            ).active_sets

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: step("long", "send an email slowly", "a", force_sets=["travel"])
            )
            await trio.sleep(1)
            nursery.start_soon(lambda: step("queued", "send an email", "a"))
            await trio.sleep(4)
            await step("other", "send an email", "b")  # expiry runs at t=5: a is in use
        await trio.sleep(0.5)  # within idle_s of the queued step's end
        await step("after", "send an email", "a")
    assert results["queued"] == ("travel",)
    assert results["after"] == ("travel",)
