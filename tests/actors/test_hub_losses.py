"""No silent loss: whatever a subscriber reads and however far it falls behind, every event
published is either delivered or counted to it, and a quiet reader learns the count within
100 ms (hypothesis over operation sequences, in virtual time)."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import example, given
from hypothesis import strategies as st

from toolroute._core.events import EventsDropped, SubscriptionStarted, WarmupProgress
from toolroute._runtime.hub import Delivery, EventHub

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(1, 12)),
        st.tuples(st.just("read"), st.integers(1, 6)),
        st.tuples(st.just("sleep"), st.sampled_from([0.0, 0.01, 0.05, 0.2])),
    ),
    max_size=30,
)


def state() -> SubscriptionStarted:
    return SubscriptionStarted(warmup="none", catalog_version=0, tools=1, fast_tier="off")


def run_in_virtual_time(
    ops: list[tuple[str, float]], buffer: int, snapshot: bool = False
) -> list[Delivery]:
    got: list[Delivery] = []

    async def main() -> None:
        hub = EventHub()
        published = 0
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            first = state if snapshot else None
            async with hub.subscribe(buffer=buffer, first=first) as deliveries:
                for op, amount in ops:
                    if op == "publish":
                        for _ in range(int(amount)):
                            hub.publish(WarmupProgress(done=published, total=0, time=0.0))
                            published += 1
                    elif op == "read":
                        for _ in range(int(amount)):
                            try:
                                got.append(deliveries.receive_nowait())
                            except trio.WouldBlock:
                                break
                    else:
                        await trio.sleep(amount)
                        if amount >= 0.2:
                            assert_no_loss_waits_while_there_is_room(hub, buffer)
                last_publish = trio.current_time()
                # Quiet from here on: the reader drains; nothing arrives for 100 ms at the end.
                while True:
                    with trio.move_on_after(0.1):
                        got.append(await deliveries.receive())
                        continue
                    break
                learned_at = trio.current_time() - 0.1  # when the last delivery came
            nursery.cancel_scope.cancel()
        if snapshot:
            assert isinstance(got[0].event, SubscriptionStarted)
        assert sum(isinstance(d.event, SubscriptionStarted) for d in got) == snapshot
        events = [d.event for d in got if isinstance(d.event, WarmupProgress)]
        counted = sum(d.dropped for d in got)
        assert len(events) + counted == published  # delivered or counted, never both
        assert counted == hub.statistics().dropped
        dones = [e.done for e in events if isinstance(e, WarmupProgress)]
        assert dones == sorted(dones)  # FIFO: a loss never reorders what arrives
        for notice in (d for d in got if isinstance(d.event, EventsDropped)):
            assert notice.event.count == notice.dropped > 0
        # Everything reached the quiet reader within 100 ms of the last publish, plus the
        # time it took to read the backlog (zero here: reading is instantaneous).
        assert learned_at - last_publish <= 0.1

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return got


def assert_no_loss_waits_while_there_is_room(hub: EventHub, buffer: int) -> None:
    """After a quiet ``LOSS_REPORT_S`` and more, a loss is still untold only when the
    subscriber's every slot is taken: room the reader made carries the count, even while
    the notice in the spare slot is unread."""
    (sub,) = hub._subscribers
    used = sub.send.statistics().current_buffer_used
    full = used - sub.notice_unread(used) >= buffer
    assert sub.pending_dropped == 0 or full, (sub.pending_dropped, used)


@given(ops=OPS, buffer=st.integers(1, 5), snapshot=st.booleans())
# The event ahead of the unread notice is read: its slot carries the next loss's count.
@example(ops=[("publish", 3), ("read", 1), ("sleep", 0.2)], buffer=1, snapshot=False)
def test_every_event_is_delivered_or_counted_and_a_quiet_reader_learns_the_count(
    ops: list[tuple[str, float]], buffer: int, snapshot: bool
) -> None:
    run_in_virtual_time(ops, buffer, snapshot)


def test_a_reader_that_never_falls_behind_gets_no_notice() -> None:
    got = run_in_virtual_time([("publish", 3), ("read", 3), ("sleep", 0.2)], buffer=4)
    assert [d.dropped for d in got] == [0, 0, 0]
    assert not any(isinstance(d.event, EventsDropped) for d in got)


def test_a_reader_that_made_room_learns_the_losses_before_it_reaches_the_notice() -> None:
    # Four events fill the buffer; the fifth is lost and told at once by the notice in the
    # spare slot; three more are lost behind that unread notice. The reader then reads one
    # event: the room it made carries the count of three, so a reader that is slowly
    # working through its backlog does not wait until it reaches the first notice.
    async def main() -> tuple[list[Delivery], list[Delivery]]:
        hub = EventHub()
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            async with hub.subscribe(buffer=4) as deliveries:
                for done in range(8):
                    hub.publish(WarmupProgress(done=done, total=0, time=0.0))
                await trio.sleep(0.03)
                first = [deliveries.receive_nowait()]
                await trio.sleep(0.07)  # 100 ms after the losses
                rest = []
                while True:
                    try:
                        rest.append(deliveries.receive_nowait())
                    except trio.WouldBlock:
                        break
            nursery.cancel_scope.cancel()
        return first, rest

    first, rest = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [d.event.done for d in first] == [0]  # type: ignore[union-attr]
    assert [(type(d.event), d.dropped) for d in rest] == [
        (WarmupProgress, 0),
        (WarmupProgress, 0),
        (WarmupProgress, 0),
        (EventsDropped, 1),
        (EventsDropped, 3),
    ]
