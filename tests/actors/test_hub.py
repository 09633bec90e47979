"""The event hub fans out without blocking, drops and counts, and cleans up after itself."""

from __future__ import annotations

import contextlib
import itertools

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from toolroute import ConfigError
from toolroute._core.events import Event, EventsDropped, WarmupProgress
from toolroute._runtime.hub import Delivery, EventHub, EventStatistics


def progress(n: int) -> WarmupProgress:
    return WarmupProgress(done=n, total=1_000_000, time=0.0)


def done_of(delivery: Delivery) -> int:
    assert isinstance(delivery.event, WarmupProgress)
    return delivery.event.done


def seen(delivery: Delivery) -> tuple[int | str, int]:
    """An event as (its number, dropped); a loss notice as ("lost", its count)."""
    if isinstance(delivery.event, EventsDropped):
        assert delivery.event.count == delivery.dropped
        return "lost", delivery.dropped
    return done_of(delivery), delivery.dropped


def drain(deliveries: trio.MemoryReceiveChannel[Delivery]) -> list[Delivery]:
    got = []
    while True:
        try:
            got.append(deliveries.receive_nowait())
        except trio.WouldBlock:
            return got


async def test_subscriber_receives_every_event_in_order() -> None:
    hub = EventHub()
    async with hub.subscribe(buffer=8) as deliveries:
        for n in range(5):
            hub.publish(progress(n))
        got = drain(deliveries)
    assert [done_of(d) for d in got] == [0, 1, 2, 3, 4]
    assert all(d.dropped == 0 for d in got)


async def test_slow_subscriber_loses_events_and_next_delivery_says_how_many() -> None:
    hub = EventHub()
    async with hub.subscribe(buffer=2) as deliveries:
        for n in range(10):
            hub.publish(progress(n))
        # The first loss is told at once, in the slot kept for it; 3..9 wait for a read.
        assert [seen(d) for d in drain(deliveries)] == [(0, 0), (1, 0), ("lost", 1)]
        hub.publish(progress(10))
        hub.publish(progress(11))
        # The rest of the count arrives with the next delivery, then resets.
        assert [seen(d) for d in drain(deliveries)] == [(10, 7), (11, 0)]
    assert hub.statistics() == EventStatistics(subscribers=0, published=12, dropped=8)


async def test_publish_never_blocks_even_with_a_full_buffer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = EventHub()
    async with hub.subscribe(buffer=1) as deliveries:
        hub.publish(progress(0))  # the buffer is now full
        start = trio.current_time()
        # assert_no_checkpoints fails on any checkpoint (a stronger check than running the
        # loop in a cancelled scope), and virtual time cannot have moved either.
        with trio.testing.assert_no_checkpoints():
            for n in range(1, 10_001):
                hub.publish(progress(n))
        assert trio.current_time() == start
        assert hub.statistics().dropped == 10_000
        assert [seen(d) for d in drain(deliveries)] == [(0, 0), ("lost", 1)]
        hub.publish(progress(10_001))
        assert [seen(d) for d in drain(deliveries)] == [(10_001, 9_999)]


async def test_subscribers_are_independent() -> None:
    hub = EventHub()
    async with hub.subscribe(buffer=100) as fast, hub.subscribe(buffer=1) as slow:
        for n in range(5):
            hub.publish(progress(n))
            assert done_of(fast.receive_nowait()) == n
        hub.publish(progress(5))
        assert [seen(d) for d in drain(slow)] == [(0, 0), ("lost", 1)]
        hub.publish(progress(6))
        assert [seen(d) for d in drain(slow)] == [(6, 4)]
        assert [(done_of(d), d.dropped) for d in drain(fast)] == [(5, 0), (6, 0)]


async def test_every_subscriber_receives_the_same_event_object() -> None:
    hub = EventHub()
    event = progress(1)
    async with hub.subscribe() as a, hub.subscribe() as b:
        hub.publish(event)
        assert a.receive_nowait().event is event
        assert b.receive_nowait().event is event


async def test_leaving_the_block_unsubscribes() -> None:
    hub = EventHub()
    async with hub.subscribe(buffer=1) as deliveries:
        assert hub.statistics().subscribers == 1
    assert hub.statistics().subscribers == 0
    hub.publish(progress(0))
    hub.publish(progress(1))
    assert hub.statistics().dropped == 0  # nobody is left to lose them
    with pytest.raises(trio.ClosedResourceError):
        deliveries.receive_nowait()


