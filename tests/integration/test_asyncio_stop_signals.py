"""The asyncio bridge ends open subscriptions on a stop signal, then lets the handler that
was installed before it run; it puts that handler back when its guest run ends."""

from __future__ import annotations

import asyncio
import signal
from types import FrameType

import pytest

import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, EngineConfig
from toolroute.events import SubscriptionStarted

TOOLS = Catalog.from_plain([{"name": "get_weather", "description": "Weather forecast"}])
CONFIG = EngineConfig(cache=False)


def test_a_stop_signal_ends_subscriptions_and_reaches_the_host_handler() -> None:
    heard: list[int] = []

    def host_handler(number: int, frame: FrameType | None) -> None:
        heard.append(number)  # a server's handler: it only marks that it should exit

    async def main() -> list[object]:
        got: list[object] = []
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            async with engine.subscribe(snapshot=True) as deliveries:
                async for delivery in deliveries:
                    got.append(delivery.event)
                    signal.raise_signal(signal.SIGTERM)  # the loop is left to end it
            # Ended by the signal, not by the engine closing: the engine still answers.
            got.append(await engine.select("weather"))
            async with engine.subscribe() as late:  # after a stop: ends at once
                got.extend([d async for d in late])
        return got

    previous = signal.signal(signal.SIGTERM, host_handler)
    try:
        got = asyncio.run(asyncio.wait_for(main(), timeout=30))
        assert signal.getsignal(signal.SIGTERM) is host_handler  # put back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert heard == [signal.SIGTERM]
    assert isinstance(got[0], SubscriptionStarted)
    assert len(got) == 2  # the snapshot, the selection; nothing from the late subscription


def test_a_signal_left_to_the_os_is_not_chained() -> None:
    async def main() -> object:
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            return signal.getsignal(signal.SIGTERM), await engine.select("weather")

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        during, _ = asyncio.run(main())
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert during is signal.SIG_DFL


def test_a_block_cancelled_again_while_closing_still_lets_the_guest_run_finish() -> None:
    # A forced server exit cancels the host's tasks, sometimes more than once: the loop may
    # close right after, so the engine's block must not end before trio's guest run has.
    async def main() -> None:
        opened = asyncio.Event()

        async def hold() -> None:
            async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None):
                opened.set()
                await asyncio.sleep(100)

        task = asyncio.create_task(hold())
        await opened.wait()
        task.cancel()
        for _ in range(5):  # again, while it is closing
            await asyncio.sleep(0)
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.get_running_loop() not in toolroute_asyncio._hosts  # the run ended

    asyncio.run(main())
