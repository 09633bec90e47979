"""Starting and stopping the one trio guest run of an asyncio loop, under races.

Each scenario runs ``asyncio.run`` in a thread of its own: trio's run state is per thread,
so a guest run that a broken scenario leaves behind cannot reach the other tests. A hang is
reported as a failure after a generous bound (never a timing assertion).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

import toolroute
import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, EngineConfig

T = TypeVar("T")

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
    ]
)
CONFIG = EngineConfig(cache=False)
SERVERS = [toolroute.Server("weather", "Forecasts"), toolroute.Server("mail", "Email")]
HANG_S = 60.0  # far past any scenario's real duration: only a deadlock reaches it


def run_alone(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(main())`` on a thread of its own; fails on a hang."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(main()))
        except BaseException as exc:  # handed to the test's thread below
            error.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_S)
    if thread.is_alive():
        pytest.fail(f"the scenario hung for {HANG_S:.0f} s (a guest run start or stop deadlock)")
    if error:
        raise error[0]
    return result[0]


class GuestRuns:
    """Records each guest run's start and end, in order (``"start"``/``"end"`` entries)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[str] = []
        real = toolroute_asyncio.trio.lowlevel.start_guest_run

        def recorded(*args: Any, done_callback: Callable[[Any], None], **kwargs: Any) -> None:
            def done(result: Any) -> None:
                self.log.append("end")
                done_callback(result)

            self.log.append("start")
            real(*args, done_callback=done, **kwargs)

        monkeypatch.setattr(toolroute_asyncio.trio.lowlevel, "start_guest_run", recorded)

    @property
    def running(self) -> int:
        return self.log.count("start") - self.log.count("end")

    async def wait_all_ended(self) -> None:
        while self.running:  # noqa: ASYNC110 - trio's done callback is a plain function
            await asyncio.sleep(0.001)


@pytest.fixture
def guest_runs(monkeypatch: pytest.MonkeyPatch) -> GuestRuns:
    return GuestRuns(monkeypatch)


def test_concurrent_first_calls_share_one_start(guest_runs: GuestRuns) -> None:

    async def main() -> list[Any]:
        calls = (toolroute_asyncio.route_servers("weather in Oslo", SERVERS) for _ in range(8))
        return await asyncio.gather(*calls)

    routings = run_alone(main)
    assert [set(r.selected) for r in routings] == [{"weather", "mail"}] * 8
    assert guest_runs.log == ["start", "end"]
    assert not toolroute_asyncio._hosts


def test_two_engines_opened_at_once_on_a_fresh_loop_share_the_guest_run(
    guest_runs: GuestRuns,
) -> None:

    async def main() -> list[str]:
        opened: list[toolroute_asyncio.AsyncioEngine] = []
        both = asyncio.Event()

        async def use(query: str) -> str:
            async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
                opened.append(engine)
                if len(opened) == 2:
                    both.set()
                await both.wait()  # both open at once
                return (await engine.select(query)).tool_ids[0]

        first = await asyncio.gather(use("weather in Oslo"), use("send an email"))
        assert opened[0]._host is opened[1]._host
        return first

    assert run_alone(main) == ["get_weather", "send_email"]
    assert guest_runs.log == ["start", "end"]
    assert not toolroute_asyncio._hosts


def test_an_open_as_the_last_block_is_left_shares_the_closing_engines_run(
    guest_runs: GuestRuns,
) -> None:
    async def main() -> list[str]:
        leaving = asyncio.Event()

        async def first() -> str:
            async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
                chosen = (await engine.select("weather in Oslo")).tool_ids[0]
                leaving.set()
            return chosen

        async def second() -> str:
            await leaving.wait()  # opens while the first engine closes
            async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
                return (await engine.select("send an email")).tool_ids[0]

        return list(await asyncio.gather(first(), second()))

    assert run_alone(main) == ["get_weather", "send_email"]
    assert guest_runs.log == ["start", "end"]
    assert not toolroute_asyncio._hosts


@pytest.mark.parametrize("turns", [0, 1, 2])
def test_an_open_while_the_last_close_stops_the_run_starts_a_fresh_one(
    guest_runs: GuestRuns, turns: int
) -> None:
    async def raced() -> list[str]:
        opened = asyncio.Event()
        holder: list[Any] = []

        async def first() -> str:
            async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
                holder.append(engine._host)
                opened.set()
                return (await engine.select("weather in Oslo")).tool_ids[0]

        async def second() -> str:
            await opened.wait()
            host = holder[0]
            while host.users:  # noqa: ASYNC110 - polled: the close counts its last user out
                await asyncio.sleep(0)
            for _ in range(turns):
                await asyncio.sleep(0)
            assert guest_runs.running == 1, "the first run ended before the open: no race"
            async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
                return (await engine.select("send an email")).tool_ids[0]

        return list(await asyncio.gather(first(), second()))

    assert run_alone(raced) == ["get_weather", "send_email"]
    # one run per loop: the second started only after the first had ended
    assert guest_runs.log == ["start", "end", "start", "end"]
    assert not toolroute_asyncio._hosts


def test_a_first_user_cancelled_while_the_run_starts_leaves_it_to_the_other() -> None:
    async def main() -> tuple[bool, str]:
        quitter = asyncio.create_task(toolroute_asyncio.route_servers("weather", SERVERS))
        stayer = asyncio.create_task(toolroute_asyncio.route_servers("weather", SERVERS))
        await asyncio.sleep(0)  # both are waiting for the one start
        quitter.cancel()
        routing = await stayer
        return quitter.cancelled(), routing.outcome.value

    cancelled, outcome = run_alone(main)
    assert cancelled
    assert outcome in ("skipped", "failed_open", "applied", "degraded")
    assert not toolroute_asyncio._hosts


def test_a_lone_first_user_cancelled_while_the_run_starts_leaves_nothing_behind(
    guest_runs: GuestRuns,
) -> None:
    async def main() -> str:
        quitter = asyncio.create_task(toolroute_asyncio.route_servers("weather", SERVERS))
        await asyncio.sleep(0)  # inside the start
        quitter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await quitter
        await guest_runs.wait_all_ended()  # the half-started run ends by itself
        assert not toolroute_asyncio._hosts
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            return (await engine.select("send an email")).tool_ids[0]

    assert run_alone(main) == "send_email"
    assert guest_runs.log == ["start", "end", "start", "end"]
    assert not toolroute_asyncio._hosts
