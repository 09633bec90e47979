"""The catalogue keeper: owns the one snapshot the engine serves, warms it up, updates it.

Readers take ``keeper.snapshot`` (no lock, no round trip); the keeper replaces it whole, with
one attribute assignment, after warm-up brings vectors or an update changes the catalogue.

The keeper is an actor (``run``, supervised): its loop is the only writer of the snapshot and
never awaits work. Updates arrive in its inbox as ``Update`` messages and are built one at a
time, in arrival order, by a child task that reports back with ``Built``; warm-up (enrichment,
then tool embeddings) is another child that reports each index it made with ``Install``. A
result is installed only over the snapshot it was computed from: work that went stale while
it ran (an update landed meanwhile) is dropped, so it never overwrites newer vectors.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np
import numpy.typing as npt
import trio

from .._core.catalog.catalog import Catalog, Tool
from .._core.config import EngineConfig
from .._core.events import CatalogUpdated, Event, FailOpen, WarmupFinished, WarmupProgress
from .._core.recall.index import RecallIndex, brief
from .._core.recall.vectors import INT8_FROM
from .._core.select.toolsets import ToolSet
from .._core.stores import EmbeddingStore, EnrichmentStore
from .._judge.enrich import enrich_tools
from .._stores.embedding_cache import embed_with_cache
from .catalog_changes import catalog_difference, dedupe_catalog, served, updated_catalog
from .snapshot import Snapshot
from .tool_index import served_index
from .workers import EngineClosing, WorkerCalls

if TYPE_CHECKING:
    from ..providers import Embedder, Generator


@attrs.frozen(eq=False)
class Update:
    """Change the catalogue (``Engine.update``); the reply is ``None`` once the new snapshot is
    served, or the exception that stopped the change (a caller's mistake among them).

    ``catalog`` (``Engine.replace_catalog``) is a whole new catalogue: the difference to the
    catalogue served when the build starts (not when the caller sent it, so two replacements
    never undo each other) takes the place of ``add``/``remove``/``replace``.

    ``scope`` is the caller's: it cancels it when it gives up, which stops the build."""

    add: tuple[Tool, ...]
    remove: tuple[str, ...]
    replace: tuple[Tool, ...]
    scope: trio.CancelScope
    reply: trio.MemorySendChannel[Exception | None]
    catalog: Catalog | None = None


@attrs.frozen(eq=False)
class Built:
    """From the update child: the snapshot ``update`` makes (``None`` if it failed with
    ``error``, its caller gave up, or it changes nothing); ``applied`` is the change as made
    (a whole-catalogue update's difference)."""

    update: Update
    snapshot: Snapshot | None
    error: Exception | None
    applied: Update | None = None


@attrs.frozen(eq=False)
class Install:
    """From warm-up: serve ``index`` if ``base`` is still the index served; the reply says
    whether it was installed."""

    base: RecallIndex
    index: RecallIndex
    reply: trio.MemorySendChannel[bool]


KeeperMessage = Update | Built | Install


class CatalogKeeper:
    """Owner of the engine's ``Snapshot``; ``run`` is the (supervised) actor that changes it.

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
        self._inbox: trio.MemorySendChannel[KeeperMessage] | None = None
        self._version = 0
        if not self.needs_warm_up:
            self._ready.set()

    @property
    def needs_warm_up(self) -> bool:
        enrich = self._config.enrichment.enabled and self._generator is not None
        return self._embedder is not None or enrich

    @property
    def version(self) -> int:
        """The served snapshot's version: 0 at start, one more per applied update."""
        return self._version

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set()

    async def ready(self) -> None:
        """Wait until warm-up has finished (or failed, leaving the engine keyword-only)."""
        await self._ready.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The keeper's actor: warm up (once), and apply updates one at a time, in arrival
        order. Each (re)start opens a fresh inbox; warm-up starts again unless it finished."""
        send, receive = trio.open_memory_channel[KeeperMessage](0)
        waiting: deque[Update] = deque()
        building: Update | None = None  # the update a child is building, if any
        try:
            async with trio.open_nursery() as nursery, receive:
                self._inbox = send
                if not self._ready.is_set():
                    nursery.start_soon(self._warm_up, send.clone())
                task_status.started()
                async for message in receive:
                    match message:
                        case Update():
                            waiting.append(message)
                        case Built():
                            self._finish(message)
                            building = None  # after: if finishing fails, its caller is told
                        case Install():
                            installed = self.snapshot.index is message.base
                            if installed:
                                self.snapshot = self.snapshot.with_index(
                                    message.index, self._tool_sets
                                )
                            # Suppressed: warm-up was cancelled meanwhile.
                            with message.reply, contextlib.suppress(trio.BrokenResourceError):
                                message.reply.send_nowait(installed)
                    while building is None and waiting:
                        update = waiting.popleft()
                        if _caller_waits(update.reply):
                            building = update
                            nursery.start_soon(self._build, update, self.snapshot, send.clone())
                        else:
                            update.reply.close()
        finally:
            send.close()  # callers arriving from now on learn the keeper is down
            # Crashed or shut down: the callers of unfinished updates learn it, none hangs.
            for update in (*waiting, *([building] if building is not None else [])):
                update.reply.close()

    async def update(
        self, *, add: Sequence[Tool] = (), remove: Sequence[str] = (), replace: Sequence[Tool] = ()
    ) -> None:
        """Change the catalogue (see ``Engine.update``): sent to the keeper, which applies
        updates one at a time, in arrival order.

        Raises:
            trio.BrokenResourceError: the keeper is not running (the engine closed, or the
                keeper is restarting); the update was not applied.
        """
        await self._send_update(tuple(add), tuple(remove), tuple(replace), None)

    async def replace_catalog(self, catalog: Catalog) -> None:
        """Serve ``catalog`` (see ``Engine.replace_catalog``): the keeper applies its
        difference to the catalogue it serves, in arrival order with ``update``.

        Raises:
            trio.BrokenResourceError: as ``update``.
        """
        await self._send_update((), (), (), catalog)

    async def _send_update(
        self,
        add: tuple[Tool, ...],
        remove: tuple[str, ...],
        replace: tuple[Tool, ...],
        catalog: Catalog | None,
    ) -> None:
        if self._inbox is None:
            raise trio.BrokenResourceError("the catalogue keeper is not running")
        reply, answer = trio.open_memory_channel[Exception | None](1)
        message = Update(add, remove, replace, trio.CancelScope(), reply, catalog)
        with answer:
            try:
                await self._inbox.send(message)
                error = await answer.receive()
            except (trio.ClosedResourceError, trio.BrokenResourceError, trio.EndOfChannel):
                raise trio.BrokenResourceError(
                    "the catalogue keeper stopped; the update was not applied"
                ) from None
            finally:
                message.scope.cancel("the caller gave up")  # a no-op once the build is over
        if error is not None:
            raise error

    def _finish(self, built: Built) -> None:
        """Serve what an update built, unless its caller gave up first; answer the caller."""
        update = built.update
        applied = built.applied or update
        with update.reply:
            if built.snapshot is not None and _caller_waits(update.reply):
                self.snapshot = built.snapshot
                self._version += 1
                self._publish(
                    CatalogUpdated(
                        added=tuple(t.id for t in applied.add),
                        removed=applied.remove,
                        replaced=tuple(t.id for t in applied.replace),
                        version=self._version,
                    )
                )
                update.reply.send_nowait(None)
            elif built.error is not None:
                with contextlib.suppress(trio.BrokenResourceError):  # the caller gave up
                    update.reply.send_nowait(built.error)
            elif built.applied is not None:  # a replacement that changes nothing: done
                with contextlib.suppress(trio.BrokenResourceError):
                    update.reply.send_nowait(None)

    async def _build(
        self, update: Update, old: Snapshot, back: trio.MemorySendChannel[KeeperMessage]
    ) -> None:
        """The update child: the snapshot ``update`` makes of ``old``, reported back."""
        snapshot: Snapshot | None = None
        error: Exception | None = None
        applied: Update | None = None
        with back:
            with update.scope:
                try:
                    if update.catalog is None:
                        catalog = updated_catalog(
                            old.source, add=update.add, remove=update.remove, replace=update.replace
                        )
                        snapshot = await self._updated(old, update, catalog)
                    else:
                        applied, catalog = _difference(update, old.source, update.catalog)
                        if not _unchanged(applied, old.source, catalog):
                            snapshot = await self._updated(old, applied, catalog)
                except Exception as exc:  # the caller's to see (a mistake of theirs, mostly)
                    error = exc
            await back.send(Built(update, snapshot, error, applied))

    async def _updated(self, old: Snapshot, update: Update, catalog: Catalog) -> Snapshot:
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
        changed = {t.id for t in (*update.add, *update.replace)}
        extra = {i: t for i, t in old.index.extra_text.items() if i not in changed}
        new = await self._workers.run(
            functools.partial(served_index, extra_text=extra),
            served(dedup),
            limiter=self._cpu,
        )
        if self._embedder is not None:
            # During warm-up this embeds the whole catalogue (the store absorbs the
            # repeat); warm-up's result is then stale and is not installed.
            new = await self._with_vectors(new, old.index, self._embedder)
        return Snapshot.build(catalog, dedup, new, self._tool_sets)

    async def _warm_up(self, back: trio.MemorySendChannel[KeeperMessage]) -> None:
        """The warm-up child: enrich, then embed the catalogue, then report ready."""
        with back:
            await self._enrich(back)
            if self._embedder is not None:
                await self._embed(self._embedder, back)
        self._ready.set()

    @staticmethod
    async def _install(
        back: trio.MemorySendChannel[KeeperMessage], base: RecallIndex, index: RecallIndex
    ) -> bool:
        reply, answer = trio.open_memory_channel[bool](1)
        with answer:
            await back.send(Install(base, index, reply))
            return await answer.receive()

    async def _with_vectors(
        self, new: RecallIndex, old: RecallIndex, embedder: Embedder
    ) -> RecallIndex:
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
            return await self._indexed(new, rows)
        except Exception as exc:  # the new catalogue is served keyword-only
            reason = brief(exc)
            self._publish(FailOpen(operation="update", what_failed="embedder", reason=reason))
            return new.without_vectors(f"embedder failed while indexing: {reason}")

    async def _indexed(self, index: RecallIndex, vectors: npt.NDArray[np.float32]) -> RecallIndex:
        """``index.with_vectors``; for a large catalogue in a worker thread: quantising it and
        loading the int8 kernel take a fraction of a second, not for the event loop."""
        if len(index.catalog) < INT8_FROM:
            return index.with_vectors(vectors)
        return await self._workers.run(index.with_vectors, vectors, limiter=self._cpu)

    async def _enrich(self, back: trio.MemorySendChannel[KeeperMessage]) -> None:
        """Add the generator's phrasings to the recall text (``config.enrichment``); tools
        whose batch failed keep their original text."""
        settings = self._config.enrichment
        if not settings.enabled or self._generator is None:
            return
        base = self.snapshot.index
        catalog = base.catalog
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
        if not result.texts or self.snapshot.index is not base:
            return  # nothing to add, or an update replaced the catalogue meanwhile
        index = await self._workers.run(
            functools.partial(served_index, extra_text=result.texts),
            catalog,
            limiter=self._cpu,
        )
        await self._install(back, base, index)

    async def _embed(self, embedder: Embedder, back: trio.MemorySendChannel[KeeperMessage]) -> None:
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
            index = await self._indexed(first, vectors)
            degraded, reason = False, ""
        except Exception as exc:  # warm-up failure leaves the engine keyword-only
            degraded, reason = True, brief(exc)
            index = first.without_vectors(f"embedder failed while indexing: {reason}")
            self._publish(FailOpen(operation="warmup", what_failed="embedder", reason=reason))
        # Success or failure alike, only over the index warm-up started from: an update made
        # meanwhile brought its own vectors, which neither may overwrite.
        await self._install(back, first, index)
        # What was embedded before a failure is not served: none has an embedding now.
        embedded = counts[0] if counts and not degraded else 0
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


def _difference(update: Update, old: Catalog, new: Catalog) -> tuple[Update, Catalog]:
    """A whole-catalogue update as the change it makes to ``old`` (and the catalogue served)."""
    added, removed, replaced = catalog_difference(old, new)
    return attrs.evolve(update, add=added, remove=removed, replace=replaced), new


def _unchanged(applied: Update, old: Catalog, new: Catalog) -> bool:
    """Whether serving ``new`` over ``old`` changes nothing a reader could see: no tool
    changed, tools in the same order, servers described alike."""
    nothing = not (applied.add or applied.remove or applied.replace)
    return nothing and old.ids == new.ids and old.servers == new.servers


def _caller_waits(reply: trio.MemorySendChannel[Exception | None]) -> bool:
    """Whether the caller still waits for the reply (it closes its end when it gives up)."""
    return reply.statistics().open_receive_channels > 0


def _embed_index(
    embedder: Embedder,
    index: RecallIndex,
    cache: EmbeddingStore | None,
    progress: Callable[[int, int], None],
    batch: int,
) -> npt.NDArray[np.float32]:
    """``index``'s tool vectors; in the worker thread, texts included (building the texts
    of a large catalogue takes a noticeable slice of a second: not on the event loop)."""
    return embed_with_cache(embedder, index.embedding_texts(), cache, progress, batch)
