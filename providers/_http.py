"""JSON over HTTP for remote providers: the only module that imports httpx.

The rules (URL checks, redaction, ``Retry-After``, which statuses retry, the
back-off plan) live in :mod:`._rules`; this module only moves bytes.
:class:`JsonClient` is the synchronous client of the remote embedder, with its
retry loop on those same rules; :class:`AsyncJsonClient` makes one attempt per
call, and the async loop in :mod:`._loop` retries it.
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

import attrs
import httpx

from .._core.decision_limits import PROVIDER_CONNECTIONS
from .._core.errors import ConfigError, ProviderError
from ._rules import (
    GiveUp,
    RetryPolicy,
    check_base_url,
    header_secrets,
    is_loopback,
    is_retryable_status,
    plan_retry,
    redact,
    retry_after_s,
    should_retry,
)

#: The transport type a test may hand to :class:`JsonClient`; re-exported so
#: that no other module needs to import httpx for a type annotation.
Transport = httpx.BaseTransport


#: Longest excerpt of a response body quoted in an error message.
_EXCERPT_CHARS = 200


@attrs.frozen
class _Failure:
    """One failed attempt, as data, so the retry loop can decide before raising."""

    message: str
    status: int | None
    retryable: bool
    retry_after_s: float | None = None
    cause: BaseException | None = None


_DEFAULT_RETRY = RetryPolicy()


class JsonClient:
    """POSTs JSON to one provider and returns the decoded JSON reply.

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
        self._secrets = tuple({*secrets, *header_secrets(headers)} - {""})
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
        self._retry = retry
        self._max_response_bytes = max_response_bytes
        self._sleep = sleep
        self._clock = clock
        self._rng = rng
        # (message, status) of the 401/403 that latched this client shut.
        self._auth_failure: tuple[str, int] | None = None
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
        if self._auth_failure is not None:
            message, status = self._auth_failure
            raise ProviderError(message, status=status, retryable=False)
        content = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode()
        deadline = self._clock() + deadline_s
        failures = 0
        while True:
            outcome = self._attempt(path, content, deadline)
            if not isinstance(outcome, _Failure):
                return outcome
            if not outcome.retryable:
                raise ProviderError(
                    self._redact(outcome.message), status=outcome.status, retryable=False
                ) from outcome.cause
            failures += 1
            decision = plan_retry(
                self._retry,
                failures=failures,
                retry_after_s=outcome.retry_after_s,
                remaining_s=deadline - self._clock(),
                draw=self._rng(),
            )
            if isinstance(decision, GiveUp):
                raise ProviderError(
                    self._redact(f"{outcome.message}; {decision.reason}"),
                    status=outcome.status,
                    retryable=True,
                ) from outcome.cause
            self._sleep(decision.delay_s)

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _attempt(self, path: str, content: bytes, deadline: float) -> object | _Failure:
        what = f"POST {self._label}/{path.lstrip('/')}"
        remaining = deadline - self._clock()
        if remaining <= 0:
            return _Failure(f"{what}: deadline passed before the request", None, True)
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
            return _Failure(
                self._redact(f"{what}: expected a response, but timed out ({type(exc).__name__})"),
                None,
                True,
                cause=exc,
            )
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            return _Failure(
                self._redact(
                    f"{what}: expected a response, but the connection failed"
                    f" ({type(exc).__name__}: {exc})"
                ),
                None,
                True,
                cause=exc,
            )
        except httpx.HTTPError as exc:
            return _Failure(
                self._redact(f"{what}: request failed ({type(exc).__name__}: {exc})"),
                None,
                False,
                cause=exc,
            )
        if isinstance(body, _Failure):
            return body
        if 200 <= status <= 299:
            try:
                decoded: object = json.loads(body)
            except (ValueError, RecursionError) as exc:
                # UnicodeDecodeError is a ValueError too.
                return _Failure(
                    self._redact(
                        f"{what}: expected a JSON body with HTTP {status},"
                        f" got {self._excerpt(body)}"
                    ),
                    status,
                    False,
                    cause=exc,
                )
            return decoded
        message = self._redact(
            f"{what}: expected HTTP 2xx, got HTTP {status}: {self._excerpt(body)}"
        )
        if status in (401, 403):
            # Latched: retrying with the same credentials only burns quota and
            # may lock the account; a new client means new credentials.
            self._auth_failure = (
                self._redact(
                    f"{what}: not sent, because an earlier request was refused with"
                    f" HTTP {status}; build a new client with valid credentials"
                ),
                status,
            )
            return _Failure(message, status, False)
        if should_retry(headers, is_retryable_status(status)):
            return _Failure(
                message, status, True, retry_after_s=retry_after_s(headers, time.time())
            )
        return _Failure(message, status, False)

    def _read_body(self, response: httpx.Response, deadline: float, what: str) -> bytes | _Failure:
        # Read in chunks so the deadline and size cap hold even when a server
        # trickles bytes just inside the read timeout.
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self._max_response_bytes:
                return _Failure(
                    f"{what}: expected at most {self._max_response_bytes} response bytes,"
                    f" got more (HTTP {response.status_code})",
                    response.status_code,
                    False,
                )
            if self._clock() > deadline:
                return _Failure(
                    f"{what}: expected the response body before the deadline, but it was"
                    f" still arriving (HTTP {response.status_code})",
                    None,
                    True,
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _excerpt(self, body: bytes) -> str:
        """A short, redacted description of a response body."""
        if not body:
            return "an empty body"
        text = body.decode("utf-8", errors="replace")
        try:
            decoded = json.loads(text)
        except (ValueError, RecursionError):
            decoded = None
        # OpenAI-style envelope: {"error": {"message", "type", "code"}}.
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
            error = decoded["error"]
            labels = [str(error[k]) for k in ("type", "code") if error.get(k) is not None]
            text = (
                f"{'/'.join(labels)}: {error.get('message', '')}"
                if labels
                else str(error.get("message", text))
            )
        # Redact before cutting, so a cut cannot leave half a secret unmatched.
        text = " ".join(self._redact(text).split())
        if len(text) > _EXCERPT_CHARS:
            text = text[:_EXCERPT_CHARS] + "…"
        return repr(text)


# --- async: one attempt at a time; retry loops live with their callers -------

#: The async transport a test may hand to :class:`AsyncJsonClient`.
AsyncTransport = httpx.AsyncBaseTransport


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
            decoded: object = json.loads(self.body)
        except (ValueError, RecursionError):
            return None
        return decoded

    def excerpt(self, secrets: Iterable[str] = ()) -> str:
        """A short, redacted quote of the body for an error message."""
        if not self.body:
            return "an empty body"
        text = " ".join(redact(self.body.decode("utf-8", errors="replace"), secrets).split())
        return repr(text[:_EXCERPT_CHARS] + "…" if len(text) > _EXCERPT_CHARS else text)


class TransportError(Exception):
    """No usable response: the connection failed or the body was too large.

    The message is redacted. Timeouts are not raised here: callers bound each
    attempt with a trio cancel scope and see the cancellation.
    """


class AsyncJsonClient:
    """POSTs JSON to one provider under trio; one attempt per call, no retries.

    Args:
        base_url: checked with :func:`check_base_url`.
        headers: sent with every request; their credential values are redacted.
        secrets: more values to redact from every message.
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
        headers: Mapping[str, str] | None = None,
        secrets: Iterable[str] = (),
        max_response_bytes: int = 64 * 1024 * 1024,
        transport: AsyncTransport | None = None,
        max_connections: int = PROVIDER_CONNECTIONS,
    ) -> None:
        self.base_url = check_base_url(base_url)
        headers = dict(headers or {})
        self.secrets = tuple({*secrets, *header_secrets(headers)} - {""})
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

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def post(
        self, path: str, payload: object, *, headers: Mapping[str, str] | None = None
    ) -> Reply:
        """POST ``payload`` as JSON to ``path`` (relative to the base URL).

        Raises:
            TransportError: the connection failed, the reply was malformed HTTP,
                or the body exceeded the size cap.
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
                headers={"Content-Type": "application/json", **(headers or {})},
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
