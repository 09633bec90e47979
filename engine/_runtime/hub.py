"""The event hub: fans events out to subscribers, each with its own bounded buffer.

``publish`` is synchronous and never blocks the engine: each subscriber has a bounded
memory channel, filled with ``send_nowait``; when it is full the event is dropped *for
that subscriber* and counted, and the next event it does receive reports how many it lost.
A ``MemorySendChannel.clone()`` would share work, not broadcast, so each subscriber gets
its own channel (STYLE §4).

A subscriber that stops hearing from the engine must still learn that it lost events, so
each channel holds one slot more than the subscriber's buffer, for an ``events.dropped``
notice: ``publish`` sends one the moment it loses an event, and when the last notice is
still unread the hub's reporter (:meth:`EventHub.run`) sends the rest within
``LOSS_REPORT_S`` of the subscriber reading anything (the notice, or an event ahead of it),
whether or not anything else is published. Events published
inside a public call are stamped with its request id and session on the way in
(``request_context.tagged``).
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import attrs
import trio

from .._core.errors import ConfigError
from .._core.events import Event, EventsDropped
from .event_log import log_event
from .request_context import tagged
from .telemetry import count_dropped

__all__ = ["DEFAULT_BUFFER", "LOSS_REPORT_S", "Delivery", "EventHub", "EventStatistics"]

#: Events a subscriber may fall behind by before it starts losing them. Generous for a
#: consumer that writes JSON lines; size real buffers from ``statistics().peak_buffer_used``.
DEFAULT_BUFFER = 256

#: How soon after a loss the reporter sends its ``events.dropped`` notice: half the 100 ms
#: a dashboard may stay wrong, so one missed tick still keeps the promise. Losses within one
#: interval share a notice.
LOSS_REPORT_S = 0.05


@attrs.frozen(kw_only=True)
class Delivery:
    """One event as one subscriber receives it.

    Attributes:
        event: the event, the same object every subscriber receives.
        dropped: events this subscriber lost, because its buffer was full, between the
            delivery before this one and this one.
    """

    event: Event
    dropped: int = 0


@attrs.frozen(kw_only=True)
class EventStatistics:
    """Counters since the hub was made.

    Attributes:
        subscribers: subscribers now registered.
        published: events passed to ``publish`` while the hub was open.
        dropped: events lost to full buffers, summed over subscribers.
    """

    subscribers: int
    published: int
    dropped: int


class _Offered(enum.Enum):
    DELIVERED = "delivered"
    LOST_REPORTED = "lost, and a notice says so"
    LOST_PENDING = "lost, to be reported once the unread notice is read"


@attrs.define(eq=False)
class _Subscriber:
    """One subscriber's channel and its loss bookkeeping.

    The channel holds ``buffer`` events plus one ``events.dropped`` notice, which ``publish``
    sends at the first loss. Losses while that notice is unread are carried by the next
    event that finds room or, if none is published, by a notice the reporter puts in the
    room the reader made. The reporter sends at most one such notice per ``LOSS_REPORT_S``,
    so notices take at most one event slot per interval from a subscriber behind.
    """

    send: trio.MemorySendChannel[Delivery]
    #: Events the subscriber may fall behind by; the channel has one slot more.
    buffer: int
    # Lost since the last delivery put into the channel. The channel is FIFO, so that is
    # also the count lost since the last delivery the subscriber *received*.
    pending_dropped: int = 0
    #: Deliveries ever put into the channel; minus those still in it, those received.
    sent: int = 0
    #: The sequence number of the last notice sent (-1: none yet).
    notice_at: int = -1

    def put(self, delivery: Delivery) -> None:
        self.send.send_nowait(delivery)  # never blocks: the slots are counted before
        self.sent += 1
        self.pending_dropped = 0

    def notice_unread(self, used: int) -> bool:
        return self.notice_at >= self.sent - used

    def offer(self, event: Event) -> _Offered:
        """Put ``event`` in the channel if an event slot is free (carrying the count of
        losses before it); else count the loss, and send a notice at once if none is
        unread (the first loss of a burst is told with no delay).

        Raises:
            BrokenResourceError: the subscriber left.
        """
        used = self.send.statistics().current_buffer_used
        unread = self.notice_unread(used)
        if used - unread < self.buffer:
            self.put(Delivery(event=event, dropped=self.pending_dropped))
            return _Offered.DELIVERED
        self.pending_dropped += 1
        if unread:
            return _Offered.LOST_PENDING
        self.report()
        return _Offered.LOST_REPORTED

    def report(self) -> bool:
        """Send the pending count as a notice: in the spare slot, or, while the notice there
        is still unread, in an event slot the reader has freed (it stays behind its
        backlog otherwise: a slow reader would wait to reach that notice to learn of the
        losses after it). ``True`` when sent or nothing was pending; ``False`` when every
        slot is taken."""
        if self.pending_dropped == 0:
            return True
        used = self.send.statistics().current_buffer_used
        unread = self.notice_unread(used)
        if unread and used - unread >= self.buffer:
            return False
        count = self.pending_dropped
        if not unread:
            self.notice_at = self.sent  # this one holds the spare slot
        self.put(Delivery(event=EventsDropped(count=count), dropped=count))
        return True


class EventHub:
    """Fans events out to subscribers without ever blocking the publisher.

    **Resource handling:** the hub owns the send end of every subscriber's channel;
    :meth:`subscribe`'s block owns the receive end. Leaving the block unsubscribes and
    closes both. :meth:`close` closes every send end, so each subscriber drains what is
    buffered and its iteration then ends.
    """

    def __init__(self) -> None:
        self._subscribers: list[_Subscriber] = []
        self._published = 0
        self._dropped = 0
        self._closed = False
        #: Set while some subscriber has a loss not yet reported.
        self._losses = trio.Event()

    def publish(self, event: Event) -> None:
        """Offer ``event`` to every subscriber; never blocks, never checkpoints.

        A subscriber whose buffer is full loses the event (counted, and reported on its
        next delivery); one whose receive end was closed is removed. After :meth:`close`,
        publishing does nothing: services may still report while the engine shuts down.

        Call it from the trio thread; from a worker thread use
        ``trio.from_thread.run_sync(hub.publish, event)``.
        """
        if self._closed:
            return
        self._published += 1
        event = tagged(event)
        log_event(event)
        gone: list[_Subscriber] = []
        lost_before = self._dropped
        for sub in self._subscribers:
            try:
                offered = sub.offer(event)
            except trio.BrokenResourceError:
                gone.append(sub)
                continue
            if offered is not _Offered.DELIVERED:
                self._dropped += 1
            if offered is _Offered.LOST_PENDING:
                self._losses.set()  # the reporter tells it once the notice is read
        for sub in gone:
            self._remove(sub)
        if self._dropped != lost_before:
            count_dropped(self._dropped - lost_before)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The loss reporter, for losses ``publish`` could not tell at once.

        ``publish`` sends a loss notice the moment it loses an event, unless the
        subscriber has not read the last notice yet; such losses wait here. Each
        ``LOSS_REPORT_S`` the reporter sends them to every subscriber that has room again
        (it read the notice, or an event queued before it), until none is left, so a
        subscriber learns them within ``LOSS_REPORT_S`` of reading even when nothing else
        is published. It sleeps on an event while nothing is pending: an idle engine costs
        nothing.
        """
        task_status.started()
        while True:
            await self._losses.wait()
            if self._closed:
                return
            await trio.sleep(LOSS_REPORT_S)
            if self._report_losses():
                self._losses = trio.Event()  # no checkpoint since the look: none is missed

    def _report_losses(self) -> bool:
        """Send each pending loss as a notice; ``True`` when none is left unreported."""
        reported_all = True
        gone: list[_Subscriber] = []
        for sub in self._subscribers:
            try:
                reported_all &= sub.report()
            except trio.BrokenResourceError:
                gone.append(sub)
        for sub in gone:
            self._remove(sub)
        return reported_all

    @asynccontextmanager
    async def subscribe(
        self, *, buffer: int = DEFAULT_BUFFER, first: Callable[[], Event] | None = None
    ) -> AsyncIterator[trio.MemoryReceiveChannel[Delivery]]:
        """Receive every event published from now on, as :class:`Delivery` items.

        Usage::

            async with hub.subscribe(buffer=64) as deliveries:
                async for delivery in deliveries:
                    print(delivery.dropped, to_json(delivery.event))

        Args:
            buffer: events this subscriber may fall behind by before it loses them.
            first: makes the subscription's first delivery (the engine's state), called
                as the subscriber is registered, so no event falls between the two. It
                takes one of the ``buffer`` slots until it is read.

        Yields:
            The subscriber's receive channel, an async iterator of deliveries. It ends when
            the hub closes, after the buffered deliveries.

        Raises:
            ConfigError: ``buffer`` is not an integer of at least 1.

        **Cancellation:** entering is a checkpoint, before anything is registered; a
        cancelled ``async for`` leaves the block, which unsubscribes.

        **Resource handling:** leaving the block, however it is left, unsubscribes and
        closes the channel; deliveries still buffered are discarded. Subscribing to a
        closed hub yields a channel that is already at its end.
        """
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
            raise ConfigError(f"buffer must be an integer of at least 1, got {buffer!r}")
        # A checkpoint like any trio operation; nothing is registered yet, so a cancel here
        # leaves nothing behind.
        await trio.lowlevel.checkpoint()
        # One slot more than ``buffer``: the loss notice's, which ``publish`` never fills.
        send, receive = trio.open_memory_channel[Delivery](buffer + 1)
        sub = _Subscriber(send, buffer)
        if self._closed:
            send.close()
        else:
            if first is not None:
                sub.put(Delivery(event=first()))
            self._subscribers.append(sub)
        try:
            with receive:
                yield receive
        finally:
            self._remove(sub)

    def close(self) -> None:
        """End every subscription: each drains its buffer, then its iteration stops.

        Idempotent. Later :meth:`publish` calls do nothing; later subscriptions end at once.
        """
        self._closed = True
        self._losses.set()  # the reporter wakes, sees the hub closed, and ends
        subscribers, self._subscribers = self._subscribers, []
        for sub in subscribers:
            sub.send.close()

    def statistics(self) -> EventStatistics:
        """The hub's counters now."""
        return EventStatistics(
            subscribers=len(self._subscribers),
            published=self._published,
            dropped=self._dropped,
        )

    def _remove(self, sub: _Subscriber) -> None:
        # Idempotent: reached from publish (receiver closed), from the subscriber's exit,
        # or not at all after close() took every subscriber.
        if sub in self._subscribers:
            self._subscribers.remove(sub)
        sub.send.close()
