"""A cancelled ``__anext__`` on an asyncio subscription loses nothing: the next one gets the
delivery the cancelled one was waiting for (timeouts around a read are common in servers)."""

from __future__ import annotations

import asyncio

import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, EngineConfig
from toolroute.events import SelectionFinished

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast"},
        {"name": "send_email", "description": "Send an email"},
    ]
)
CONFIG = EngineConfig(cache=False)
REQUESTS = 300


def test_reads_cancelled_by_timeouts_lose_no_delivery() -> None:
    async def main() -> tuple[list[str | None], list[str | None], int]:
        async with (
            toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine,
            engine.subscribe(buffer=REQUESTS * 2, snapshot=False) as deliveries,
        ):
            iterator = aiter(deliveries)
            got: list[str | None] = []
            timeouts = 0

            async def read() -> None:
                nonlocal timeouts
                while len(got) < REQUESTS:
                    try:
                        # A timeout this short cancels many reads mid-flight.
                        delivery = await asyncio.wait_for(anext(iterator), timeout=0.0005)
                    except TimeoutError:
                        timeouts += 1
                        continue
                    assert isinstance(delivery.event, SelectionFinished)
                    assert delivery.dropped == 0
                    got.append(delivery.event.request_id)

            reader = asyncio.create_task(read())
            selections = []
            for n in range(REQUESTS):
                selections.append(await engine.select("weather" if n % 2 else "email"))
                await asyncio.sleep(0)
            await asyncio.wait_for(reader, timeout=30)  # only a lost delivery waits this long
            return got, [s.request_id for s in selections], timeouts

    got, sent, timeouts = asyncio.run(main())
    assert got == sent  # every delivery, in order, none twice
    assert timeouts > 0  # the test cancelled reads, or it proves nothing
