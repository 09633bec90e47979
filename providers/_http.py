"""JSON over HTTP for remote providers: the only module that imports httpx.

The rules (URL checks, redaction, ``Retry-After`` parsing, the retry decision)
are plain functions that return what to do next, so a later async client can
reuse them unchanged; only :class:`JsonClient` does I/O, synchronously.
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

import attrs
import httpx
import trio

from .._core.errors import ConfigError, ProviderError

#: The transport type a test may hand to :class:`JsonClient`; re-exported so
#: that no other module needs to import httpx for a type annotation.
Transport = httpx.BaseTransport

REDACTED = "[redacted]"

#: Longest excerpt of a response body quoted in an error message.
_EXCERPT_CHARS = 200

# Patterns for credentials that may show up in bodies or exception texts even
# when they are not the configured key (a proxy echoing another tenant's key,
# a provider quoting the request back). Order matters: data URLs first, since
# their base64 payload could otherwise be half-eaten by the hex rule.
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\bdata:[\w.+\-/]*(?:;[\w.+\-]+(?:=[\w.+\-]+)?)*;base64,[A-Za-z0-9+/_\-]*=*"),
        REDACTED,
    ),
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]+=*"), "Bearer " + REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-*]{16,}"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])pplx-[A-Za-z0-9_\-*]{16,}"), REDACTED),
    (re.compile(r"[0-9A-Fa-f]{32,}"), REDACTED),
)

_SECONDS = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_LOOPBACK_NAMES = frozenset({"localhost"})


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Hide credentials in ``text``.

    Args:
        text: a message, body excerpt or exception text.
        secrets: values that must never appear (API keys, tokens); empty ones
            are ignored.

    Returns:
        ``text`` with every secret, ``sk-…`` and ``pplx-…`` key, run of 32 or
        more hex digits, bearer token and base64 ``data:`` URL replaced by
        ``[redacted]``.
    """
    # Longest first, so a secret that contains another is hidden whole.
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def check_base_url(url: str) -> str:
    """Validate a provider base URL.

    Args:
        url: an absolute ``https`` URL, or ``http`` on a loopback host
            (``localhost``, ``127.0.0.0/8``, ``::1``) for local servers.

    Returns:
        ``url`` without trailing slashes.

    Raises:
        ConfigError: the URL breaks a rule. The message names the rule but
            never quotes the URL, which may carry a secret.
    """
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise ConfigError("base URL must not contain whitespace or control characters")
    # Checked on the raw text: urlsplit drops an empty "?" or "#".
    if "?" in url:
        raise ConfigError("base URL must not contain a query string (put keys in api_key)")
    if "#" in url:
        raise ConfigError("base URL must not contain a fragment")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ConfigError("base URL is not a valid absolute URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not host:
        raise ConfigError("base URL must be an absolute http(s) URL with a host")
    if "@" in parts.netloc:
        raise ConfigError("base URL must not contain a user name or password (use api_key)")
    if scheme == "http" and not _is_loopback(host):
        raise ConfigError("base URL must use https; plain http is allowed only on a loopback host")
    return url.rstrip("/")


_SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})


