"""Events under 200 concurrent asyncio requests: no silent loss, and how soon each loss is
counted to its subscriber.

    python tests/bench/bench_events.py [--datasets ../shared/datasets] [--concurrency 200]
        [--rounds 5] [--embedder minilm|hashing|none]

The engine runs through ``toolroute.asyncio``; each round starts ``--concurrency`` asyncio
tasks at once (``select`` and ``prepare_step`` with sessions, half each). Three subscribers
listen: ``reference`` (a buffer no burst fills: it sees every event, and so tells which
events the others lost), ``slow`` (buffer 16, 2 ms of work per event) and ``stalled``
(buffer 8, reads nothing until the rounds are over).

For each subscriber it prints: events published while it listened, events delivered, losses
counted (``Delivery.dropped``, ``events.dropped`` notices), and the silent loss (published
− delivered − counted; it must be 0). For each loss it reads, from the reference, when the
lost event was made and when the delivery that counted it was put in the subscriber's queue
(the notice's or event's ``time``): ``counted_after_ms`` is that delay, p50 and max;
``read_after_ms`` runs on to when the subscriber read that delivery (when it learned). It
includes the time the subscriber took to read the notice that held its spare slot (its own
backlog); ``hub_delay_ms`` leaves that out: from the later of the loss and that read. A
``stalled`` subscriber cannot be told while its one spare slot holds an unread notice, so
its figure is ``learned_after_read_ms``: from its first read to its last loss counted.
Prints one JSON line per subscriber, then a summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, EngineConfig
from toolroute.evaluate import load_queries
from toolroute.events import Delivery, Event, EventsDropped, SubscriptionStarted
from toolroute.providers import HashingEmbedder

HERE = Path(__file__).resolve().parent


class Subscriber:
    def __init__(self, name: str, buffer: int, work_s: float, stalled: bool) -> None:
        self.name, self.buffer, self.work_s, self.stalled = name, buffer, work_s, stalled
        self.got: list[tuple[Delivery, float]] = []  # delivery, wall-clock time read
        self.started_reading = 0.0
        self.subscribed = asyncio.Event()
        self.rounds_done = asyncio.Event()

    async def listen(self, engine: toolroute_asyncio.AsyncioEngine, stop: asyncio.Event) -> None:
        async with engine.subscribe(buffer=self.buffer, snapshot=True) as deliveries:
            iterator = aiter(deliveries)
            self.got.append((await anext(iterator), time.time()))  # the snapshot
            self.subscribed.set()
            if self.stalled:
                await self.rounds_done.wait()
            self.started_reading = time.time()
            while not stop.is_set():
                try:
                    delivery = await asyncio.wait_for(anext(iterator), timeout=0.25)
                except TimeoutError:
                    continue
                self.got.append((delivery, time.time()))
                if self.work_s:
                    await asyncio.sleep(self.work_s)


def events_of(sub: Subscriber) -> list[Event]:
    return [
        d.event for d, _ in sub.got if not isinstance(d.event, SubscriptionStarted | EventsDropped)
    ]


def loss_delays(
    sub: Subscriber, reference: list[Event]
) -> tuple[list[float], list[float], list[float], int]:
    """Per lost event, seconds from its making to the delivery that counted it being put in
    the subscriber's queue; the same from the later of its making and the subscriber's
    reading the notice that held the spare slot (the hub's own delay); from its making to
    the subscriber reading the delivery that counted it; and how many losses the reference
    could not place (must be 0: counts are exact)."""
    position = {id(event): i for i, event in enumerate(reference)}
    at = 0  # the next reference event not yet delivered nor counted
    delays: list[float] = []
    hub_delays: list[float] = []
    read_delays: list[float] = []
    misplaced = 0
    notice_read = 0.0  # when the subscriber read its last notice
    for delivery, read_at in sub.got:
        event = delivery.event
        if isinstance(event, SubscriptionStarted):
            continue
        lost = reference[at : at + delivery.dropped]
        delays.extend(event.time - e.time for e in lost)
        read_delays.extend(read_at - e.time for e in lost)
        hub_delays.extend(max(0.0, event.time - max(e.time, notice_read)) for e in lost)
        at += delivery.dropped
        if isinstance(event, EventsDropped):
            notice_read = read_at
        if not isinstance(event, EventsDropped):
            index = position.get(id(event))
            if index != at:
                misplaced += 1
                at = index if index is not None else at
            at += 1
    return delays, hub_delays, read_delays, misplaced


def percentile_ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0, 2)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    root = Path(args.datasets) / "metatool"
    catalog = Catalog.from_file(root / "tools.json")
    queries = [q.text for q in load_queries(root / "queries.json")]
    embedder: Any = {
        "minilm": toolroute_asyncio._DEFAULT,
        "hashing": HashingEmbedder(),
        "none": None,
    }[args.embedder]
    config = EngineConfig(cache=False)
    subscribers = [
        Subscriber("reference", 1_000_000, 0.0, stalled=False),
        Subscriber("slow", 16, 0.002, stalled=False),
        Subscriber("stalled", 8, 0.0, stalled=True),
    ]
    stop = asyncio.Event()
    async with toolroute_asyncio.open_engine(
        catalog, config=config, embedder=embedder, decider=None
    ) as engine:
        await engine.ready()
        listeners = [asyncio.create_task(s.listen(engine, stop)) for s in subscribers]
        for s in subscribers:
            await s.subscribed.wait()
        before = engine.statistics().events.published
        n = 0
        round_s = []
        for _ in range(args.rounds):
            calls = []
            for i in range(args.concurrency):
                query = queries[n % len(queries)]
                n += 1
                if i % 2:
                    calls.append(engine.select(query))
                else:
                    calls.append(engine.prepare_step(query, session=f"s{i % 50}"))
            started = time.monotonic()
            await asyncio.gather(*calls)
            round_s.append(time.monotonic() - started)
        published = engine.statistics().events.published - before
        for s in subscribers:
            s.rounds_done.set()
        await asyncio.sleep(1.0)  # quiet: every loss must be counted by now
        stop.set()
        await asyncio.gather(*listeners)
        hub_dropped = engine.statistics().events.dropped
    reference = events_of(subscribers[0])
    rows = []
    for s in subscribers:
        delivered = len(events_of(s))
        counted = sum(d.dropped for d, _ in s.got)
        delays, hub_delays, read_delays, misplaced = loss_delays(s, reference)
        row: dict[str, Any] = {
            "subscriber": s.name,
            "buffer": s.buffer,
            "published": published,
            "delivered": delivered,
            "counted_lost": counted,
            "silent_loss": published - delivered - counted,
            "misplaced_counts": misplaced,
            "notices": sum(isinstance(d.event, EventsDropped) for d, _ in s.got),
        }
        if s.stalled:
            last_count = max((t for d, t in s.got if d.dropped), default=s.started_reading)
            row["learned_after_read_ms"] = round((last_count - s.started_reading) * 1000.0, 2)
        elif delays:
            row["counted_after_ms_p50"] = percentile_ms(delays, 0.5)
            row["counted_after_ms_max"] = percentile_ms(delays, 1.0)
            row["hub_delay_ms_p50"] = percentile_ms(hub_delays, 0.5)
            row["hub_delay_ms_max"] = percentile_ms(hub_delays, 1.0)
            row["read_after_ms_p50"] = percentile_ms(read_delays, 0.5)
            row["read_after_ms_max"] = percentile_ms(read_delays, 1.0)
        rows.append(row)
    rows.append(
        {
            "summary": True,
            "embedder": args.embedder,
            "concurrency": args.concurrency,
            "rounds": args.rounds,
            "requests": n,
            "round_s_p50": round(statistics.median(round_s), 3),
            "hub_dropped": hub_dropped,
            "silent_loss_total": sum(r["silent_loss"] for r in rows),
        }
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--embedder", choices=("minilm", "hashing", "none"), default="minilm")
    args = parser.parse_args()
    for row in asyncio.run(run(args)):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
