"""The async driver of the retry core: the one loop every remote provider runs on under trio,
deciders and generators alike.

A vendor is a codec: it builds the request body, reads a 2xx reply, and says what a refusal
means (:class:`~.retry.ErrorCodec`). The retry core (:mod:`.retry`) decides what follows each
attempt; this loop only carries it out: one deadline per call (``move_on_after``), the
attempts, and the waits. The remote embedder is synchronous and drives the same core from
:class:`~.transport.JsonClient`.

The loop takes a :class:`Sender`: the httpx client (:class:`~.transport.AsyncJsonClient`) in
production, any object with the same ``post`` in tests, the way httpx takes a transport.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TypedDict

import trio

from .retry import ErrorCodec, Redactor, Reply, RetryCore, Stop, TransportError, Wait
from .rules import RetryPolicy
from .transport import AsyncJsonClient, AsyncTransport


class LoopOptions(TypedDict, total=False):
    """The loop options every remote provider's constructor takes, under these names.

    Keys:
        timeout_s: budget of one call, retries and waits included; each
            provider documents its default.
        retry: attempts after the first and their back-off.
        transport: an httpx async transport instead of the network (tests).
        rng: the jitter source, a function returning a float in [0, 1).
    """

    timeout_s: float | None
    retry: RetryPolicy
    transport: AsyncTransport | None
    rng: Callable[[], float] | None


class Sender(Protocol):
    """One attempt: POST a JSON body, return the whole reply (any status)."""

    async def post(self, path: str, payload: object) -> Reply:
        """The reply to ``payload`` POSTed to ``path``.

        Raises:
            TransportError: no usable response.
        """
        ...

    async def aclose(self) -> None:
        """Release what the sender holds."""
        ...


class ProviderLoop:
    """Sends one provider's requests: retries, deadline, latch, shared by every vendor.

    Args:
        sender: makes each attempt (the HTTP client, or an in-memory one in tests).
        codec: the vendor's reading of failures.
        retry: the retry policy.
        rng: jitter source; ``random.random`` when ``None``.
    """

    def __init__(
        self,
        sender: Sender,
        codec: ErrorCodec,
        *,
        retry: RetryPolicy,
        rng: Callable[[], float] | None = None,
    ) -> None:
        self._sender = sender
        self._core = RetryCore(codec, retry=retry, rng=rng or random.random)

    @classmethod
    def connect(
        cls,
        base_url: str,
        codec: ErrorCodec,
        *,
        headers: Mapping[str, str],
        redactor: Redactor,
        options: LoopOptions,
        retry: RetryPolicy,
    ) -> ProviderLoop:
        """A loop over a new HTTP client for ``base_url``: what every remote provider builds,
        with the caller's ``options`` (``retry`` when they name none)."""
        client = AsyncJsonClient(
            base_url, headers=headers, redactor=redactor, transport=options.get("transport")
        )
        return cls(client, codec, retry=options.get("retry", retry), rng=options.get("rng"))

    def check_latch(self) -> None:
        """Refuse locally once an earlier reply tripped the latch.

        Raises:
            ProviderError: the codec's :meth:`~.retry.ErrorCodec.latched` error.
        """
        self._core.check_latch()

    async def aclose(self) -> None:
        """Release the sender (the connection pool)."""
        await self._sender.aclose()

    async def send(self, path: str, body: object, *, deadline: float, budget_s: float) -> Reply:
        """POST ``body`` until a 2xx reply, a final refusal, or ``deadline`` (trio time).

        Args:
            path: relative to the client's base URL.
            body: the JSON body (already checked to serialise).
            deadline: when the whole call ends, retries and waits included.
            budget_s: the call's budget, for the deadline message.

        Returns:
            The 2xx reply.

        Raises:
            ProviderError: the codec's error for a final refusal, a latched
                provider, exhausted retries or the deadline.

        **Cancellation:** a caller's cancel scope cancels it at any await.
        """
        self._core.check_latch()
        call = self._core.start(deadline=deadline, budget_s=budget_s)
        with trio.move_on_after(max(0.0, deadline - trio.current_time())):
            while True:
                try:
                    reply = await self._sender.post(path, body)
                except TransportError as exc:
                    step: Reply | Wait | Stop = call.after_transport_failure(
                        exc, now=trio.current_time()
                    )
                else:
                    step = call.after_reply(reply, now=trio.current_time(), wall=time.time())
                if isinstance(step, Reply):
                    return step
                if isinstance(step, Stop):
                    raise step.error
                await trio.sleep(step.delay_s)
        raise call.too_late()
