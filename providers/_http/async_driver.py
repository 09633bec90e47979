"""The one async loop every remote provider runs on: deciders and generators alike.

A vendor is a codec: it builds the request body, reads a 2xx reply, and says
what a refusal means (:class:`LoopCodec`). This loop does the rest, the same
way for every vendor:

- one deadline per call, retries and waits included (``move_on_after``);
- at most ``retry.retries + 1`` attempts; a refusal is retried when the
  vendor's table says so (by status or error kind), unless the server says
  otherwise with ``x-should-retry``;
- the server's delay (``retry-after-ms``, ``Retry-After`` seconds or date) is
  honoured only when it fits what is left of the deadline; otherwise the call
  fails at once, so no caller waits for an answer that would come too late;
- the authentication latch: once a refusal counts as an auth failure, no later
  call goes out until the provider is rebuilt;
- every message redacted (the client's secrets and the generic patterns).

The remote embedder is synchronous and runs :class:`~._http.JsonClient`'s own
loop over the same rules (:mod:`._rules`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TypedDict

import trio

from ..._core.errors import ProviderError
from .rules import GiveUp, RetryPolicy, plan_retry, retry_after_s, should_retry
from .transport import AsyncJsonClient, AsyncTransport, Reply, TransportError


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


class LoopCodec(Protocol):
    """What one vendor tells the loop about failures; the errors it makes are its own type."""

    def refused(self, reply: Reply) -> ProviderError:
        """The error a non-2xx reply stands for, ``retryable`` as the vendor's table says."""
        ...

    def is_auth_failure(self, error: ProviderError) -> bool:
        """Whether ``error`` (from :meth:`refused`) trips the authentication latch."""
        ...

    def latched(self, cause: ProviderError) -> ProviderError:
        """The error of a call refused locally because ``cause`` tripped the latch."""
        ...

    def unreachable(self, message: str) -> ProviderError:
        """The error of an attempt without a usable response (redacted ``message``)."""
        ...

    def too_late(self, budget_s: float, last: ProviderError | None) -> ProviderError:
        """The error of a call whose deadline passed; ``last`` is the last failed attempt."""
        ...

    def given_up(self, error: ProviderError, reason: str) -> ProviderError:
        """The error raised when no retry is left (or would fit), from the last one."""
        ...


class ProviderLoop:
    """Sends one provider's requests: retries, deadline, latch, shared by every vendor.

    Args:
        client: the provider's HTTP client (its secrets redact every message).
        codec: the vendor's reading of failures.
        retry: the retry policy.
        rng: jitter source; ``random.random`` when ``None``.
    """

    def __init__(
        self,
        client: AsyncJsonClient,
        codec: LoopCodec,
        *,
        retry: RetryPolicy,
        rng: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self._codec = codec
        self._retry = retry
        self._rng = rng or random.random
        #: The refusal that latched this provider shut, if one did.
        self._latch: ProviderError | None = None

    @classmethod
    def connect(
        cls,
        base_url: str,
        codec: LoopCodec,
        *,
        headers: Mapping[str, str],
        secret: str,
        options: LoopOptions,
        retry: RetryPolicy,
    ) -> ProviderLoop:
        """A loop over a new client for ``base_url``: what every remote provider builds,
        with the caller's ``options`` (``retry`` when they name none)."""
        client = AsyncJsonClient(
            base_url, headers=headers, secrets=[secret], transport=options.get("transport")
        )
        return cls(client, codec, retry=options.get("retry", retry), rng=options.get("rng"))

    def check_latch(self) -> None:
        """Refuse locally once an earlier reply tripped the latch.

        Raises:
            ProviderError: the codec's :meth:`~LoopCodec.latched` error.
        """
        if self._latch is not None:
            raise self._codec.latched(self._latch)

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
        self.check_latch()
        last: ProviderError | None = None
        with trio.move_on_after(max(0.0, deadline - trio.current_time())):
            failures = 0
            while True:
                outcome = await self._attempt(path, body)
                if isinstance(outcome, Reply):
                    return outcome
                last, wait = outcome
                if not last.retryable:
                    raise last
                failures += 1
                plan = plan_retry(
                    self._retry,
                    failures=failures,
                    retry_after_s=wait,
                    remaining_s=deadline - trio.current_time(),
                    draw=self._rng(),
                )
                if isinstance(plan, GiveUp):
                    raise self._codec.given_up(last, plan.reason)
                await trio.sleep(plan.delay_s)
        raise self._codec.too_late(budget_s, last)

    async def _attempt(self, path: str, body: object) -> Reply | tuple[ProviderError, float | None]:
        """One request: the 2xx reply, or the error and the server's requested delay."""
        try:
            reply = await self.client.post(path, body)
        except TransportError as exc:
            return self._codec.unreachable(str(exc)), None
        if 200 <= reply.status <= 299:
            return reply
        error = self._codec.refused(reply)
        if self._codec.is_auth_failure(error):
            # Retrying with the same key only burns quota and may lock the account.
            self._latch = error
            error.retryable = False
            return error, None
        error.retryable = should_retry(reply.headers, error.retryable)
        return error, retry_after_s(reply.headers, time.time())
