"""Stores sit behind the core's protocols: the local ones conform, and a store of the host's
own plugs into ``open_engine`` without the runtime knowing which it is."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import trio
import trio.testing

from toolroute import Catalog, EngineConfig
from toolroute._core.config import WarmupConfig
from toolroute._core.stores import (
    EmbeddingStore,
    EnrichmentStore,
    RoutingCache,
    SessionStore,
    Stores,
)
from toolroute._runtime.engine import open_engine
from toolroute._stores.embedding_cache import EmbeddingCache
from toolroute._stores.enrichment_cache import EnrichmentCache
from toolroute._stores.local import cache_directory, local_stores
from toolroute._stores.routing_cache import MemoryRoutingCache
from toolroute._stores.sessions import MemorySessionStore
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
    ]
)


class DictEmbeddings:
    """A host's own embedding store (think Redis): a dict, counting what it is asked."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], npt.NDArray[np.float32]] = {}
        self.gets = self.puts = 0

    def get_many(
        self, identity: str, dim: int, texts: Sequence[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        self.gets += 1
        vectors = np.zeros((len(texts), dim), dtype=np.float32)
        found = np.zeros(len(texts), dtype=np.bool_)
        for i, text in enumerate(texts):
            if (identity, text) in self.rows:
                vectors[i], found[i] = self.rows[identity, text], True
        return vectors, found

    def put_many(
        self, identity: str, texts: Sequence[str], vectors: npt.NDArray[np.floating[Any]]
    ) -> None:
        self.puts += 1
        for text, row in zip(texts, vectors, strict=True):
            self.rows[identity, text] = np.asarray(row, dtype=np.float32)


def test_local_stores_conform_to_the_protocols(tmp_path: Path) -> None:
    assert isinstance(EmbeddingCache(tmp_path), EmbeddingStore)
    assert isinstance(EnrichmentCache(tmp_path), EnrichmentStore)
    assert isinstance(MemorySessionStore(), SessionStore)
    assert isinstance(MemoryRoutingCache[object](entries=4, ttl_s=1.0), RoutingCache)
    assert isinstance(DictEmbeddings(), EmbeddingStore)


def test_one_cache_directory_rule(tmp_path: Path) -> None:
    config = EngineConfig(cache_dir=tmp_path)
    assert cache_directory(config) == tmp_path
    assert cache_directory(EngineConfig(cache=False, cache_dir=tmp_path)) is None
    stores = local_stores(config)
    assert isinstance(stores.embeddings, EmbeddingCache)
    assert stores.embeddings.directory == tmp_path
    assert isinstance(stores.enrichment, EnrichmentCache)
    assert stores.enrichment.directory == tmp_path / "enrichment"
    off = local_stores(EngineConfig(cache=False))
    assert off.embeddings is None
    assert off.enrichment is None


def test_given_stores_win_over_local_ones(tmp_path: Path) -> None:
    mine = DictEmbeddings()
    sessions = MemorySessionStore(max_sessions=3)
    stores = local_stores(
        EngineConfig(cache_dir=tmp_path), Stores(embeddings=mine, sessions=sessions)
    )
    assert stores.embeddings is mine
    assert stores.sessions is sessions
    assert isinstance(stores.enrichment, EnrichmentCache)  # left out: the local one


async def test_a_hosts_embedding_store_serves_the_second_engine(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = DictEmbeddings()
    config = EngineConfig(warmup=WarmupConfig(wait=True))  # caching on, but not on disk

    async def inline(fn: Any, *args: Any, limiter: trio.CapacityLimiter) -> Any:
        return fn(*args)

    for _ in range(2):
        async with open_engine(
            TOOLS,
            config=config,
            embedder=HashingEmbedder(),
            run_cpu=inline,
            stores=Stores(embeddings=shared),
        ) as engine:
            assert engine.index.vectors is not None
    assert len(shared.rows) == len(TOOLS)  # the first engine filled it ...
    assert shared.puts == 1  # ... the second found every vector there
