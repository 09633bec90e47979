"""A Redis URL, checked before a client is made from it, and what Redis answers when it
refuses a client for its URL: the caller's mistakes, said clearly, never failed open."""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import trio

from ..._core.errors import ConfigError, leaves

SCHEMES: Final = ("redis://", "rediss://", "unix://")


def shown(url: str) -> str:
    """``url`` with its password hidden, for messages and logs."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@" + parts.netloc.rpartition("@")[2]).geturl()


def checked_url(url: object, what: str = "url") -> str:
    """``url`` when the client reads it as written.

    Raises:
        ConfigError: not a string of one of the ``SCHEMES``, a port that is not a number,
            or a database that is not a number (which the client would silently read as 0).
    """
    if not isinstance(url, str) or not url.startswith(SCHEMES):
        got = shown(url) if isinstance(url, str) else url
        raise ConfigError(f"{what} must be a redis://, rediss:// or unix:// URL, got {got!r}")
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (read for its check)
    except ValueError:
        raise ConfigError(
            f"{what}: the port must be a number from 0 to 65535, got {shown(url)!r}"
        ) from None
    databases = parse_qs(parts.query).get("db", [])
    if parts.scheme != "unix" and parts.path.strip("/"):
        databases.append(parts.path.strip("/"))
    for database in databases:
        if not database.isdigit():
            raise ConfigError(
                f"{what}: the database must be a number (redis://host:port/0), "
                f"got {database!r} in {shown(url)!r}"
            )
    return url


#: Seconds a ``rediss://`` server has to answer the plain-text PING of ``check_speaks_tls``
#: where the caller has no deadline of its own.
PROBE_S: Final = 1.0


async def check_speaks_tls(url: str, deadline_s: float = PROBE_S) -> None:
    """For a ``rediss://`` URL, that its server is not a plain Redis. A plain Redis reads a
    TLS client's hello as an unfinished command and never answers it: the URL would look like
    a Redis that is always down. Asked before any handshake: a TLS server closes the
    plain-text connection or answers with an alert.

    Raises:
        ConfigError: the server answers a plain-text PING (in Redis's protocol); anything
            else (nothing listening, no answer, a TLS alert) is left to fail open.
    """
    if not url.startswith("rediss://"):
        return
    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or 6379
    answer = b""
    with trio.move_on_after(deadline_s):
        try:
            async with await trio.open_tcp_stream(host, port) as stream:
                await stream.send_all(b"PING\r\n")
                answer = await stream.receive_some(64)
        except OSError:
            return
    # ``+PONG``, or an error such as ``-NOAUTH``: Redis's own protocol, not TLS.
    if answer[:1] in (b"+", b"-"):
        said = answer.partition(b"\r")[0][:40].decode("ascii", "replace")
        raise ConfigError(
            f"the server at {host}:{port} speaks plain Redis (it answered a plain-text PING "
            f"with {said!r}) and will never answer a TLS handshake; is it plain redis:// "
            f"rather than {shown(url)}?"
        )


#: What Redis says when a client's database number does not exist.
_NO_SUCH_DATABASE: Final = "DB index is out of range"


def refusal(exc: BaseException) -> BaseException | None:
    """The error (in ``exc``, or in the exception groups around it) by which Redis refused
    this client for its URL: a wrong or missing password or user, or a database number the
    server does not have. ``None`` for anything else (down, late, dropped)."""
    import coredis.exceptions

    for leaf in leaves(exc):
        if isinstance(leaf, coredis.exceptions.AuthenticationError) or (
            type(leaf) is coredis.exceptions.ResponseError
            and str(leaf).startswith(_NO_SUCH_DATABASE)
        ):
            return leaf
    return None


def refused(url: str, exc: BaseException) -> ConfigError:
    """The ``ConfigError`` for Redis's ``refusal`` of the client made from ``url``."""
    return ConfigError(
        f"the Redis at {shown(url)} refused this client: {type(exc).__name__}: {exc} "
        "(check the URL's user, password and database number)"
    )


def client_from(url: str, what: str = "url", **options: Any) -> Any:
    """``coredis.Redis.from_url(url, **options)`` for a URL ``checked_url`` passed (each
    caller checks it first, before it needs coredis).

    Raises:
        ConfigError: an option the client cannot read.
    """
    import coredis

    try:
        return coredis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc} in {shown(url)!r}") from None
