"""The retry core every remote provider runs on: what follows each attempt, as plain decisions.

Pure: no I/O, no clock of its own, no httpx, no trio. A driver — :class:`~.sync_driver.JsonClient`
for the remote embedder, :class:`~.async_driver.ProviderLoop` for deciders and generators —
sends one attempt, hands its outcome to the :class:`Call` with the time it read, and carries
out the answer: return the 2xx :class:`Reply`, sleep a :class:`Wait`, or raise a
:class:`Stop`'s error. The rules themselves (which statuses retry, ``x-should-retry``,
``Retry-After``, the back-off plan) are the functions of :mod:`.rules`; this core applies them
the same way for both drivers:

- at most ``retry.retries + 1`` attempts per call, all inside one deadline;
- a refusal is retried when the vendor's reading says so (by status or error kind), unless the
  server says otherwise with ``x-should-retry``;
- the server's delay (``retry-after-ms``, ``Retry-After`` seconds or date) is honoured only
  when it fits what is left of the deadline; otherwise the call stops at once, so no caller
  waits for an answer that would come too late;
- the authentication latch: once a refusal counts as an auth failure, no later call of this
  provider goes out until it is rebuilt;
- every message redacted: :class:`Redactor` hides the configured secrets and the generic
  credential patterns.

What an error *says* is the vendor's: an :class:`ErrorCodec` turns each failure into the
provider's own error type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import attrs

from ..._core.errors import ProviderError
from .rules import (
    GiveUp,
    RetryPolicy,
    header_secrets,
    plan_retry,
    redact,
    retry_after_s,
    should_retry,
)

#: Longest excerpt of a response body quoted in an error message.
EXCERPT_CHARS = 200


def _distinct(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(secrets) - {""}))


@attrs.frozen
class Redactor:
    """Hides one provider's secrets (and the generic credential patterns) in a text.

    Attributes:
        secrets: the values to hide; blank ones are dropped.
    """

    secrets: tuple[str, ...] = attrs.field(converter=_distinct)

    @classmethod
    def for_headers(cls, headers: Mapping[str, str], secrets: Iterable[str] = ()) -> Redactor:
        """The redactor of a client sending ``headers``: their credential values and ``secrets``.

        Raises:
            ConfigError: a header value is not printable ASCII.
        """
        return cls((*secrets, *header_secrets(headers)))

    def __call__(self, text: str) -> str:
        return redact(text, self.secrets)

    def cut(self, text: str) -> str:
        """``text`` redacted, its whitespace collapsed, cut to :data:`EXCERPT_CHARS`."""
        # Redact before cutting, so a cut cannot leave half a secret unmatched.
        text = " ".join(self(text).split())
        return text[:EXCERPT_CHARS] + "…" if len(text) > EXCERPT_CHARS else text

    def excerpt(self, body: bytes) -> str:
        """A short, redacted quote of a response body for an error message."""
        if not body:
            return "an empty body"
        return repr(self.cut(body.decode("utf-8", errors="replace")))


def loads_body(body: bytes, headers: Mapping[str, str]) -> object:
    """``body`` as JSON: UTF-8, -16 or -32 (a BOM allowed), else the charset that
    ``content-type`` declares.

    Raises:
        ValueError: the body is not JSON in either reading.
    """
    try:
        return json.loads(body)
    except UnicodeDecodeError:
        charset = _declared_charset(headers.get("content-type", ""))
        if charset is None:
            raise
        try:
            text = body.decode(charset)
        except (LookupError, UnicodeDecodeError):
            raise ValueError(f"body is not valid {charset}") from None
        return json.loads(text)


def _declared_charset(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip(' "'):
            return value.strip(' "')
    return None


@attrs.frozen
class Reply:
    """One HTTP response, read whole.

    Attributes:
        status: the HTTP status.
        headers: response headers, names lower-cased.
        body: the body bytes (at most the client's size cap).
    """

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> object:
        """The decoded body, or ``None`` when it is not JSON."""
        try:
            return loads_body(self.body, self.headers)
        except (ValueError, RecursionError):
            return None

    def excerpt(self, secrets: Iterable[str] = ()) -> str:
        """A short, redacted quote of the body for an error message."""
        return Redactor(secrets).excerpt(self.body)


class TransportError(Exception):
    """An attempt without a usable response: no connection, a timeout, malformed HTTP, a body
    over the size cap.

    Args:
        message: what happened, already redacted.
        retryable: whether another attempt may help.
        status: the HTTP status, when one arrived before the failure.
    """

    def __init__(self, message: str, *, retryable: bool = True, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class ErrorCodec(Protocol):
    """How one vendor words failures; the errors it makes are its own type."""

    def refused(self, reply: Reply) -> ProviderError:
        """The error a non-2xx reply stands for, ``retryable`` as the vendor's table says."""
        ...

    def is_auth_failure(self, error: ProviderError) -> bool:
        """Whether ``error`` (from :meth:`refused`) trips the authentication latch."""
        ...

    def latched(self, cause: ProviderError) -> ProviderError:
        """The error of a call refused locally because ``cause`` tripped the latch."""
        ...

    def unreachable(self, failure: TransportError) -> ProviderError:
        """The error of an attempt without a usable response."""
        ...

    def too_late(self, budget_s: float, last: ProviderError | None) -> ProviderError:
        """The error of a call whose deadline passed; ``last`` is the last failed attempt."""
        ...

    def given_up(self, error: ProviderError, reason: str) -> ProviderError:
        """The error raised when no retry is left (or would fit), from the last one."""
        ...


@attrs.frozen
class Wait:
    """Sleep ``delay_s``, then send the next attempt."""

    delay_s: float


@attrs.frozen
class Stop:
    """Raise ``error``: the call is over."""

    error: ProviderError


class RetryCore:
    """One provider's retry state across its calls: policy, jitter source and latch.

    Args:
        codec: the vendor's wording of failures.
        retry: the retry policy.
        rng: the jitter source, returning a float in [0, 1).
    """

    def __init__(self, codec: ErrorCodec, *, retry: RetryPolicy, rng: Callable[[], float]) -> None:
        self.codec = codec
        self.retry = retry
        self.rng = rng
        #: The refusal that latched this provider shut, and the codec that read it.
        self.latch: tuple[ProviderError, ErrorCodec] | None = None

    def check_latch(self) -> None:
        """Refuse locally once an earlier reply tripped the latch.

        Raises:
            ProviderError: the :meth:`~ErrorCodec.latched` error of the codec that read the
                refusal.
        """
        if self.latch is not None:
            cause, codec = self.latch
            raise codec.latched(cause)

    def start(self, *, deadline: float, budget_s: float, codec: ErrorCodec | None = None) -> Call:
        """The decisions of one call ending at ``deadline`` (on the driver's clock).

        Args:
            deadline: when the call ends, retries and waits included.
            budget_s: the call's budget, for the deadline message.
            codec: the wording of this call's failures, when it is not the provider's
                (the sync client names the request in each message).
        """
        return Call(self, codec or self.codec, deadline=deadline, budget_s=budget_s)


class Call:
    """The attempts of one call; built by :meth:`RetryCore.start`."""

    def __init__(
        self, core: RetryCore, codec: ErrorCodec, *, deadline: float, budget_s: float
    ) -> None:
        self._core = core
        self._codec = codec
        self.deadline = deadline
        self.budget_s = budget_s
        self.failures = 0
        #: The last failed attempt's error, for the deadline message.
        self.last: ProviderError | None = None

    def after_reply(self, reply: Reply, *, now: float, wall: float) -> Reply | Wait | Stop:
        """What follows a reply that arrived at ``now`` (driver clock), ``wall`` (POSIX time,
        to read a ``Retry-After`` date)."""
        if 200 <= reply.status <= 299:
            return reply
        codec = self._codec
        error = codec.refused(reply)
        if codec.is_auth_failure(error):
            # Retrying with the same key only burns quota and may lock the account.
            self._core.latch = (error, codec)
            error.retryable = False
            return self._failed(error, None, now)
        error.retryable = should_retry(reply.headers, error.retryable)
        return self._failed(error, retry_after_s(reply.headers, wall), now)

    def after_transport_failure(self, failure: TransportError, *, now: float) -> Wait | Stop:
        """What follows an attempt that got no usable response."""
        return self._failed(self._codec.unreachable(failure), None, now)

    def too_late(self) -> ProviderError:
        """The error of this call once its deadline passed mid-attempt or mid-wait."""
        return self._codec.too_late(self.budget_s, self.last)

    def _failed(self, error: ProviderError, wait_s: float | None, now: float) -> Wait | Stop:
        self.last = error
        if not error.retryable:
            return Stop(error)
        self.failures += 1
        plan = plan_retry(
            self._core.retry,
            failures=self.failures,
            retry_after_s=wait_s,
            remaining_s=self.deadline - now,
            draw=self._core.rng(),
        )
        if isinstance(plan, GiveUp):
            return Stop(self._codec.given_up(error, plan.reason))
        return Wait(plan.delay_s)
