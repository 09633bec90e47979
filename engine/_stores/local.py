"""The local stores and the one rule for where the engine caches on disk."""

from __future__ import annotations

from pathlib import Path

import attrs

from .._core.config import EngineConfig
from .._core.stores import (
    EmbeddingStore,
    EnrichmentStore,
    FastTierStore,
    LearningStore,
    RoutingCache,
    SessionStore,
    Stores,
)
from .embedding_cache import EmbeddingCache, default_cache_dir
from .enrichment_cache import EnrichmentCache
from .learning import LearningCache, MemoryLearningStore
from .routing_cache import MemoryRoutingCache
from .sessions import MemorySessionStore


def cache_directory(config: EngineConfig) -> Path | None:
    """Where the engine caches on disk (embeddings, enrichment in its ``enrichment``
    folder); ``None`` with caching off. ``config.cache_dir``, else ``default_cache_dir()``."""
    if not config.cache:
        return None
    return Path(config.cache_dir) if config.cache_dir else default_cache_dir()


@attrs.frozen(kw_only=True)
class EngineStores:
    """The stores an engine runs with: ``Stores`` with the local defaults filled in
    (``None`` for a disk store means none: caching is off)."""

    embeddings: EmbeddingStore | None
    enrichment: EnrichmentStore | None
    sessions: SessionStore
    routing: RoutingCache[object]
    learning: LearningStore
    fast_tier: FastTierStore | None = None  # none: the fast tier stays in this node's cache


def local_stores(config: EngineConfig, given: Stores | None = None) -> EngineStores:
    """``given`` with every store it leaves out replaced by the local one ``config`` asks
    for (no disk store when ``config.cache`` is off)."""
    given = given or Stores()
    directory = (
        cache_directory(config)
        if None in (given.embeddings, given.enrichment, given.learning)
        else None
    )
    embeddings = given.embeddings
    if embeddings is None and directory is not None:
        embeddings = EmbeddingCache(directory)
    enrichment = given.enrichment
    if enrichment is None and directory is not None:
        enrichment = EnrichmentCache(directory / "enrichment")
    # ``is None``, not ``or``: an empty store has length 0, so it is falsy.
    sessions = given.sessions
    if sessions is None:
        sessions = MemorySessionStore(
            max_sessions=config.sessions.max_sessions, idle_s=config.sessions.idle_s
        )
    memory = config.routing_session
    routing = given.routing
    if routing is None:
        routing = MemoryRoutingCache[object](entries=memory.cache_entries, ttl_s=memory.cache_ttl_s)
    learning = given.learning
    if learning is None:
        # Learned evidence outlives the process only where the caches do.
        learning = (
            LearningCache(directory / "learning")
            if directory is not None
            else MemoryLearningStore()
        )
    return EngineStores(
        embeddings=embeddings,
        enrichment=enrichment,
        sessions=sessions,
        routing=routing,
        learning=learning,
        fast_tier=given.fast_tier,
    )