def _header_secrets(headers: Mapping[str, str]) -> list[str]:
    """Credential values in ``headers``, validated, for redaction."""
    found: list[str] = []
    for name, value in headers.items():
        # httpx would reject these too, but with the value in its message.
        if not value.isascii() or any(not ch.isprintable() for ch in value):
            raise ConfigError(f"header {name!r} must be printable ASCII")
        if name.lower() in _SENSITIVE_HEADERS:
            found.append(value)
            # "Bearer <token>": the token alone must be hidden as well.
            found.append(value.split(None, 1)[-1])
    return found


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Read a ``Retry-After`` header.

    Args:
        value: the header, either delay seconds (``"2"``, ``"1.5"``) or an
            HTTP date; ``None`` when absent.
        now: the current time as a POSIX timestamp, to turn a date into a delay.

    Returns:
        The delay in seconds, clamped at 0 for negative values and dates in the
        past, or ``None`` when the header is absent or unreadable.
    """
    if value is None:
        return None
    value = value.strip()
    if _SECONDS.fullmatch(value):
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        # RFC 9110 dates are always GMT; "-0000" parses as naive.
        when = when.replace(tzinfo=UTC)
    try:
        return max(0.0, when.timestamp() - now)
    except (OverflowError, ValueError):
        return None


def _number(
    *, minimum: float, exclusive: bool = False, maximum: float | None = None, integer: bool = False
) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """An attrs validator raising ConfigError (the attrs ones raise bare ValueError)."""

    def check(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (integer and not isinstance(value, int))
        ):
            kind = "an integer" if integer else "a number"
            raise ConfigError(f"{attribute.name} must be {kind}, got {type(value).__name__}")
        number = float(value)
        too_small = number <= minimum if exclusive else number < minimum
        if not math.isfinite(number) or too_small or (maximum is not None and number > maximum):
            bound = f"{'>' if exclusive else '>='} {minimum:g}"
            if maximum is not None:
                bound += f" and <= {maximum:g}"
            raise ConfigError(f"{attribute.name} must be {bound}, got {value!r}")

    return check


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth retrying: 429 and 5xx, nothing else."""
    return status == 429 or 500 <= status <= 599


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How :class:`JsonClient` retries 429, 5xx, timeouts and connection errors.

    Attributes:
        retries: attempts after the first one.
        backoff_s: delay before the first retry; doubled for each later one.
        max_backoff_s: ceiling on a single back-off delay.
        jitter: fraction of each delay that is randomised: the delay is drawn
            from ``[(1 - jitter) * d, d]`` so that clients do not retry in step.
    """

    retries: int = attrs.field(default=1, validator=_number(minimum=0, integer=True))
    backoff_s: float = attrs.field(default=0.5, validator=_number(minimum=0))
    max_backoff_s: float = attrs.field(default=8.0, validator=_number(minimum=0))
    jitter: float = attrs.field(default=0.5, validator=_number(minimum=0, maximum=1))

    def backoff(self, failures: int, draw: float) -> float:
        """The delay after ``failures`` failed attempts, given a uniform ``draw`` in [0, 1)."""
        base = min(self.max_backoff_s, self.backoff_s * 2.0 ** max(0, failures - 1))
        return base * (1.0 - self.jitter * draw)


@attrs.frozen
class Retry:
    """Wait ``delay_s`` and try again."""

    delay_s: float


@attrs.frozen
class GiveUp:
    """Stop; ``reason`` says why, for the error message."""

    reason: str


def plan_retry(
    policy: RetryPolicy,
    *,
    failures: int,
    retry_after_s: float | None,
    remaining_s: float,
    draw: float,
) -> Retry | GiveUp:
    """Decide what follows a retryable failure.

    Args:
        policy: the retry policy.
        failures: failed attempts so far, this one included (at least 1).
        retry_after_s: the server's ``Retry-After``, if it sent a readable one.
        remaining_s: what is left of the caller's deadline.
        draw: a uniform number in [0, 1) for the jitter.

    Returns:
        :class:`Retry` with the delay, or :class:`GiveUp` with the reason.
        A ``Retry-After`` is honoured exactly, without jitter, but only when the
        retry could still start before the deadline; otherwise waiting would be
        pointless, and the caller should learn at once.
    """
    if failures > policy.retries:
        attempts = "attempt" if failures == 1 else "attempts"
        return GiveUp(f"gave up after {failures} {attempts}")
    if retry_after_s is not None:
        if retry_after_s >= remaining_s:
            return GiveUp(
                f"Retry-After asks for {retry_after_s:.3g} s but only"
                f" {max(0.0, remaining_s):.3g} s of the deadline remain"
            )
        return Retry(retry_after_s)
    delay = policy.backoff(failures, draw)
    if delay >= remaining_s:
        return GiveUp(
            f"back-off of {delay:.3g} s would overrun the deadline"
            f" ({max(0.0, remaining_s):.3g} s remain)"
        )
    return Retry(delay)


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
        self._secrets = tuple({*secrets, *_header_secrets(headers)} - {""})
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
            trust_env=not _is_loopback(host),
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
                retry_after = response.headers.get("Retry-After")
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
        if is_retryable_status(status):
            return _Failure(
                message, status, True, retry_after_s=parse_retry_after(retry_after, time.time())
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
    ) -> None:
        self.base_url = check_base_url(base_url)
        headers = dict(headers or {})
        self.secrets = tuple({*secrets, *_header_secrets(headers)} - {""})
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
            trust_env=not _is_loopback(parts.hostname or ""),
            # The caller's cancel scope is the deadline.
            timeout=None,
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


#: One async attempt: the 2xx reply, or the error and the server's ``Retry-After``.
Attempt = Callable[[], Awaitable[Reply | tuple[ProviderError, float | None]]]


async def retry_attempts(
    attempt: Attempt,
    *,
    policy: RetryPolicy,
    deadline: float,
    rng: Callable[[], float],
    give_up: Callable[[ProviderError, str], ProviderError],
) -> Reply:
    """Run ``attempt`` until it returns a reply, under ``policy`` and a trio ``deadline``.

    A non-retryable error is raised as it is; when :func:`plan_retry` gives up, the error
    ``give_up(last_error, reason)`` makes is raised. Callers bound the whole run (or each
    attempt) with their own cancel scope.
    """
    failures = 0
    while True:
        outcome = await attempt()
        if isinstance(outcome, Reply):
            return outcome
        error, retry_after = outcome
        if not error.retryable:
            raise error
        failures += 1
        plan = plan_retry(
            policy,
            failures=failures,
            retry_after_s=retry_after,
            remaining_s=deadline - trio.current_time(),
            draw=rng(),
        )
        if isinstance(plan, GiveUp):
            raise give_up(error, plan.reason)
        await trio.sleep(plan.delay_s)
