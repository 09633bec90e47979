"""One node's shared stores: a Redis link, the caches, sessions, routing cache, the event
stream and the catalogue feed, opened together and passed to ``open_engine``."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import trio

from ..._core.catalog.tool import Tool
from ..._core.config import EngineConfig
from ..._core.errors import ConfigError
from ..._core.events import Event
from ..._core.public import NoPublicConstructor
from ..._core.stores import Stores
from ..._core.validators import is_number
from ..embedding_cache import EmbeddingCache
from ..enrichment_cache import EnrichmentCache
from ..learning import LearningCache, MemoryLearningStore
from ..local import cache_directory
from ..routing_cache import MemoryRoutingCache
from ..sessions import MemorySessionStore
from .caches import RedisEmbeddingStore, RedisEnrichmentStore
from .fast_tier import RedisFastTierStore
from .learning import RedisLearningStore
from .link import RedisLink, RedisStatistics
from .sessions import RedisRoutingCache, RedisSessionStore, RoutingCodec
from .streams import CatalogFeed, EventPublisher
from .urls import check_speaks_tls, checked_url, client_from, refusal, refused


class SharedEngine(Protocol):
    """What the shared stores need of an engine (``toolroute.Engine``)."""

    def subscribe(
        self, buffer: int | None = None, *, snapshot: bool = ...
    ) -> AbstractAsyncContextManager[trio.MemoryReceiveChannel[Any]]: ...

    async def update(
        self, *, add: Sequence[Tool] = (), remove: Sequence[str] = (), replace: Sequence[Tool] = ()
    ) -> None: ...

    async def reload_learned(self, tool_ids: Sequence[str] | None = None) -> None: ...


class _Reporting:
    """Mixed into each store the engine is given: the engine hands it its event hub."""

    _link: RedisLink

    def report_to(self, publish: Callable[[Event], None]) -> None:
        self._link.report_to(publish)


class _EmbeddingStore(_Reporting, RedisEmbeddingStore):
    pass


class _EnrichmentStore(_Reporting, RedisEnrichmentStore):
    pass


class _SessionStore(_Reporting, RedisSessionStore):
    pass


class RedisStores(metaclass=NoPublicConstructor):
    """One node's view of the fleet's Redis (made by ``open_redis_stores``).

    Attributes:
        stores: the ``Stores`` to pass to ``open_engine``.
        node: this node's name in the event and catalogue streams.
        learning: the shared learned evidence (``from_redis``: tools whose evidence Redis
            answered).
        fast_tier: the shared fast-tier folder (``fetched``, ``shared``: folders this node
            fetched, versions it wrote).
    """

    _way_in = "toolroute.redis.open_redis_stores(url)"

    def __init__(
        self,
        link: RedisLink,
        *,
        node: str,
        config: EngineConfig,
        codec: RoutingCodec,
        near: Path | None,
        lease_s: float,
        lock_wait_s: float,
        session_ttl_s: float,
        stream_maxlen: int,
    ) -> None:
        self._link = link
        self.node = node
        embeddings = _EmbeddingStore(link, EmbeddingCache(near) if near is not None else None)
        enrichment = _EnrichmentStore(
            link, EnrichmentCache(near / "enrichment") if near is not None else None
        )
        local = MemorySessionStore(
            max_sessions=config.sessions.max_sessions, idle_s=config.sessions.idle_s
        )
        self.sessions = _SessionStore(
            link, local, ttl_s=session_ttl_s, lease_s=lease_s, lock_wait_s=lock_wait_s
        )
        memory = config.routing_session
        routing = RedisRoutingCache(
            self.sessions,
            MemoryRoutingCache[object](entries=memory.cache_entries, ttl_s=memory.cache_ttl_s),
            codec,
            ttl_s=memory.cache_ttl_s,
        )
        # Learned evidence outlives the process on this node only where the caches do.
        self.learning = RedisLearningStore(
            link,
            LearningCache(near / "learning") if near is not None else MemoryLearningStore(),
            node=node,
            per_tool=config.learning.per_tool,
        )
        self.fast_tier = RedisFastTierStore(link)
        self.embeddings = embeddings
        self.stores = Stores(
            embeddings=embeddings,
            enrichment=enrichment,
            sessions=self.sessions,
            routing=routing,
            learning=self.learning,
            fast_tier=self.fast_tier,
        )
        self._events = EventPublisher(link, node, maxlen=stream_maxlen)
        link.on_resync(self._events.flush, self._events.pending)
        self.catalog = CatalogFeed(link, node)

    def statistics(self) -> RedisStatistics:
        """What this node has counted: calls, failures, outages, pending and dropped writes."""
        return self._link.statistics()

    @asynccontextmanager
    async def attach(self, engine: SharedEngine, *, buffer: int = 4096) -> AsyncIterator[None]:
        """For the block: publish ``engine``'s events to the stream, apply the other nodes'
        catalogue changes to it, and read again the evidence they learn."""
        # No snapshot: the stream is shared by every node and consumer, and a subscriber's
        # own ``subscription.started`` describes this node's state at attach, not a change.
        async with (
            trio.open_nursery() as nursery,
            engine.subscribe(buffer, snapshot=False) as deliveries,
        ):
            await nursery.start(self._events.run, deliveries)

            async def apply(
                add: Sequence[Tool], remove: Sequence[str], replace: Sequence[Tool]
            ) -> None:
                await engine.update(add=add, remove=remove, replace=replace)

            await nursery.start(self.catalog.run_follower, apply)
            await nursery.start(self.learning.run_follower, engine.reload_learned)
            try:
                yield
            finally:
                # The events of the block's last steps are sent before it ends (bounded:
                # each send has its deadline, and the wait a few of them).
                self._events.stop()
                with trio.move_on_after(4 * self._link.deadline_s, shield=True):
                    await self._events.stopped.wait()
                nursery.cancel_scope.cancel("shared stores detached")
                self._events.close()

    async def update(
        self,
        engine: SharedEngine,
        *,
        add: Sequence[Tool] = (),
        remove: Sequence[str] = (),
        replace: Sequence[Tool] = (),
    ) -> None:
        """``engine.update(...)`` here, then on every other attached node."""
        await engine.update(add=add, remove=remove, replace=replace)
        await self.catalog.publish(add, remove, replace)


#: Connections opened before the stores serve.
WARM_CONNECTIONS = 16


async def _ping(client: Any) -> object:
    return await client.ping()


async def _refusal(url: str, deadline_s: float) -> BaseException | None:
    """What Redis answered if it refuses a client for ``url`` (a wrong password, a database
    it does not have): the caller's mistake, not an outage. ``None`` when it accepts it, and
    when it is down or late: the stores fail open then, and the probe brings it back."""
    import coredis.exceptions

    found: BaseException | None = None
    with trio.move_on_after(deadline_s):
        try:
            async with client_from(url, connect_timeout=deadline_s) as client:
                await client.ping()
        except (coredis.exceptions.RedisError, OSError) as exc:
            found = refusal(exc)
        except BaseExceptionGroup as group:  # how the client raises on leaving its block
            if group.split((coredis.exceptions.RedisError, OSError))[1] is not None:
                raise
            found = refusal(group)
    return found


def default_node_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@asynccontextmanager
async def open_shared_stores(
    url: str,
    *,
    codec: RoutingCodec,
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
    """See ``toolroute.redis.open_redis_stores``."""
    config = _checked(
        config,
        deadline_s,
        probe_interval_s,
        lease_s,
        lock_wait_s,
        stream_maxlen,
        session_ttl_s=session_ttl_s,
        namespace=namespace,
        node=node,
    )
    checked_url(url)
    try:
        import coredis
        from coredis.retry import NoRetryPolicy
    except ImportError as exc:
        raise ConfigError("the Redis stores need coredis: pip install 'toolroute[redis]'") from exc
    # No client-side retries: a failed call fails open at once and the probe brings it back.
    client: coredis.Redis[bytes] = client_from(
        url, retry_policy=NoRetryPolicy(), connect_timeout=deadline_s
    )
    await check_speaks_tls(url, deadline_s)
    if (refusing := await _refusal(url, deadline_s)) is not None:
        raise refused(url, refusing)
    async with client:
        link = RedisLink(
            client, namespace=namespace, deadline_s=deadline_s, probe_interval_s=probe_interval_s
        )
        shared = RedisStores._create(
            link,
            node=node or default_node_name(),
            config=config,
            codec=codec,
            near=cache_directory(config),
            lease_s=lease_s,
            lock_wait_s=lock_wait_s,
            session_ttl_s=session_ttl_s if session_ttl_s is not None else config.sessions.idle_s,
            stream_maxlen=stream_maxlen,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(link.run_probe)
            # Open a few connections now, not under the first burst of steps' deadlines.
            async with trio.open_nursery() as warming:
                for _ in range(WARM_CONNECTIONS):
                    warming.start_soon(link.call, "connect", _ping)
            await nursery.start(shared.sessions.run_updates)
            await nursery.start(shared.sessions.run_retries)
            await nursery.start(shared.sessions.run_lines)
            try:
                yield shared
            finally:
                nursery.cancel_scope.cancel("shared stores closed")


def _checked(
    config: EngineConfig | None,
    deadline_s: float,
    probe_interval_s: float,
    lease_s: float,
    lock_wait_s: float,
    stream_maxlen: int,
    *,
    session_ttl_s: float | None,
    namespace: str,
    node: str | None,
) -> EngineConfig:
    if config is None:
        config = EngineConfig()
    elif not isinstance(config, EngineConfig):
        raise ConfigError(f"config must be an EngineConfig or None, got {type(config).__name__}")
    seconds = [
        ("deadline_s", deadline_s),
        ("probe_interval_s", probe_interval_s),
        ("lease_s", lease_s),
        ("lock_wait_s", lock_wait_s),
    ]
    if session_ttl_s is not None:
        seconds.append(("session_ttl_s", session_ttl_s))
    for name, value in seconds:
        # Finite: an infinite deadline is no deadline, and a TTL Redis cannot take.
        if not is_number(value) or not value > 0:
            raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
    if isinstance(stream_maxlen, bool) or not isinstance(stream_maxlen, int) or stream_maxlen < 1:
        raise ConfigError(f"stream_maxlen must be a positive int, got {stream_maxlen!r}")
    if not isinstance(namespace, str) or not namespace:
        raise ConfigError(f"namespace must be a non-empty string, got {namespace!r}")
    if node is not None and not isinstance(node, str):
        raise ConfigError(f"node must be a string or None, got {node!r}")
    return config
