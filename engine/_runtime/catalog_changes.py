"""Changes to what the engine serves: the catalogue after updates and dedup, and the tool
sets checked against it. Plain functions; the keeper runs the CPU-heavy ones off the event
loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import trio

from .._core.catalog.catalog import Catalog, Tool
from .._core.catalog.dedup import DedupResult, dedupe_tools
from .._core.config import EngineConfig
from .._core.errors import ConfigError
from .._core.recall.index import brief
from .._core.select.policy import Policy
from .._core.select.toolsets import ToolSet
from .._core.stores import EmbeddingStore
from .._stores.embedding_cache import embed_with_cache
from .workers import RunCpu

if TYPE_CHECKING:
    from ..providers import Embedder


def served(dedup: DedupResult) -> Catalog:
    tools = dedup.tools
    return tools if isinstance(tools, Catalog) else Catalog(tools)


def checked_sets(tool_sets: Sequence[ToolSet], catalog: Catalog) -> tuple[ToolSet, ...]:
    """``tool_sets`` checked against ``catalog``: ``ConfigError`` names a bad one."""
    policy = Policy(tool_sets=tool_sets)  # checks they are ToolSets
    policy.check_ids(catalog)
    names = [s.name for s in policy.tool_sets]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"tool set names must be unique: {', '.join(map(repr, twice))}")
    return policy.tool_sets


class _WatchedEmbedder:
    """The engine's embedder for embedding-mode dedup: through the disk cache (warm-up then
    finds the vectors there), noting the failure that ``dedupe_tools`` swallows."""

    def __init__(self, inner: Embedder, cache: EmbeddingStore | None) -> None:
        self.inner, self.cache = inner, cache
        self.identity, self.dim, self.max_batch = inner.identity, inner.dim, inner.max_batch
        self.failure = ""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        try:
            return embed_with_cache(self.inner, texts, self.cache)
        except Exception as exc:
            self.failure = brief(exc)
            raise


def _dedupe_sync(
    catalog: Catalog,
    config: EngineConfig,
    embedder: Embedder | None,
    cache: EmbeddingStore | None,
) -> tuple[DedupResult, str]:
    dedup, watched = config.dedup, None
    if dedup.mode == "embedding":
        assert embedder is not None  # open_engine refuses the mode without one
        watched = _WatchedEmbedder(embedder, cache)
    result = dedupe_tools(catalog, threshold=dedup.threshold, mode=dedup.mode, embedder=watched)
    return result, watched.failure if watched is not None else ""


async def dedupe_catalog(
    catalog: Catalog,
    config: EngineConfig,
    embedder: Embedder | None,
    cache: EmbeddingStore | None,
    run_cpu: RunCpu,
    limiter: trio.CapacityLimiter,
) -> tuple[DedupResult, str]:
    """``catalog`` deduplicated as ``config.dedup`` says, off the event loop, and why it fell
    back to every tool if it failed (fail-open: the original catalogue, nothing removed)."""
    if not config.dedup.enabled:
        return DedupResult(tools=catalog), ""
    try:
        result: tuple[DedupResult, str] = await run_cpu(
            _dedupe_sync, catalog, config, embedder, cache, limiter=limiter
        )
    except Exception as exc:
        return DedupResult(tools=catalog), brief(exc)
    return result


def updated_catalog(
    catalog: Catalog,
    *,
    add: Sequence[Tool] = (),
    remove: Sequence[str] = (),
    replace: Sequence[Tool] = (),
) -> Catalog:
    """``catalog`` with ``remove`` ids dropped, ``replace`` tools swapped in by id, ``add``
    appended; order is kept and new tools come last."""
    removed = set(remove)
    replacing = {tool.id: tool for tool in replace}
    unknown = [i for i in (*removed, *replacing) if i not in catalog]
    if unknown:
        raise ConfigError(
            f"update names tools not in the catalogue: {', '.join(map(repr, unknown))}"
        )
    kept = [replacing.get(t.id, t) for t in catalog if t.id not in removed]
    descriptions = {server.id: server.description for server in catalog.servers}
    return Catalog([*kept, *add], server_descriptions=descriptions)


def catalog_difference(
    old: Catalog, new: Catalog
) -> tuple[tuple[Tool, ...], tuple[str, ...], tuple[Tool, ...]]:
    """What turns ``old`` into ``new``: the tools added, the ids removed, the tools whose
    definition changed (same id, any field different), each in catalogue order."""
    added = tuple(tool for tool in new if tool.id not in old)
    removed = tuple(tool.id for tool in old if tool.id not in new)
    replaced = tuple(tool for tool in new if tool.id in old and old[tool.id] != tool)
    return added, removed, replaced
