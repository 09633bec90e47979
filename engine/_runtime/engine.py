"""The trio runtime's entry point: ``open_engine`` starts the engine's services in one
nursery and hands out the ``Engine`` facade.

The catalogue keeper, the query batcher, the step actor, the decision actor and the fast tier
(its build and fits) run supervised (restarted on a crash, within ``config.restarts``); the
other services answer calls in the caller's task.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from .._core.catalog.catalog import Catalog
from .._core.catalog.dedup import DedupResult
from .._core.config import EngineConfig
from .._core.errors import ConfigError, EngineCrashed, holds_only, leaves
from .._core.events import FailOpen, new_query_key
from .._core.protocols import (
    BuildsFastTier,
    Decider,
    Embedder,
    FastTierModel,
    Generator,
    check_provider,
)
from .._core.recall.index import RecallIndex
from .._core.select.arguments import served_catalog
from .._core.select.toolsets import ToolSet
from .._core.stores import FastTierStore, ReportsEvents, Stores
from .._decisions.hosts import require_trio
from .._stores.local import EngineStores, cache_directory, local_stores
from .bundled_model import bundled_or_unavailable
from .catalog_changes import checked_sets, dedupe_catalog, served
from .catalog_keeper import CatalogKeeper
from .decision_service import DecisionService
from .facade import Engine
from .fast_tier_service import FastTierService
from .hub import EventHub
from .learning import Learning
from .recall import Recall
from .selector import FROM_CONFIG, FromConfig, Selector
from .server_router import ServerRouter
from .shared_fast_tier import open_shared_fast_tier
from .snapshot import Snapshot
from .steps import Steps, StepSelection
from .supervisor import run_supervised
from .tool_index import served_index
from .workers import SHUTDOWN_GRACE_S, RunCpu, WorkerCalls, run_in_thread

__all__ = ["FROM_CONFIG", "Engine", "FromConfig", "StepSelection", "open_engine"]

_DEFAULT: Any = object()


@asynccontextmanager
async def open_engine(
    catalog: Catalog,
    *,
    config: EngineConfig | None = None,
    embedder: Embedder | None = _DEFAULT,
    run_cpu: RunCpu = run_in_thread,
    tool_sets: Sequence[ToolSet] = (),
    decider: Decider | None = _DEFAULT,
    generator: Generator | None = None,
    stores: Stores | None = None,
) -> AsyncIterator[Engine]:
    """Run an engine over ``catalog`` for the duration of the block.

    Args:
        catalog: the tools to serve.
        config: an ``EngineConfig``; defaults everywhere otherwise.
        embedder: any ``Embedder``; by default the offline MiniLM model; ``None`` for a
            keyword-only engine.
        run_cpu: how CPU work runs (``await run_cpu(fn, *args, limiter=...)``); a worker
            thread by default. Tests under a mock clock pass an inline version.
        tool_sets: ``ToolSet``s used by ``select`` and ``prepare_step`` (see ``prepare_step``
            for forced and sticky sets).
        decider: the decision provider for ``decide``, ``try_decide`` and ``route_servers``;
            by default ``toolroute.providers.default_decider()`` (the environment's, or
            none: a plain ``OPENAI_API_KEY`` never selects one); ``None`` for none.
        generator: the chat model for the generative routing fallback, re-ranking and
            enrichment; none by default.
        stores: where the engine keeps embeddings, enrichment phrases, sessions and the
            routing cache; each store left out is the local one (disk files under
            ``config.cache_dir``, in-memory maps).

    Yields:
        The ``Engine``.

    By default the block starts at once and requests are served keyword-only (``degraded``)
    until embeddings are ready; ``config.warmup.wait`` makes the start wait instead. With
    ``config.dedup.enabled`` near-duplicate tools are dropped before indexing (in
    ``embedding`` mode the catalogue is embedded before the block starts); if dedup fails,
    every tool is served.

    Raises:
        ConfigError: ``catalog`` is not a ``Catalog`` or holds no tools, ``config`` is not an
            ``EngineConfig``, ``embedder``, ``decider`` or ``generator`` is not an
            ``Embedder``, ``Decider`` or ``Generator`` (a provider's name, say), a tool set
            is malformed or names a tool not in ``catalog``, ``embedding`` dedup is asked of a keyword-only engine, or the environment
            configures a decision provider badly (an http base URL off loopback, say, or
            ``TOOLROUTE_DECISION_PROVIDER`` naming one whose variables are not set).
        RuntimeError: called outside trio (under asyncio, use ``toolroute.asyncio``).
        EngineCrashed: a service of the engine failed past its restart budget, or failed
            in a way it cannot recover from (``__cause__`` holds the group of failures).
        Exception: an exception raised in the block comes out as itself, not wrapped in a
            group: the engine's tasks are a detail of the engine, not of the caller's code.

    **Cancellation:** the caller's cancel scope cancels the block like any other.

    **Fail-open:** if dedup fails every tool is served; if warm-up fails the engine serves
    keyword-only (``degraded``, with a ``fail_open`` event); neither raises.

    **Resource handling:** leaving the block cancels every service, closes every
    subscription, waits (at most ``SHUTDOWN_GRACE_S`` seconds) for model calls still running
    in worker threads so that none outlives the block, and closes the connections of a
    decider the engine made itself.
    """
    require_trio("toolroute.open_engine", "toolroute.asyncio.open_engine")
    catalog = served_catalog(catalog)
    if config is None:
        config = EngineConfig()
    elif not isinstance(config, EngineConfig):
        raise ConfigError(f"config must be an EngineConfig or None, got {type(config).__name__}")
    for argument, value, protocol in (
        ("embedder", embedder, Embedder),
        ("decider", decider, Decider),
        ("generator", generator, Generator),
    ):
        if value is not _DEFAULT:
            check_provider(value, argument, protocol)
    tool_sets = checked_sets(tool_sets, catalog)
    if config.dedup.enabled and config.dedup.mode == "embedding" and embedder is None:
        raise ConfigError('dedup mode "embedding" needs an embedder; this engine has none')
    if embedder is _DEFAULT:
        embedder = await trio.to_thread.run_sync(bundled_or_unavailable)
    owned_decider = decider is _DEFAULT
    if owned_decider:
        from ..providers import default_decider

        decider = default_decider()
    hub = EventHub()
    workers = WorkerCalls(run_cpu)
    chosen = local_stores(config, stores)
    # A capability of its own, not a kind of any store protocol.
    given: tuple[object, ...] = (chosen.embeddings, chosen.enrichment, chosen.sessions)
    for store in (*given, chosen.routing):
        if isinstance(store, ReportsEvents):
            store.report_to(hub.publish)  # a shared store's outage shows in the events
    body_error: BaseException | None = None
    try:
        dedup, failure = await dedupe_catalog(
            catalog, config, embedder, chosen.embeddings, workers.run, trio.CapacityLimiter(1)
        )
        if failure:
            hub.publish(FailOpen(operation="open_engine", what_failed="dedup", reason=failure))
        async with trio.open_nursery() as nursery:
            engine, keeper, recall, decisions, steps, learning = _assemble(
                catalog,
                dedup,
                tool_sets,
                config,
                embedder,
                decider,
                generator,
                chosen,
                hub,
                workers,
            )
            await nursery.start(run_supervised, "event hub", hub.run, config.restarts, hub.publish)
            # First: the warm-up stays the last service started before the block runs.
            await nursery.start(
                run_supervised, "decision actor", decisions.actor.run, config.restarts, hub.publish
            )
            batcher = recall.batcher
            if batcher is not None:
                await nursery.start(
                    run_supervised, "query batcher", batcher.run, config.restarts, hub.publish
                )
            await nursery.start(
                run_supervised, "catalogue keeper", keeper.run, config.restarts, hub.publish
            )
            await nursery.start(run_supervised, "steps", steps.run, config.restarts, hub.publish)
            if learning is not None:
                await nursery.start(
                    run_supervised, "learning", learning.run, config.restarts, hub.publish
                )
            if recall.fast_tier is not None:
                # Background: built once warm-up is done; recall uses it when it is ready.
                fast_tier = functools.partial(
                    recall.fast_tier.run, lambda: keeper.snapshot.index, keeper.ready
                )
                await nursery.start(
                    run_supervised, "fast tier", fast_tier, config.restarts, hub.publish
                )
            if config.warmup.wait:
                await engine.ready()
            try:
                yield engine
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                engine._close()  # later calls say so instead of answering from a dead engine
                nursery.cancel_scope.cancel("engine shutdown")
                if batcher is not None:
                    batcher.close()
                hub.close()
    except BaseExceptionGroup as group:
        error = _from_group(group, body_error)
        if error is group:
            raise
        if error is body_error:
            raise body_error from None  # the caller's own error, as itself
        raise error from group
    finally:
        # Every task of the engine has ended; model calls they abandoned may still run in
        # worker threads. Wait for them (bounded), so none outlives the block.
        await workers.aclose()
        if owned_decider and decider is not None:
            with trio.move_on_after(SHUTDOWN_GRACE_S, shield=True):
                await decider.aclose()  # type: ignore[attr-defined]


def _assemble(
    catalog: Catalog,
    dedup: DedupResult,
    tool_sets: tuple[ToolSet, ...],
    config: EngineConfig,
    embedder: Embedder | None,
    decider: Decider | None,
    generator: Generator | None,
    stores: EngineStores,
    hub: EventHub,
    workers: WorkerCalls,
) -> tuple[Engine, CatalogKeeper, Recall, DecisionService, Steps, Learning | None]:
    """The engine's services wired to each other (nothing runs yet): the facade, and the
    services ``open_engine`` runs supervised."""
    cpu = trio.CapacityLimiter(2)
    key = new_query_key()  # queries appear in events only as an HMAC
    first = Snapshot.build(catalog, dedup, served_index(served(dedup)), tool_sets)
    keeper = CatalogKeeper(
        first,
        config=config,
        tool_sets=tool_sets,
        embedder=embedder,
        generator=generator,
        embeddings=stores.embeddings,
        enrichment=stores.enrichment,
        workers=workers,
        cpu=cpu,
        publish=hub.publish,
    )
    learning = None
    if embedder is not None:  # evidence is request vectors: a keyword-only engine has none
        learning = Learning(
            stores.learning,
            embedder,
            config=config,
            workers=workers,
            cpu=cpu,
            snapshot=lambda: keeper.snapshot,
            publish=hub.publish,
        )
    recall = Recall(
        embedder,
        embed_deadline_s=config.deadlines.embed_s,
        workers=workers,
        cpu=cpu,
        publish=hub.publish,
        query_cache=config.load.query_cache,
        fast_tier=_fast_tier_service(embedder, config, workers, hub, stores.fast_tier),
        budget_s=config.load.budget_s,
        learned=learning.applied if learning is not None else None,
        cascade=config.load.cascade,
        correct_spelling=config.correct_spelling,
    )
    decisions = DecisionService(decider, config.decision.concurrency, hub.publish)
    router = ServerRouter(
        config,
        decisions,
        generator,
        lambda: embedder,
        hub.publish,
        key,
        sessions=stores.sessions,
        cache=stores.routing,
        similar_uses=learning.similar_uses if learning is not None else None,
    )
    selector = Selector(
        keeper,
        recall,
        config=config,
        generator=generator,
        publish=hub.publish,
        key=key,
        decisions=decisions,
    )
    steps = Steps(
        keeper,
        recall,
        router,
        stores.sessions,
        config=config,
        tool_sets=tool_sets,
        publish=hub.publish,
        key=key,
        record=learning.offer if learning is not None and config.learning.record_calls else None,
        decisions=decisions,
    )
    engine = Engine._create(
        config=config,
        tool_sets=tool_sets,
        hub=hub,
        keeper=keeper,
        selector=selector,
        steps=steps,
        decisions=decisions,
        router=router,
        recall=recall,
        learning=learning,
    )
    return engine, keeper, recall, decisions, steps, learning


def _fast_tier_service(
    embedder: Embedder | None,
    config: EngineConfig,
    workers: WorkerCalls,
    hub: EventHub,
    shared: FastTierStore | None = None,
) -> FastTierService | None:
    """The fast tier for ``embedder``, if it can build one (``BuildsFastTier``): kept in the
    cache folder (shared through ``shared`` when given), or in memory with caching off (then
    every start fits the catalogue again: seconds of background CPU, not the model's
    distillation, which ships with the package)."""
    directory = cache_directory(config)
    candidate: object = embedder  # a capability of its own, not a kind of ``Embedder``
    if not config.load.fast_tier or not isinstance(candidate, BuildsFastTier):
        return None
    builder = candidate

    def opener(index: RecallIndex, should_stop: Callable[[], bool]) -> FastTierModel:
        assert index.vectors is not None
        if shared is not None and directory is not None:
            return open_shared_fast_tier(builder, directory, shared, index, should_stop, config)
        return builder.open_fast_tier(
            cache_dir=None if directory is None else str(directory),
            tool_texts=index.embedding_texts(),
            tool_vectors=index.vectors.matrix,
            should_stop=should_stop,
            # Recall answers from the tier only past ``min_served`` served requests: a fit
            # on tool texts alone would never answer one, so it waits for the first refit.
            fit_from=config.load.min_served,
        )

    return FastTierService(opener, config=config.load, workers=workers, publish=hub.publish)


def _from_group(
    group: BaseExceptionGroup[BaseException], body_error: BaseException | None
) -> BaseException:
    """What ``open_engine`` raises for its nursery's ``group`` (an ``EngineCrashed`` is
    raised from the group).

    The caller's own exception, alone, is raised as itself. Anything an engine service
    raised is an ``EngineCrashed`` from the whole group (the caller's exception, if any, is
    in it). A group holding a ``BaseException`` that is neither (``KeyboardInterrupt``, say)
    is raised as it is: it is never unwrapped. A caller's error that is itself a group (from
    a nursery of the caller's) is known by its leaves: trio passes on a copy of it.
    """
    if body_error is not None and holds_only(group, body_error):
        return body_error
    mine = leaves(body_error) if body_error is not None else []
    internal = group.split(lambda exc: exc is body_error or any(exc is m for m in mine))[1]
    if internal is not None and internal.subgroup(
        lambda exc: not isinstance(exc, Exception | BaseExceptionGroup)
    ):
        return group
    crashed = group.subgroup(EngineCrashed)
    if crashed is not None:
        message = str(_first_leaf(crashed))
    else:
        failure = _first_leaf(internal if internal is not None else group)
        message = f"an engine service failed: {type(failure).__name__}: {failure}"
    return EngineCrashed(message)


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
