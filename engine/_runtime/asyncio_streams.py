"""The asyncio bridge's subscriptions: an iterator that loses nothing to a cancelled read,
and the stop signals that end every open one (``toolroute.asyncio`` uses both)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import trio

from .hub import Delivery

__all__ = ["STOP_SIGNALS", "Deliveries", "StopSignals"]

#: The signals that ask a server to stop: each ends the subscriptions still open.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Runs ``on_stop`` in ``loop`` on a stop signal, then the handler installed before.

    A web server waits for the responses still open before its lifespan's shutdown (where
    the engine closes); a subscription streamed to a client never ends by itself, so the
    bridge ends them when the process is asked to stop. The handler is chained before the
    one installed (uvicorn's, say), which then runs as it would have.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, on_stop: Callable[[], None]) -> None:
        self._loop = loop
        self._on_stop = on_stop
        self._chained: dict[int, Any] = {}

    def chain(self) -> None:
        # Signal handlers belong to the main thread. A signal left to the OS (SIG_DFL, or
        # ignored) is left alone: no Python code runs for it, so there is nothing to chain.
        if threading.current_thread() is not threading.main_thread():
            return
        for number in STOP_SIGNALS:
            previous = signal.getsignal(number)
            if callable(previous):
                self._chained[number] = previous
                signal.signal(number, self._handle)

    def unchain(self) -> None:
        for number, previous in self._chained.items():
            # Only ours is put back; a handler installed after ours stays.
            if signal.getsignal(number) == self._handle:
                signal.signal(number, previous)
        self._chained.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes of whatever the loop was doing, so it
        # only schedules the work; then the handler that was there before runs as it would.
        with contextlib.suppress(RuntimeError):  # the loop closed under us: nothing is open
            self._loop.call_soon_threadsafe(self._on_stop)
        previous = self._chained.get(number)
        if callable(previous):
            previous(number, frame)


class Deliveries:
    """A subscription's deliveries as an asyncio async iterator.

    A cancelled ``__anext__`` (``asyncio.wait_for`` with a timeout, say) leaves its trio
    receive running, and the next ``__anext__`` takes its delivery: cancelling the receive
    itself could lose a delivery taken from the channel just before the cancel landed, and
    a lost delivery would be a loss nobody counts.

    Args:
        receive: the trio receive, as an asyncio awaitable (the guest run's ``call``).
        ended: whether the process was asked to stop (the iteration then ends).
    """

    def __init__(
        self, receive: Callable[[], Awaitable[Delivery]], ended: Callable[[], bool]
    ) -> None:
        self._receive = receive
        self._ended = ended
        self._receiving: asyncio.Future[Delivery] | None = None

    def __aiter__(self) -> Deliveries:
        return self

    async def __anext__(self) -> Delivery:
        if self._receiving is None:
            if self._ended():
                raise StopAsyncIteration
            self._receiving = asyncio.ensure_future(self._receive())
        receiving = self._receiving
        try:
            delivery = await asyncio.shield(receiving)  # a cancel here leaves it running
        except (trio.EndOfChannel, trio.ClosedResourceError):
            self._receiving = None
            raise StopAsyncIteration from None
        except asyncio.CancelledError:
            # Cancelled while its delivery was on the way, or before: either way the next
            # ``__anext__`` takes it. Only a receive cancelled itself (shutdown) is gone.
            if receiving.cancelled():
                self._receiving = None
            raise
        self._receiving = None
        return delivery

    def close(self) -> None:
        """Stop the receive still running (the subscription is ending)."""
        receiving, self._receiving = self._receiving, None
        if receiving is not None:
            receiving.add_done_callback(_retrieved)
            receiving.cancel()


def _retrieved(future: asyncio.Future[Delivery]) -> None:
    # The subscriber has gone: its last receive's result or error is nobody's to see.
    if not future.cancelled():
        future.exception()
