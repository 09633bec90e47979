"""JSON over HTTP for remote providers: the only module that imports httpx.

The rules (URL checks, redaction, ``Retry-After``, which statuses retry, the
back-off plan) live in :mod:`.rules`, and what follows each attempt is decided
by the retry core (:mod:`.retry`); this module only moves bytes. Each
attempt is reported to it as a :class:`~.retry.Reply` or a
:class:`~.retry.TransportError`. :class:`JsonClient` is the synchronous driver
of that core (the remote embedder's client); :class:`AsyncJsonClient` makes one
attempt per call for the async driver (:mod:`.async_driver`) of deciders and
generators.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

import httpx

from ..._core.decide.limits import PROVIDER_CONNECTIONS
from ..._core.errors import ConfigError, ProviderError
from .plain_errors import PlainErrors
from .retry import Redactor, Reply, RetryCore, Stop, TransportError, Wait, loads_body
from .rules import RetryPolicy, check_base_url, is_loopback

#: The transport type a test may hand to :class:`JsonClient`; re-exported so
#: that no other module needs to import httpx for a type annotation.
Transport = httpx.BaseTransport


_DEFAULT_RETRY = RetryPolicy()


class JsonClient:
    """POSTs JSON to one provider and returns the decoded JSON reply.

    The synchronous driver of the retry core (:mod:`.retry`): each attempt is
    one request here, and what follows it (return, wait, raise) is the core's
    decision, the same as for the async loop.

    Args:
        base_url: checked with :func:`check_base_url`.
        headers: sent with every request (``Authorization`` goes here).
        secrets: values to redact from every error message; the values of
            ``headers`` are always added.
        connect_timeout_s: cap on connecting, per attempt.
        read_timeout_s: cap on each wait for response bytes, per attempt.
        retry: the retry policy.
        max_response_bytes: a larger body fails the call instead of filling memory.
        transport: an httpx transport to use instead of the network (tests).
        sleep, clock, rng: seams for tests; ``clock`` must be monotonic.

    Raises:
        ConfigError: a bad base URL or option.

    **Error handling**: every failure is a :class:`~toolroute.ProviderError`
    whose message says what was expected and what came, with credentials
    redacted. After a 401 or 403 the client is latched: every later call fails
    at once without touching the network, until a new client is built.

    **Resource handling**: owns a connection pool; call :meth:`close` or use it
    as a context manager.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        secrets: Iterable[str] = (),
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        retry: RetryPolicy = _DEFAULT_RETRY,
        max_response_bytes: int = 64 * 1024 * 1024,
        transport: Transport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._base_url = check_base_url(base_url)
        headers = dict(headers or {})
        self._redact = Redactor.for_headers(headers, secrets)
        for name, value in (
            ("connect_timeout_s", connect_timeout_s),
            ("read_timeout_s", read_timeout_s),
        ):
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        if max_response_bytes < 1:
            raise ConfigError(f"max_response_bytes must be positive, got {max_response_bytes!r}")
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._max_response_bytes = max_response_bytes
        self._sleep = sleep
        self._clock = clock
        self._core = RetryCore(PlainErrors(self._redact, ""), retry=retry, rng=rng)
        parts = urlsplit(self._base_url)
        host = parts.hostname or ""
        # Safe to quote in messages: check_base_url refused user info and queries.
        self._label = f"{parts.netloc}{parts.path}"
        self._client = httpx.Client(
            base_url=self._base_url,
            headers={"Accept": "application/json", **headers},
            transport=transport,
            # Redirects could carry the key to another origin; providers do not
            # redirect API calls, so a 3xx is reported instead of followed.
            follow_redirects=False,
            # Proxy variables make no sense for a server on this machine and
            # would send local traffic (and keys) elsewhere.
            trust_env=not is_loopback(host),
        )

    def close(self) -> None:
        """Close the connection pool. Idempotent."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def post_json(self, path: str, payload: object, *, deadline_s: float) -> object:
        """POST ``payload`` as JSON to ``path`` under the base URL.

        Args:
            path: relative to the base URL, e.g. ``"embeddings"``.
            payload: anything :func:`json.dumps` accepts, without NaN.
            deadline_s: budget for the whole call, retries and waits included.

        Returns:
            The decoded JSON body of a 2xx response.

        Raises:
            ProviderError: non-2xx status, timeout, connection failure, body
                that is not JSON or too large, or a latched auth failure.
                ``status`` and ``retryable`` are set as the cause allows.
            ConfigError: ``path`` is not relative or ``deadline_s`` is not positive.

        **Cancellation**: synchronous; each network wait is capped by what is
        left of ``deadline_s``.
        """
        if "://" in path or path.startswith("//"):
            raise ConfigError("path must be relative to the base URL")
        if not (math.isfinite(deadline_s) and deadline_s > 0):
            raise ConfigError(f"deadline_s must be a positive number, got {deadline_s!r}")
        self._core.check_latch()
        content = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode()
        what = f"POST {self._label}/{path.lstrip('/')}"
        deadline = self._clock() + deadline_s
        # The request's own wording, so a latch names the request that was refused.
        call = self._core.start(
            deadline=deadline, budget_s=deadline_s, codec=PlainErrors(self._redact, what)
        )
        while True:
            cause: BaseException | None = None
            try:
                reply = self._attempt(path, content, deadline, what)
            except TransportError as exc:
                cause = exc.__cause__
                step: Reply | Wait | Stop = call.after_transport_failure(exc, now=self._clock())
            else:
                step = call.after_reply(reply, now=self._clock(), wall=time.time())
            if isinstance(step, Reply):
                return self._decode(step, what)
            if isinstance(step, Stop):
                raise step.error from cause
            self._sleep(step.delay_s)

    def _decode(self, reply: Reply, what: str) -> object:
        try:
            decoded: object = loads_body(reply.body, reply.headers)
        except (ValueError, RecursionError) as exc:
            # UnicodeDecodeError is a ValueError too.
            raise ProviderError(
                self._redact(
                    f"{what}: expected a JSON body with HTTP {reply.status},"
                    f" got {self._redact.excerpt(reply.body)}"
                ),
                status=reply.status,
                retryable=False,
            ) from exc
        return decoded

    def _attempt(self, path: str, content: bytes, deadline: float, what: str) -> Reply:
        """One request, with every wait capped by ``deadline``.

        Raises:
            TransportError: no usable response; redacted, ``retryable`` and
                ``status`` set as the cause allows, chained to the httpx error.
        """
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise TransportError(f"{what}: deadline passed before the request")
        timeout = httpx.Timeout(
            connect=min(self._connect_timeout_s, remaining),
            read=min(self._read_timeout_s, remaining),
            write=min(self._read_timeout_s, remaining),
            pool=min(self._connect_timeout_s, remaining),
        )
        try:
            with self._client.stream(
                "POST",
                path.lstrip("/"),
                content=content,
                headers={"Content-Type": "application/json"},
                timeout=timeout,
            ) as response:
                status = response.status_code
                headers = {k.lower(): v for k, v in response.headers.items()}
                body = self._read_body(response, deadline, what)
        except httpx.TimeoutException as exc:
            raise TransportError(
                self._redact(f"{what}: expected a response, but timed out ({type(exc).__name__})")
            ) from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise TransportError(
                self._redact(
                    f"{what}: expected a response, but the connection failed"
                    f" ({type(exc).__name__}: {exc})"
                )
            ) from exc
        except httpx.HTTPError as exc:
            raise TransportError(
                self._redact(f"{what}: request failed ({type(exc).__name__}: {exc})"),
                retryable=False,
            ) from exc
        return Reply(status, headers, body)

    def _read_body(self, response: httpx.Response, deadline: float, what: str) -> bytes:
        # Read in chunks so the deadline and size cap hold even when a server
        # trickles bytes just inside the read timeout.
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self._max_response_bytes:
                raise TransportError(
                    f"{what}: expected at most {self._max_response_bytes} response bytes,"
                    f" got more (HTTP {response.status_code})",
                    retryable=False,
                    status=response.status_code,
                )
            if self._clock() > deadline:
                raise TransportError(
                    f"{what}: expected the response body before the deadline, but it was"
                    f" still arriving (HTTP {response.status_code})"
                )
            chunks.append(chunk)
        return b"".join(chunks)


# --- async: one attempt at a time; the async loop (.async_driver) retries ----

#: The async transport a test may hand to :class:`AsyncJsonClient`.
AsyncTransport = httpx.AsyncBaseTransport


class AsyncJsonClient:
    """POSTs JSON to one provider under trio; one attempt per call, no retries.

    Args:
        base_url: checked with :func:`check_base_url`.
        headers: sent with every request.
        redactor: hides the credentials in every message.
        max_response_bytes: a larger body fails the attempt.
        transport: an httpx async transport to use instead of the network (tests).
        max_connections: connections the pool holds, all kept alive between calls; the
            decision actor admits no more requests per provider than this, so none waits
            inside the pool.

    Deadlines are the caller's: wrap :meth:`post` in ``trio.move_on_after``.
    The connection pool is owned by this object; :meth:`aclose` releases it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str],
        redactor: Redactor,
        max_response_bytes: int = 64 * 1024 * 1024,
        transport: AsyncTransport | None = None,
        max_connections: int = PROVIDER_CONNECTIONS,
    ) -> None:
        self.base_url = check_base_url(base_url)
        self.redact = redactor
        if max_response_bytes < 1:
            raise ConfigError(f"max_response_bytes must be positive, got {max_response_bytes!r}")
        self._max_response_bytes = max_response_bytes
        parts = urlsplit(self.base_url)
        #: Safe to quote: check_base_url refused user info and queries.
        self.label = f"{parts.netloc}{parts.path}"
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Accept": "application/json", **headers},
            transport=transport,
            follow_redirects=False,
            trust_env=not is_loopback(parts.hostname or ""),
            # The caller's cancel scope is the deadline.
            timeout=None,
            # Sized to the decision actor's admission, and every connection kept alive: a
            # burst of calls reuses its connections instead of reopening most of them.
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def post(self, path: str, payload: object) -> Reply:
        """POST ``payload`` as JSON to ``path`` (relative to the base URL).

        Raises:
            TransportError: the connection failed, the reply was malformed HTTP,
                or the body exceeded the size cap (all retryable).
            ConfigError: ``path`` is absolute or the payload is not JSON.
        """
        if "://" in path or path.startswith("//"):
            raise ConfigError("path must be relative to the base URL")
        try:
            content = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"request body is not JSON: {exc}") from None
        what = f"POST {self.label}/{path.lstrip('/')}"
        try:
            async with self._client.stream(
                "POST",
                path.lstrip("/"),
                content=content,
                headers={"Content-Type": "application/json"},
            ) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self._max_response_bytes:
                        raise TransportError(
                            f"{what}: expected at most {self._max_response_bytes} response"
                            f" bytes, got more (HTTP {response.status_code})"
                        )
                    chunks.append(chunk)
                return Reply(
                    response.status_code,
                    {k.lower(): v for k, v in response.headers.items()},
                    b"".join(chunks),
                )
        except httpx.HTTPError as exc:
            raise TransportError(
                self.redact(
                    f"{what}: expected a response, but the connection failed"
                    f" ({type(exc).__name__}: {exc})"
                )
            ) from None
