"""Stores shared by a fleet of nodes through Redis (the optional extra ``toolroute[redis]``).

::

    from toolroute import open_engine
    from toolroute.redis import open_redis_stores

    async with open_redis_stores("redis://127.0.0.1:6379") as shared:
        async with open_engine(catalog, stores=shared.stores) as engine:
            async with shared.attach(engine):  # events out, other nodes' catalogue changes in
                ...

Embeddings, enrichment phrases, session state and the routing cache are shared by every node;
the engine's events go to a Redis Stream that ``open_event_consumer`` reads through consumer
groups (``toolroute events --follow`` on the command line). When Redis is slow or down, each
node serves from its local stores, counts it and says so in a ``fail_open`` event.
"""

from ._core.public import publish as _publish
from ._runtime.redis_stores import open_event_consumer as open_event_consumer
from ._runtime.redis_stores import open_redis_stores as open_redis_stores
from ._stores.redis.link import RedisStatistics as RedisStatistics
from ._stores.redis.shared import RedisStores as RedisStores
from ._stores.redis.streams import EventConsumer as EventConsumer
from ._stores.redis.streams import StreamedEvent as StreamedEvent

__all__ = [
    "EventConsumer",
    "RedisStatistics",
    "RedisStores",
    "StreamedEvent",
    "open_event_consumer",
    "open_redis_stores",
]

_publish(__name__, globals())
