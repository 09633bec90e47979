"""The trio runtime: ``open_engine`` and the ``Engine`` facade.

The engine is a handful of services in one nursery (see DESIGN "trio runtime"): the
catalogue keeper owns the snapshot every request reads (and warms it up, supervised), recall
embeds requests through the query batcher (supervised), and selection, steps, the decision
service and the server router answer the calls. ``Engine`` only forwards to them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from .._core.catalog import Catalog, Server, Tool
from .._core.config import EngineConfig
from .._core.decision import DecisionRequest, DecisionResult
from .._core.dedup import DedupResult
from .._core.errors import ConfigError, EngineCrashed
from .._core.events import FailOpen, new_query_key
from .._core.index import Strategy, ToolIndex
from .._core.policy import Policy
from .._core.selection import Selection
from .._core.stores import Stores
from .._core.toolsets import ToolSet
from .._routing.pipeline import RoutingOutcome
from .._stores.local import EngineStores, local_stores
from .catalog_changes import checked_sets, dedupe_catalog, served
from .catalog_keeper import CatalogKeeper
from .decision_service import DecisionService
from .hub import Delivery, EventHub
from .recall import Recall
from .selector import FROM_CONFIG, FromConfig, SelectOptions, Selector
from .server_router import ServerRouter
from .snapshot import Snapshot
from .steps import Messages, Steps, StepSelection
from .supervisor import run_supervised
from .workers import SHUTDOWN_GRACE_S, RunCpu, WorkerCalls, run_in_thread

if TYPE_CHECKING:
    from ..providers import Decider, Embedder, Generator

__all__ = ["FROM_CONFIG", "Engine", "FromConfig", "StepSelection", "open_engine"]

_DEFAULT: Any = object()


class Engine:
    """Handle on a running engine; obtain one from ``open_engine``.

    Every operation forwards to the service that owns it; reads take the catalogue keeper's
    current snapshot, so they never wait for warm-up or an update.
    """

    def __init__(
        self,
        *,
        config: EngineConfig,
        tool_sets: tuple[ToolSet, ...],
        hub: EventHub,
        keeper: CatalogKeeper,
        recall: Recall,
        selector: Selector,
        steps: Steps,
        decisions: DecisionService,
        router: ServerRouter,
    ) -> None:
        self.config = config
        self._tool_sets = tool_sets
        self._hub = hub
        self._keeper = keeper
        self._recall = recall
        self._selector = selector
        self._steps = steps
        self._decisions = decisions
        self._router = router

    @property
    def catalog(self) -> Catalog:
        """The current catalogue as given (it changes with ``update``), tools dedup removed
        included: look a provider up here. ``index.catalog`` holds the tools served."""
        return self._keeper.snapshot.source

    @property
    def index(self) -> ToolIndex:
        """The current snapshot's index: keyword-only until warm-up finishes."""
        return self._keeper.snapshot.index

    @property
    def dedup(self) -> DedupResult:
        """What the last dedup pass kept and removed (nothing removed when it is off)."""
        return self._keeper.snapshot.dedup

    @property
    def tool_sets(self) -> tuple[ToolSet, ...]:
        """The tool sets passed to ``open_engine``."""
        return self._tool_sets

    @property
    def decider(self) -> Decider | None:
        """The decision provider ``decide``, ``try_decide`` and ``route_servers`` use."""
        return self._decisions.decider

    def providers_of(self, tool_id: str) -> tuple[str, ...]:
        """The tools ``tool_id`` stands for: its representative first, then the duplicates dedup
        folded into it, so a host can call it on the server it prefers (``catalog[id].server``).

        A tool without duplicates stands for itself; a removed id answers for its
        representative.

        Raises:
            ConfigError: ``tool_id`` is not in the catalogue.
        """
        return self._keeper.snapshot.providers_of(tool_id)

    def release_sets(self, session: str, names: Iterable[str]) -> None:
        """Stop forcing the tool sets ``names`` on ``session``'s steps (forced or sticky).

        Raises:
            ConfigError: a name is not one of the engine's tool sets.
        """
        self._steps.release_sets(session, names)

    async def ready(self) -> None:
        """Wait until tool embeddings are loaded (or warm-up failed and the engine stays
        keyword-only; ``index.degraded_reason`` then says why).

        Returns:
            Nothing; the engine serves from the warmed-up snapshot from then on.

        **Cancellation:** the caller's cancel scope cancels the wait, not the warm-up.

        **Fail-open:** a failed warm-up still ends the wait; requests are then served
        keyword-only (``degraded``).
        """
        await self._keeper.ready()

    def subscribe(
        self, buffer: int | None = None
    ) -> AbstractAsyncContextManager[trio.MemoryReceiveChannel[Delivery]]:
        """Receive the engine's events, as ``Delivery(event, dropped)`` items.

        Args:
            buffer: events this subscriber may fall behind by before it loses them
                (counted in the next delivery's ``dropped``); ``config.events.buffer`` when
                not given.

        Returns:
            An async context manager yielding an async iterator of deliveries; it ends after
            the engine closes. Leaving the block unsubscribes.

        Raises:
            ConfigError: ``buffer`` is not an integer of at least 1.
        """
        return self._hub.subscribe(buffer=buffer or self.config.events.buffer)

    async def select(
        self,
        query: str,
        *,
        strategy: Strategy | None = None,
        max_tools: int | None = None,
        threshold: float | FromConfig | None = FROM_CONFIG,
        adaptive: bool | None = None,
        always_active: Sequence[str] | None = None,
        related: Mapping[str, Sequence[str]] | None = None,
        max_related: int = 5,
        tool_sets: Sequence[ToolSet] | None = None,
        forced_sets: Sequence[str] = (),
        policy: Policy | None = None,
    ) -> Selection:
        """The tools to show the model for ``query``.

        Args:
            query: the user's request (or the text extracted from a conversation).
            strategy: ``keyword``, ``semantic`` or ``combined``; ``combined`` with an
                embedder, ``keyword`` without.
            max_tools, threshold, adaptive, always_active: as ``Policy``; the config's
                ``selection`` defaults when not given (``threshold=None`` means none).
            related, max_related, forced_sets: as ``Policy``.
            tool_sets: as ``Policy``; the engine's tool sets when not given.
            policy: a prepared ``Policy``; when given, the policy arguments are ignored.

        Returns:
            A ``Selection``. ``degraded`` when embeddings are not ready, the request's
            embedding failed, or it missed ``deadlines.embed_s`` (recall is keyword-only);
            ``skipped`` for an empty query.

        Raises:
            ConfigError: an option is out of range or names a tool not in the catalogue.

        **Cancellation:** the caller's cancel scope cancels the call; an abandoned embedding
        finishes in its worker thread and its result is dropped.

        **Fail-open:** a late or failed embedding or re-rank never raises: recall falls back
        to keywords (``degraded``, with the reason, and a ``fail_open`` event).
        """
        options = SelectOptions(
            max_tools=max_tools,
            threshold=threshold,
            adaptive=adaptive,
            always_active=always_active,
            related=related,
            max_related=max_related,
            tool_sets=tool_sets,
            forced_sets=forced_sets,
        )
        return await self._selector.select(query, strategy, policy, options)

    async def prepare_step(
        self,
        messages: Messages,
        *,
        session: str | None = None,
        force_sets: Iterable[str] = (),
        release_sets: Iterable[str] = (),
    ) -> StepSelection:
        """The tools to show on the next step of an agent loop.

        The request is extracted from the conversation. After one step in which the model
        called no tool the next page of ranked tools is shown; after two, every tool (at
        most ``selection.all_tools_ceiling``, best first). A step with a tool call starts
        again from the first page. Steps of one session run one at a time, in arrival order.

        Tool sets (``open_engine(tool_sets=...)``) add their members when an anchor scores at
        its floor, and then stay forced on the session's next ``sessions.sticky_steps`` steps.

        Args:
            messages: the conversation, as the agent passes it around.
            session: the conversation's id; paging, sticky sets and tools found by
                ``search_tools`` need one.
            force_sets: names of tool sets forced from this step on, until released (without
                a session: on this step only).
            release_sets: names of tool sets no longer forced nor sticky (applied before
                ``force_sets``).

        Returns:
            A ``StepSelection`` (``tool_ids=None`` means every tool).

        Raises:
            ConfigError: a set name is not one of the engine's tool sets, or the messages
                are malformed.

        **Cancellation:** the caller's cancel scope cancels the step; a cancelled step
        leaves the session as the steps before it left it, but for what it had applied.

        **Fail-open:** as ``select``: recall degrades to keywords; failed routing keeps
        every server.
        """
        return await self._steps.prepare_step(messages, session, force_sets, release_sets)

    async def update(
        self, *, add: Sequence[Tool] = (), remove: Sequence[str] = (), replace: Sequence[Tool] = ()
    ) -> None:
        """Change the catalogue: ``remove`` ids, ``replace`` tools by id, ``add`` new tools.

        Only tools whose embedding text changed are embedded again (the rest keep their
        vectors); readers see the old snapshot or the new one, never a mix. Updates apply
        one at a time.

        Args:
            add: tools to append.
            remove: ids to drop.
            replace: tools that replace the tools of the same ids.

        Raises:
            ConfigError: ``remove`` or ``replace`` names an id the catalogue does not have.
            CatalogError: the result would have duplicate ids.

        **Cancellation:** the caller's cancel scope cancels the update before the new
        snapshot is swapped in; the old one stays served.

        **Fail-open:** if embedding fails the new catalogue is served keyword-only
        (``degraded``) and a ``fail_open`` event says why; if dedup fails every tool is
        served.
        """
        await self._keeper.update(add=add, remove=remove, replace=replace)

    async def decide(
        self, request: DecisionRequest, *, provider: Decider | None = None
    ) -> DecisionResult:
        """``toolroute.decide`` under the provider's shared concurrency limit.

        Args:
            request: the questions and the shared state.
            provider: a decider; the engine's by default.

        Returns:
            The provider's answers.

        Raises:
            DecisionError: as ``toolroute.decide``; also when the engine has no provider.

        **Cancellation:** the caller's cancel scope cancels the request.

        **Fail-open:** none: ``decide`` is the raising form; use ``try_decide`` to fail open.
        """
        return await self._decisions.decide(request, provider)

    async def try_decide(
        self,
        request: DecisionRequest,
        *,
        provider: Decider | None = None,
        deadline_s: float | None = None,
    ) -> DecisionResult | None:
        """``toolroute.try_decide`` with the engine's provider, its batches sharing the
        provider's concurrency limit with every other caller; publishes ``decision.finished``.

        Args:
            request: the questions and the shared state.
            provider: a decider; the engine's by default.
            deadline_s: seconds for the whole call; none by default.

        Returns:
            The merged answers, or ``None``: carry on as before.

        **Cancellation:** the caller's cancel scope cancels every batch.

        **Fail-open:** ``None`` when there is no provider, every batch failed, or the
        deadline passed; a failed batch costs only its own answers.
        """
        return await self._decisions.try_decide(request, provider, deadline_s)

    async def route_servers(
        self,
        query: str | Sequence[Mapping[str, Any]],
        *,
        session: str | None = None,
        servers: Sequence[Server] | Catalog | None = None,
    ) -> RoutingOutcome:
        """Which MCP servers the request needs (``toolroute.route_servers``) with the
        engine's decider, generator and embedder, ``config.routing``, the session's routing
        cache and sticky servers (``config.routing_session``); publishes
        ``routing.finished`` (and ``fail_open`` when no judgement could be made).

        Args:
            query: the request, or the conversation as OpenAI- or Anthropic-style messages.
            session: the conversation's id; the cache and stickiness need one.
            servers: the servers to route among; the served catalogue's servers by default.

        Returns:
            A ``RoutingOutcome``.

        **Cancellation:** the caller's cancel scope cancels the routing.

        **Fail-open:** never raises for a provider failure: a failure, a late answer or
        the routing deadline keeps every server (``failed_open``).
        """
        candidates = servers if servers is not None else self._keeper.snapshot.index.catalog
        return await self._router.route_servers(query, candidates, session)

    async def search_tools(
        self, arguments: object, *, session: str | None = None, k: int = 5
    ) -> dict[str, Any]:
        """Handle a ``search_tools`` call (see ``search_tools_definition``).

        Args:
            arguments: the call's arguments, ``{"query": ...}`` or its JSON text.
            session: the conversation; the tools found are shown on its next step.
            k: how many tools to return.

        Returns:
            ``{"tools": [{"name", "description", "relevance"}], "hint"}``, ready to send back
            to the model as the tool's output.

        Raises:
            ConfigError: the arguments are not a query.

        **Cancellation:** the caller's cancel scope cancels the search.

        **Fail-open:** as ``select``: recall degrades to keywords.
        """
        return await self._steps.search_tools(arguments, session, k)


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
        ConfigError: a tool set is malformed or names a tool not in ``catalog``,
            ``embedding`` dedup is asked of a keyword-only engine, or the environment
            configures a decision provider badly (an http base URL off loopback, say).
        EngineCrashed: a service of the engine failed past its restart budget, or failed
            in a way it cannot recover from (``__cause__`` holds the group of failures).
        Exception: an exception raised in the block comes out as itself, not wrapped in a
            group: the engine's tasks are a detail of the engine, not of the caller's code.

    **Cancellation:** the caller's cancel scope cancels the block like any other.

    **Resource handling:** leaving the block cancels every service, closes every
    subscription, waits (at most ``SHUTDOWN_GRACE_S`` seconds) for model calls still running
    in worker threads so that none outlives the block, and closes the connections of a
    decider the engine made itself.
    """
    config = config or EngineConfig()
    tool_sets = checked_sets(tool_sets, catalog)
    if config.dedup.enabled and config.dedup.mode == "embedding" and embedder is None:
        raise ConfigError('dedup mode "embedding" needs an embedder; this engine has none')
    if embedder is _DEFAULT:
        from ..providers import default_embedder

        embedder = await trio.to_thread.run_sync(default_embedder)
    owned_decider = decider is _DEFAULT
    if owned_decider:
        from ..providers import default_decider

        decider = default_decider()
    hub = EventHub()
    workers = WorkerCalls(run_cpu)
    chosen = local_stores(config, stores)
    body_error: BaseException | None = None
    try:
        dedup, failure = await dedupe_catalog(
            catalog, config, embedder, chosen.embeddings, workers.run, trio.CapacityLimiter(1)
        )
        if failure:
            hub.publish(FailOpen(operation="open_engine", what_failed="dedup", reason=failure))
        async with trio.open_nursery() as nursery:
            engine = _assemble(
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
            if engine._recall.batcher is not None:
                await nursery.start(
                    run_supervised,
                    "query batcher",
                    engine._recall.batcher.run,
                    config.restarts,
                    hub.publish,
                )
            await nursery.start(
                run_supervised, "warm-up", engine._keeper.run, config.restarts, hub.publish
            )
            if config.warmup.wait:
                await engine.ready()
            try:
                yield engine
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                nursery.cancel_scope.cancel("engine shutdown")
                if engine._recall.batcher is not None:
                    engine._recall.batcher.close()
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
) -> Engine:
    """The engine's services, wired to each other (nothing runs yet)."""
    cpu = trio.CapacityLimiter(2)
    key = new_query_key()  # queries appear in events only as an HMAC
    first = Snapshot.build(
        catalog, dedup, ToolIndex(served(dedup), embedder=None, cache=None), tool_sets
    )
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
    recall = Recall(
        embedder,
        embed_deadline_s=config.deadlines.embed_s,
        workers=workers,
        cpu=cpu,
        publish=hub.publish,
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
    )
    selector = Selector(
        keeper, recall, config=config, generator=generator, publish=hub.publish, key=key
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
    )
    return Engine(
        config=config,
        tool_sets=tool_sets,
        hub=hub,
        keeper=keeper,
        recall=recall,
        selector=selector,
        steps=steps,
        decisions=decisions,
        router=router,
    )


def _from_group(
    group: BaseExceptionGroup[BaseException], body_error: BaseException | None
) -> BaseException:
    """What ``open_engine`` raises for its nursery's ``group`` (an ``EngineCrashed`` is
    raised from the group).

    The caller's own exception, alone, is raised as itself. Anything an engine service
    raised is an ``EngineCrashed`` from the whole group (the caller's exception, if any, is
    in it). A group holding a ``BaseException`` that is neither (``KeyboardInterrupt``, say)
    is raised as it is: it is never unwrapped.
    """
    if body_error is not None and group.exceptions == (body_error,):
        return body_error
    internal = group.split(lambda exc: exc is body_error)[1]
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
