"""What the engine remembers, behind small protocols, and the local stores it uses by default.

::

    from toolroute import open_engine
    from toolroute.stores import Stores

    async with open_engine(catalog, stores=Stores(sessions=my_shared_sessions)) as engine:
        ...   # every store left out stays local

A shared store (a fleet's Redis, say) implements the protocol and is passed in; the engine
does not change.
"""

from ._core.public import publish as _publish
from ._core.stores import EmbeddingStore as EmbeddingStore
from ._core.stores import EnrichmentStore as EnrichmentStore
from ._core.stores import FastTierStore as FastTierStore
from ._core.stores import LearnedExample as LearnedExample
from ._core.stores import LearningStore as LearningStore
from ._core.stores import RoutingCache as RoutingCache
from ._core.stores import SessionState as SessionState
from ._core.stores import SessionStore as SessionStore
from ._core.stores import Stores as Stores
from ._stores.embedding_cache import EmbeddingCache as EmbeddingCache
from ._stores.enrichment_cache import EnrichmentCache as EnrichmentCache
from ._stores.learning import LearningCache as LearningCache
from ._stores.learning import MemoryLearningStore as MemoryLearningStore
from ._stores.routing_cache import MemoryRoutingCache as MemoryRoutingCache
from ._stores.sessions import MemorySessionStore as MemorySessionStore

__all__ = [
    "EmbeddingCache",
    "EmbeddingStore",
    "EnrichmentCache",
    "EnrichmentStore",
    "FastTierStore",
    "LearnedExample",
    "LearningCache",
    "LearningStore",
    "MemoryLearningStore",
    "MemoryRoutingCache",
    "MemorySessionStore",
    "RoutingCache",
    "SessionState",
    "SessionStore",
    "Stores",
]

_publish(__name__, globals())
