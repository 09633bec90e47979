"""``open_redis_stores`` and ``open_event_consumer`` (public in ``toolroute.redis``): the
shared stores with the runtime's routing outcome as the routing cache's record type."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .._core.config import EngineConfig
from .._core.errors import ConfigError
from .._routing.questions import RoutingOutcome
from .._stores.redis.codec import AttrsCodec
from .._stores.redis.shared import RedisStores, open_shared_stores
from .._stores.redis.streams import EventConsumer
from .._stores.redis.urls import check_speaks_tls, checked_url, client_from, refusal, refused

__all__ = ["open_event_consumer", "open_redis_stores"]


@asynccontextmanager
async def open_redis_stores(
    url: str,
    *,
    config: EngineConfig | None = None,
    namespace: str = "toolroute",
    node: str | None = None,
    deadline_s: float = 0.25,
    probe_interval_s: float = 0.5,
    lease_s: float = 5.0,
    lock_wait_s: float = 0.25,
    session_ttl_s: float | None = None,
    stream_maxlen: int = 100_000,
) -> AsyncIterator[RedisStores]:
    """This node's shared stores over the Redis at ``url``, for the duration of the block.

    Args:
        url: ``redis://host:port/db`` (or ``rediss://``, ``unix://``).
        config: the ``EngineConfig`` the engine runs with: its cache directory is the near
            tier of the shared caches (none with ``cache`` off), its session bound and idle
            time bound this node's copies, its routing-cache TTL applies to shared entries.
        namespace: the prefix of every key, so several fleets can share one Redis.
        node: this node's name in the streams; host name and process id by default.
        deadline_s: seconds any one Redis call may take before the node fails open.
        probe_interval_s: seconds between pings while Redis is down.
        lease_s: seconds a node holds a session at most (a crashed node's hold ends then).
        lock_wait_s: seconds a step waits for another node to finish a step of the same
            session before it runs on this node's copy of the session.
        session_ttl_s: seconds a session lives in Redis after its last step;
            ``config.sessions.idle_s`` by default.
        stream_maxlen: the event stream's approximate length bound (``MAXLEN ~``).

    Yields:
        ``RedisStores``: ``.stores`` for ``open_engine``, ``.attach(engine)``,
        ``.update(engine, ...)``, ``.statistics()``.

    Raises:
        ConfigError: a bad URL or option, Redis answered that it refuses the URL's password,
            user or database number, a ``rediss://`` URL names a plain Redis (which never
            answers a TLS handshake), or coredis is not installed.

    **Fail-open:** Redis need not be up when the block starts; every call has ``deadline_s``;
    while Redis is down nothing waits on it, writes and events wait (bounded, the excess
    counted) and go out when it returns.
    """
    async with open_shared_stores(
        url,
        codec=AttrsCodec(RoutingOutcome),
        config=config,
        namespace=namespace,
        node=node,
        deadline_s=deadline_s,
        probe_interval_s=probe_interval_s,
        lease_s=lease_s,
        lock_wait_s=lock_wait_s,
        session_ttl_s=session_ttl_s,
        stream_maxlen=stream_maxlen,
    ) as shared:
        yield shared


@asynccontextmanager
async def open_event_consumer(
    url: str,
    *,
    group: str,
    consumer: str,
    namespace: str = "toolroute",
    start: str = "$",
    block_ms: int = 1000,
) -> AsyncIterator[EventConsumer]:
    """Read the fleet's events as ``consumer`` of consumer group ``group``.

    Args:
        url: the fleet's Redis.
        group: the consumer group (created at ``start`` unless it exists): each group sees
            every event; the consumers of one group share them.
        consumer: this reader's name within the group.
        namespace: as given to ``open_redis_stores``.
        start: where a new group starts: ``"$"`` (new events) or ``"0"`` (the whole stream).
        block_ms: milliseconds one read waits for an event.

    Yields:
        An ``EventConsumer``: ``async for item in consumer`` yields ``StreamedEvent``s
        (acknowledged as the next is asked for), or ``read()`` and ``ack()`` by hand.

    Raises:
        ConfigError: a bad URL or argument, Redis refused the URL's password, user or
            database number, a ``rediss://`` URL names a plain Redis, or coredis is not
            installed.
    """
    checked_url(url)
    for name, value in (("group", group), ("consumer", consumer), ("namespace", namespace)):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
    if not isinstance(start, str) or not re.fullmatch(r"\$|\d+(-\d+)?", start):
        raise ConfigError(f'start must be "$", "0" or a stream entry id, got {start!r}')
    # Redis reads BLOCK 0 as "wait for ever": a read would never come back.
    if isinstance(block_ms, bool) or not isinstance(block_ms, int) or block_ms < 1:
        raise ConfigError(f"block_ms must be a positive int (milliseconds), got {block_ms!r}")
    try:
        import coredis
        import coredis.exceptions
    except ImportError as exc:
        raise ConfigError("reading events needs coredis: pip install 'toolroute[redis]'") from exc
    await check_speaks_tls(url)
    client: coredis.Redis[bytes] = client_from(url)
    refusing: BaseException | None = None
    async with client:
        reader = EventConsumer._create(
            client, namespace=namespace, group=group, consumer=consumer, block_ms=block_ms
        )
        try:
            await reader.create_group(start)
        except coredis.exceptions.RedisError as exc:
            if (refusing := refusal(exc)) is None:
                raise
        else:
            yield reader
    if refusing is not None:  # raised here, not inside the client's exception group
        raise refused(url, refusing)