async def test_an_error_in_the_block_unsubscribes() -> None:
    hub = EventHub()
    with pytest.raises(KeyError):
        async with hub.subscribe():
            raise KeyError("boom")
    assert hub.statistics().subscribers == 0


async def test_cancelled_subscriber_unsubscribes(autojump_clock: trio.testing.MockClock) -> None:
    hub = EventHub()
    received: list[Event] = []

    async def consume() -> None:
        async with hub.subscribe() as deliveries:
            async for delivery in deliveries:
                # Not a comprehension: the events must be kept when the loop is cancelled.
                received.append(delivery.event)  # noqa: PERF401

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.testing.wait_all_tasks_blocked()
            hub.publish(progress(0))
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel("test over")
    assert received == [progress(0)]
    assert hub.statistics().subscribers == 0


async def test_closed_receiver_is_removed_on_next_publish() -> None:
    hub = EventHub()
    async with hub.subscribe() as deliveries:
        deliveries.close()
        assert hub.statistics().subscribers == 1
        hub.publish(progress(0))
        assert hub.statistics() == EventStatistics(subscribers=0, published=1, dropped=0)


async def test_close_ends_iteration_after_the_buffered_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = EventHub()
    received: list[list[int]] = [[], []]

    async def consume(into: list[int], *, task_status: trio.TaskStatus[None]) -> None:
        async with hub.subscribe() as deliveries:
            task_status.started()
            async for delivery in deliveries:
                into.append(done_of(delivery))
                await trio.sleep(1)  # slower than the publisher: events wait in the buffer

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for into in received:
                await nursery.start(consume, into)
            for n in range(3):
                hub.publish(progress(n))
            hub.close()
    assert received == [[0, 1, 2], [0, 1, 2]]
    assert hub.statistics().subscribers == 0


async def test_after_close_publish_does_nothing_and_subscriptions_end_at_once() -> None:
    hub = EventHub()
    hub.close()
    hub.close()  # idempotent
    hub.publish(progress(0))
    async with hub.subscribe() as deliveries:
        assert [d async for d in deliveries] == []
    assert hub.statistics() == EventStatistics(subscribers=0, published=0, dropped=0)


@pytest.mark.parametrize("buffer", [0, -1, True, 1.5, float("inf")])
async def test_buffer_must_be_a_positive_integer(buffer: int) -> None:
    hub = EventHub()
    with pytest.raises(ConfigError, match="at least 1"):
        async with hub.subscribe(buffer=buffer):
            pass  # pragma: no cover
    assert hub.statistics().subscribers == 0


@given(
    buffer=st.integers(1, 5),
    ops=st.lists(st.sampled_from(["publish", "receive"]), max_size=60),
)
def test_every_published_event_is_received_or_counted_as_dropped(
    buffer: int, ops: list[str]
) -> None:
    """A model check: with drops reported, a subscriber can account for every event."""

    async def main() -> None:
        hub = EventHub()
        published = 0
        received: list[Delivery] = []
        async with hub.subscribe(buffer=buffer) as deliveries:
            for op in ops:
                if op == "publish":
                    hub.publish(progress(published))
                    published += 1
                else:
                    with contextlib.suppress(trio.WouldBlock):
                        received.append(deliveries.receive_nowait())
            received.extend(drain(deliveries))
            # Events lost after the last delivery are reported only by the next one.
            hub.publish(progress(published))
            received.extend(drain(deliveries))
            published += 1
        accounted = 0
        for delivery in received:
            accounted += delivery.dropped
            if isinstance(delivery.event, EventsDropped):
                continue
            assert done_of(delivery) == accounted  # exactly the lost ones were skipped
            accounted += 1
        assert accounted == published
        events = [d for d in received if not isinstance(d.event, EventsDropped)]
        assert hub.statistics().dropped == published - len(events)
        # Notices never crowd events out: at most one is in the channel at a time.
        assert all(
            not (isinstance(a.event, EventsDropped) and isinstance(b.event, EventsDropped))
            for a, b in itertools.pairwise(received)
        )

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
