"""Sessions in the running engine: expiry on trio's clock, and a session in use kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from toolroute import Catalog, ToolSet
from toolroute._core.config import Deadlines, EngineConfig, SessionConfig, WarmupConfig
from toolroute._runtime.engine import open_engine
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


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def test_idle_sessions_expire_on_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    config = EngineConfig(cache=False, sessions=SessionConfig(idle_s=10))
    async with open_engine(TOOLS, config=config, embedder=None, tool_sets=[TRAVEL]) as engine:
        first = await engine.prepare_step(user("send an email"), session="a", force_sets=["travel"])
        assert first.active_sets == ("travel",)
        await trio.sleep(9)  # virtual time: fresh still
        assert (await engine.prepare_step(user("read a file"), session="a")).active_sets == (
            "travel",
        )
        await trio.sleep(11)  # idle past idle_s: the session starts again
        later = await engine.prepare_step(user("read a file"), session="a")
    assert later.active_sets == ()


def slow_for(word: str, seconds: float) -> Callable[..., Any]:
    """An inline CPU seam where a batch holding ``word`` takes ``seconds`` of virtual time."""

    async def run_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        texts = args[0] if args and isinstance(args[0], list) else []
        if any(isinstance(t, str) and word in t for t in texts):
            await trio.sleep(seconds)
        return fn(*args)

    return run_cpu


async def test_a_session_in_use_is_not_evicted_and_keeps_its_steps_updates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = EngineConfig(
        cache=False,
        warmup=WarmupConfig(wait=True),
        deadlines=Deadlines(embed_s=30),
        sessions=SessionConfig(max_sessions=1),
    )
    async with open_engine(
        TOOLS,
        config=config,
        embedder=HashingEmbedder(),
        run_cpu=slow_for("slowly", 5.0),
        tool_sets=[TRAVEL],
    ) as engine:
        async with trio.open_nursery() as nursery:
            # Session "a" forces a set on a step that waits for its embedding ...
            nursery.start_soon(
                lambda: engine.prepare_step(
                    user("send an email slowly"), session="a", force_sets=["travel"]
                )
            )
            await trio.sleep(1)
            # ... while session "b" arrives: with room for one session, "a" is the one to
            # drop, but it is in use. (b's step needs no ranking: it ends, and b is dropped
            # on release, before a's step does.)
            await engine.prepare_step(user(""), session="b")
        later = await engine.prepare_step(user("read a file"), session="a")
    assert later.active_sets == ("travel",)  # the step's update was not lost


async def test_a_step_cancelled_mid_flight_releases_its_session(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from toolroute._core.stores import Stores
    from toolroute._stores.sessions import MemorySessionStore

    sessions = MemorySessionStore(max_sessions=1)
    config = EngineConfig(
        cache=False, warmup=WarmupConfig(wait=True), deadlines=Deadlines(embed_s=30)
    )
    async with open_engine(
        TOOLS,
        config=config,
        embedder=HashingEmbedder(),
        run_cpu=slow_for("slowly", 5.0),
        tool_sets=[TRAVEL],
        stores=Stores(sessions=sessions),
    ) as engine:
        with trio.move_on_after(1) as scope:
            await engine.prepare_step(
                user("send an email slowly"), session="a", force_sets=["travel"]
            )
        assert scope.cancelled_caught
        # The step actor unwinds the abandoned step as soon as it is scheduled again.
        await trio.testing.wait_all_tasks_blocked()
        entry = sessions._sessions["a"]
        assert entry.holders == 0  # not held any more: "b" may now evict "a"
        step = await engine.prepare_step(user("read a file"), session="a")
        assert step.active_sets == ("travel",)  # what the cancelled step had applied stays
        await engine.prepare_step(user("read a file"), session="b")
    assert "a" not in sessions
    assert len(sessions) == 1
