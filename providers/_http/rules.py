"""The rules every remote provider follows, as plain functions: no I/O, no httpx.

Credential redaction, the base-URL rule, reading ``Retry-After`` /
``retry-after-ms`` / ``x-should-retry``, which statuses are worth another
attempt, and the back-off plan. The one HTTP module (:mod:`._http`) and the
one async loop (:mod:`._loop`) apply them; vendors never restate them.
"""

from __future__ import annotations

import email.utils
import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC
from typing import Any
from urllib.parse import urlsplit

import attrs

from ..._core.errors import ConfigError

REDACTED = "[redacted]"


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


#: A configured secret at least this long is hidden wherever it appears; a
#: shorter one only where it stands as a whole token, because hiding every
#: occurrence of a 1–7 character key would cut ordinary words apart
#: (``"x"`` would turn "expected" into "e[redacted]pected").
MIN_ANYWHERE_SECRET_CHARS = 8

#: Characters that continue a token: a short secret touching one of them is
#: part of a longer word, not the secret.
_TOKEN_CHAR = r"A-Za-z0-9_"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Hide credentials in ``text``.

    Args:
        text: a message, body excerpt or exception text.
        secrets: values that must never appear (API keys, tokens); empty ones
            are ignored.

    Returns:
        ``text`` with every secret, ``sk-…`` and ``pplx-…`` key, run of 32 or
        more hex digits, bearer token and base64 ``data:`` URL replaced by
        ``[redacted]``. A secret of :data:`MIN_ANYWHERE_SECRET_CHARS` or more
        characters is replaced wherever it occurs; a shorter one wherever it
        stands as a whole token (not flanked by a letter, digit or ``_``), so
        ordinary words that merely contain it stay readable.
    """
    # Longest first, so a secret that contains another is hidden whole.
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if len(secret) >= MIN_ANYWHERE_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
        else:
            whole = re.compile(rf"(?<![{_TOKEN_CHAR}]){re.escape(secret)}(?![{_TOKEN_CHAR}])")
            # Until stable: hiding one occurrence can leave a neighbour standing alone
            # ("a-a-" with the key "a-"). Each pass hides original text, so it ends.
            for _ in range(len(text) + 1):
                hidden = whole.sub(REDACTED, text)
                if hidden == text:
                    break
                text = hidden
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
    if scheme == "http" and not is_loopback(host):
        raise ConfigError("base URL must use https; plain http is allowed only on a loopback host")
    return url.rstrip("/")


def clean_api_key(api_key: str | None) -> str:
    """``api_key`` without surrounding whitespace (as read from a key file); ``""`` if blank.

    Raises:
        ConfigError: whitespace or a non-printable character inside the key, which no
            vendor issues (two keys pasted together, a line break from an env file);
            the message never quotes the key.
    """
    key = (api_key or "").strip()
    if not key.isascii() or any(ch.isspace() or not ch.isprintable() for ch in key):
        raise ConfigError(
            "api_key must be printable ASCII without whitespace inside,"
            " got a key with whitespace or other characters in it"
        )
    return key


_SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})


def header_secrets(headers: Mapping[str, str]) -> list[str]:
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


def url_label(base_url: str) -> str:
    """How a checked base URL is named in messages: host, port and path.

    Safe to quote: :func:`check_base_url` refused user info and queries.
    """
    parts = urlsplit(base_url)
    return f"{parts.netloc}{parts.path}"


def is_loopback(host: str) -> bool:
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


def number_check(
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


#: Statuses worth another attempt, as the openai and anthropic SDKs retry them:
#: request timeout, conflict (a lock held elsewhere), rate limit, and any 5xx.
RETRYABLE_STATUSES = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth retrying: 408, 409, 429 and 5xx."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def should_retry(headers: Mapping[str, str], default: bool) -> bool:
    """``default``, unless the server says otherwise with ``x-should-retry: true|false``.

    Args:
        headers: response headers, names lower-cased.
        default: what the status (or the vendor's error kind) says.
    """
    override = headers.get("x-should-retry", "").strip().lower()
    if override in ("true", "false"):
        return override == "true"
    return default


def retry_after_s(headers: Mapping[str, str], now: float) -> float | None:
    """The delay the server asks for: ``retry-after-ms``, else ``Retry-After``.

    Args:
        headers: response headers, names lower-cased.
        now: the current POSIX time, to turn an HTTP date into a delay.

    Returns:
        Seconds (never negative), or ``None`` when neither header is readable.
    """
    try:
        seconds = float(headers.get("retry-after-ms", "nan")) / 1000.0
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and seconds >= 0:
        return seconds
    return parse_retry_after(headers.get("retry-after"), now)


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How every remote provider retries: 408, 409, 429, 5xx, timeouts and lost connections.

    Attributes:
        retries: attempts after the first one.
        backoff_s: delay before the first retry; doubled for each later one.
        max_backoff_s: ceiling on a single back-off delay.
        jitter: fraction of each delay that is randomised: the delay is drawn
            from ``[(1 - jitter) * d, d]`` so that clients do not retry in step.
    """

    retries: int = attrs.field(default=1, validator=number_check(minimum=0, integer=True))
    backoff_s: float = attrs.field(default=0.5, validator=number_check(minimum=0))
    max_backoff_s: float = attrs.field(default=8.0, validator=number_check(minimum=0))
    jitter: float = attrs.field(default=0.5, validator=number_check(minimum=0, maximum=1))

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
