"""The catalogue keeper: owns the one snapshot the engine serves, warms it up, updates it.

Readers take ``keeper.snapshot`` (no lock, no round trip); the keeper replaces it whole, with
one attribute assignment, after warm-up brings vectors or an update changes the catalogue.
Warm-up (enrichment, then tool embeddings) is the keeper's supervised service; updates go
through the keeper one at a time.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import trio

from .._core.catalog.catalog import Tool
from .._core.config import EngineConfig
from .._core.events import CatalogUpdated, Event, FailOpen, WarmupFinished, WarmupProgress
from .._core.recall.index import brief
from .._core.recall.vectors import INT8_FROM
from .._core.select.toolsets import ToolSet
from .._core.stores import EmbeddingStore, EnrichmentStore
from .._judge.enrich import enrich_tools
from .._stores.embedding_cache import embed_with_cache
from .catalog_changes import dedupe_catalog, served, updated_catalog
from .snapshot import Snapshot
from .tool_index import ToolIndex, served_index
from .workers import EngineClosing, WorkerCalls

if TYPE_CHECKING:
    from ..providers import Embedder, Generator


class CatalogKeeper:
    """Owner of the engine's ``Snapshot``; ``run`` is its (supervised) warm-up service.

    Args:
        snapshot: the first snapshot (keyword-only).
        tool_sets: the engine's tool sets, as given (each snapshot serves them).
        embedder: the engine's embedder, ``None`` for keyword-only.
        generator: the chat model behind enrichment, if any.
        embeddings, enrichment: the stores warm-up and updates read and fill.
        workers: where CPU and model work runs.
        cpu: the limiter that work shares with recall.
        publish: the event hub's ``publish``.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        config: EngineConfig,
        tool_sets: Sequence[ToolSet],
        embedder: Embedder | None,
        generator: Generator | None,
        embeddings: EmbeddingStore | None,
        enrichment: EnrichmentStore | None,
        workers: WorkerCalls,
        cpu: trio.CapacityLimiter,
        publish: Callable[[Event], None],
    ) -> None:
        self.snapshot = snapshot
        self._config = config
        self._tool_sets = tuple(tool_sets)
        self._embedder = embedder
        self._generator = generator
        self._embeddings = embeddings
        self._enrichment = enrichment
        self._workers = workers
        self._cpu = cpu
        self._publish = publish
        self._ready = trio.Event()
        self._updating = trio.Lock()  # one catalogue change at a time
        self._version = 0
        if not self.needs_warm_up:
            self._ready.set()

    @property
    def needs_warm_up(self) -> bool:
        enrich = self._config.enrichment.enabled and self._generator is not None
        return self._embedder is not None or enrich

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set()

    async def ready(self) -> None:
        """Wait until warm-up has finished (or failed, leaving the engine keyword-only)."""
        await self._ready.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The warm-up service: enrich, then embed the catalogue, then return."""
        task_status.started()
        if self._ready.is_set():
            return
        await self._enrich()
        if self._embedder is not None:
            await self._embed(self._embedder)
        self._ready.set()

    async def update(
        self, *, add: Sequence[Tool] = (), remove: Sequence[str] = (), replace: Sequence[Tool] = ()
    ) -> None:
        """Change the catalogue (see ``Engine.update``)."""
        async with self._updating:
            old = self.snapshot
            catalog = updated_catalog(old.source, add=add, remove=remove, replace=replace)
            dedup, failure = await dedupe_catalog(
                catalog,
                self._config,
                self._embedder,
                self._embeddings,
                self._workers.run,
                self._cpu,
            )
            if failure:
                self._publish(FailOpen(operation="update", what_failed="dedup", reason=failure))
            # Unchanged tools keep their enrichment; added and replaced ones are enriched at
            # the next warm-up (the store keeps the rest).
            changed = {t.id for t in (*add, *replace)}
            extra = {i: t for i, t in old.index.extra_text.items() if i not in changed}
            new = await self._workers.run(
                functools.partial(served_index, extra_text=extra),
                served(dedup),
                limiter=self._cpu,
            )
            if self._embedder is not None:
                # During warm-up this embeds the whole catalogue (the store absorbs the
                # repeat); warm-up then sees the catalogue changed and drops its stale vectors.
                new = await self._with_vectors(new, old.index, self._embedder)
            self.snapshot = Snapshot.build(catalog, dedup, new, self._tool_sets)
            self._version += 1
            self._publish(
                CatalogUpdated(
                    added=tuple(t.id for t in add),
                    removed=tuple(remove),
                    replaced=tuple(t.id for t in replace),
                    version=self._version,
                )
            )

    async def _with_vectors(self, new: ToolIndex, old: ToolIndex, embedder: Embedder) -> ToolIndex:
        """``new`` with vectors: reused from ``old`` where the text is unchanged."""
        texts = new.embedding_texts()
        known: dict[str, int] = {}
        if old.vectors is not None:
            known = {text: i for i, text in enumerate(old.embedding_texts())}
        rows = np.zeros((len(texts), int(embedder.dim)), dtype=np.float32)
        missing = [i for i, text in enumerate(texts) if text not in known]
        for i, text in enumerate(texts):
            if text in known and old.vectors is not None:
                rows[i] = old.vectors.matrix[known[text]]
        try:
            if missing:
                rows[missing] = await self._workers.run(
                    embed_with_cache,
                    embedder,
                    [texts[i] for i in missing],
                    self._embeddings,
                    limiter=self._cpu,
                )
            return await self._indexed(new, embedder, rows)
        except Exception as exc:  # the new catalogue is served keyword-only
            reason = brief(exc)
            self._publish(FailOpen(operation="update", what_failed="embedder", reason=reason))
            return new.without_vectors(f"embedder failed while indexing: {reason}")

    async def _indexed(
        self, index: ToolIndex, embedder: Embedder, vectors: npt.NDArray[np.float32]
    ) -> ToolIndex:
        """``index.with_vectors``; for a large catalogue in a worker thread: quantising it and
        loading the int8 kernel take a fraction of a second, not for the event loop."""
        if len(index.catalog) < INT8_FROM:
            return index.with_vectors(embedder, vectors)
        return await self._workers.run(index.with_vectors, embedder, vectors, limiter=self._cpu)

    async def _enrich(self) -> None:
        """Add the generator's phrasings to the recall text (``config.enrichment``); tools
        whose batch failed keep their original text."""
        settings = self._config.enrichment
        if not settings.enabled or self._generator is None:
            return
        catalog = self.snapshot.index.catalog
        result = await enrich_tools(
            list(catalog),
            self._generator,
            cache=self._enrichment,
            batch=settings.batch,
            deadline_s=settings.deadline_s,
            concurrency=settings.concurrency,
        )
        if result.failed:
            why = result.reasons[0] if result.reasons else "no phrasings came back"
            self._publish(
                FailOpen(
                    operation="warmup",
                    what_failed="enrichment",
                    reason=f"{result.failed} tools keep their original text: {why}",
                )
            )
        if not result.texts:
            return
        async with self._updating:
            current = self.snapshot
            if current.index.catalog is catalog and current.index.vectors is None:
                index = await self._workers.run(
                    functools.partial(served_index, extra_text=result.texts),
                    catalog,
                    limiter=self._cpu,
                )
                self.snapshot = current.with_index(index, self._tool_sets)

    async def _embed(self, embedder: Embedder) -> None:
        started = time.perf_counter()
        token = trio.lowlevel.current_trio_token()
        first = self.snapshot.index
        catalog = first.catalog
        counts: list[int] = []
        workers = self._workers

        def progress(done: int, total: int) -> None:
            # In the worker thread: stop between batches once the engine is shutting down.
            if workers.closing:
                raise EngineClosing("warm-up stopped: the engine is shutting down")
            counts.append(total)
            # Thread-safe hop back to the trio thread; publish never blocks there.
            token.run_sync_soon(self._publish, WarmupProgress(done=done, total=total))

        try:
            vectors = await workers.run(
                _embed_index,
                embedder,
                first,
                self._embeddings,
                progress,
                self._config.warmup.batch,
                limiter=self._cpu,
            )
            async with self._updating:
                # An update during warm-up brought its own vectors: these are stale then.
                current = self.snapshot
                if current.index.catalog is catalog and current.index.vectors is None:
                    index = await self._indexed(current.index, embedder, vectors)
                    self.snapshot = current.with_index(index, self._tool_sets)
            degraded, reason = False, ""
        except Exception as exc:  # warm-up failure leaves the engine keyword-only
            degraded, reason = True, brief(exc)
            current = self.snapshot
            index = current.index.without_vectors(f"embedder failed while indexing: {reason}")
            self.snapshot = current.with_index(index, self._tool_sets)
            self._publish(FailOpen(operation="warmup", what_failed="embedder", reason=reason))
        embedded = counts[0] if counts else 0
        self._publish(
            WarmupFinished(
                tools=len(catalog),
                embedded=embedded,
                from_cache=len(catalog) - embedded if not degraded else 0,
                seconds=time.perf_counter() - started,
                degraded=degraded,
                reason=reason,
            )
        )


def _embed_index(
    embedder: Embedder,
    index: ToolIndex,
    cache: EmbeddingStore | None,
    progress: Callable[[int, int], None],
    batch: int,
) -> npt.NDArray[np.float32]:
    """``index``'s tool vectors; in the worker thread, texts included (building the texts
    of a large catalogue takes a noticeable slice of a second: not on the event loop)."""
    return embed_with_cache(embedder, index.embedding_texts(), cache, progress, batch)
