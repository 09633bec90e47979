"""The trio runtime: ``open_engine`` and the ``Engine`` handle.

The engine serves every request from an immutable snapshot (a ``ToolIndex``) that it swaps
when warm-up finishes, so reads take no lock and make no round trip. It starts keyword-only
at once and embeds the catalogue in a worker thread; each request embeds its text in a worker
thread under a deadline and falls back to keyword-only recall when that is late or fails.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import numpy as np
import numpy.typing as npt
import trio

from .._core.catalog import Catalog, Server, Tool, id_tuple
from .._core.config import EngineConfig
from .._core.conversation import extract_query, idle_steps
from .._core.decision import DecisionRequest, DecisionResult
from .._core.dedup import DedupResult
from .._core.errors import ConfigError, EngineCrashed
from .._core.events import (
    CatalogUpdated,
    FailOpen,
    SelectionFinished,
    StepFinished,
    WarmupFinished,
    WarmupProgress,
    new_query_key,
    query_hash,
)
from .._core.index import Strategy, ToolIndex, brief, embed_with_cache
from .._core.outcome import Outcome
from .._core.policy import COSINE_SCALED, Policy, select
from .._core.search_tool import HINT, read_arguments
from .._core.selection import Ranking, Selection
from .._core.toolsets import ToolSet, activated_sets, system_prompts
from .._judge.enrich import enrich_tools
from .._judge.rerank import RERANK_TOOL_LIMIT, rerank, rerank_pool_size, reranked_ranking
from .._routing.pipeline import RoutingOutcome
from .._stores.embedding_cache import EmbeddingCache
from .._stores.sessions import SessionState, SessionStore
from .catalog_keeper import (
    RunCpu,
    cache_dir,
    checked_sets,
    dedupe_catalog,
    open_cache,
    served,
    updated_catalog,
)
from .decision_service import DecisionService, ServerRouter
from .hub import EventHub
from .recall import QueryBatcher
from .supervisor import run_supervised
from .workers import SHUTDOWN_GRACE_S, EngineClosing, WorkerCalls, run_in_thread

if TYPE_CHECKING:
    from ..providers import Decider, Embedder, Generator

T = TypeVar("T")

_DEFAULT: Any = object()
#: Catalogues at least this large are scored in a worker thread (about 1 ms of numpy work
#: per request at this size; below it the thread hop costs more than it saves).
_SCORE_IN_THREAD_FROM = 20_000


@attrs.frozen
class StepSelection:
    """The tools to show on one agent step.

    Attributes:
        tool_ids: ids in order, or ``None`` to show every tool.
        query: the text extracted from the conversation and routed on.
        page: 0 for the best tools, 1 for the next page after a step without a tool call,
            2 for every tool after two such steps.
        outcome: as ``Selection.outcome``; ``skipped`` when the conversation has no text.
        active_sets: names of the tool sets active on this step (forced, sticky or anchored).
        system_prompts: the active sets' prompts, to append to the host's system prompt.
        routing: the server routing behind this step, when ``selection.route_servers`` is on
            (tools of the servers it dropped are not shown, ``always_active`` ones aside).
    """

    tool_ids: tuple[str, ...] | None
    query: str
    page: int
    outcome: Outcome
    reason: str = ""
    latency_ms: float = 0.0
    active_sets: tuple[str, ...] = ()
    system_prompts: tuple[str, ...] = ()
    routing: RoutingOutcome | None = None


class Engine:
    """Handle on a running engine; obtain one from ``open_engine``."""

    def __init__(
        self,
        catalog: Catalog,
        config: EngineConfig,
        embedder: Embedder | None,
        hub: EventHub,
        workers: WorkerCalls,
        *,
        tool_sets: Sequence[ToolSet] = (),
        dedup: DedupResult | None = None,
        decider: Decider | None = None,
        generator: Generator | None = None,
    ) -> None:
        self.config = config
        self._embedder = embedder
        self._hub = hub
        self._run_cpu = workers.run
        self._closing = lambda: workers.closing
        self._cpu = trio.CapacityLimiter(2)
        self._key = new_query_key()  # queries appear in events only as an HMAC
        self._tool_sets = tuple(tool_sets)  # checked by open_engine
        dedup = dedup or DedupResult(catalog)
        self._serve(catalog, dedup, ToolIndex(served(dedup), embedder=None, cache=None))
        self._ready = trio.Event()
        self._updating = trio.Lock()  # one catalogue change at a time
        self._version = 0
        self._batcher: QueryBatcher | None = None
        self._sessions = SessionStore(
            max_sessions=config.sessions.max_sessions, idle_s=config.sessions.idle_s
        )
        self._generator = generator
        self._decisions = DecisionService(decider, config.decision.concurrency, hub.publish)
        self._router = ServerRouter(
            config, self._decisions, generator, lambda: self._embedder, hub.publish, self._key
        )

    @property
    def catalog(self) -> Catalog:
        """The current catalogue as given (it changes with ``update``), tools dedup removed
        included: look a provider up here. ``index.catalog`` holds the tools served."""
        return self._source

    @property
    def index(self) -> ToolIndex:
        """The current snapshot: keyword-only until warm-up finishes."""
        return self._index

    @property
    def dedup(self) -> DedupResult:
        """What the last dedup pass kept and removed (nothing removed when it is off)."""
        return self._dedup

    @property
    def tool_sets(self) -> tuple[ToolSet, ...]:
        """The tool sets passed to ``open_engine``."""
        return self._tool_sets

    def providers_of(self, tool_id: str) -> tuple[str, ...]:
        """The tools ``tool_id`` stands for: its representative first, then the duplicates dedup
        folded into it, so a host can call it on the server it prefers (``catalog[id].server``).

        A tool without duplicates stands for itself; a removed id answers for its
        representative.

        Raises:
            ConfigError: ``tool_id`` is not in the catalogue.
        """
        head = self._representative.get(tool_id, tool_id)
        if head not in self._index.catalog:
            raise ConfigError(f"no tool with id {tool_id!r} in the catalogue")
        return self._dedup.providers.get(head, (head,))

    def release_sets(self, session: str, names: Iterable[str]) -> None:
        """Stop forcing the tool sets ``names`` on ``session``'s steps (forced or sticky).

        Raises:
            ConfigError: a name is not one of the engine's tool sets.
        """
        released = self._set_names(names, "release_sets")
        if session in self._sessions:
            self._sessions.get(session).release(released)

    async def ready(self) -> None:
        """Wait until tool embeddings are loaded (or warm-up failed and the engine stays
        keyword-only; ``index.degraded_reason`` then says why)."""
        await self._ready.wait()

    def subscribe(self, buffer: int | None = None) -> AbstractAsyncContextManager[Any]:
        """Receive events; see ``EventHub.subscribe``."""
        return self._hub.subscribe(buffer=buffer or self.config.events.buffer)

    # -- operations ---------------------------------------------------------------------------

    async def select(
        self,
        query: str,
        *,
        strategy: Strategy | None = None,
        policy: Policy | None = None,
        **options: Any,
    ) -> Selection:
        """The tools to show for ``query``; the policy defaults come from the config.

        Args:
            options: ``max_tools``, ``threshold``, ``adaptive``, ``always_active``,
                ``related``, ``max_related`` (as ``ToolIndex.select``).

        Returns:
            A ``Selection``. ``degraded`` when embeddings are not ready, the request's
            embedding failed, or it missed ``deadlines.embed_s`` (recall is keyword-only).

        Raises:
            ConfigError: an unknown option or tool id.

        **Cancellation:** the caller's cancel scope cancels the call; an abandoned embedding
        thread finishes on its own and its result is dropped.
        """
        started = time.perf_counter()
        policy = self._served_policy(policy or self._policy(options))
        index = self._index
        policy.check_ids(index.catalog)
        wanted = max(policy.max_tools, 1) * (3 if policy.tool_sets else 1)
        rerank = self._generator is not None and self.config.rerank.enabled and query.strip()
        if rerank:
            wanted = max(wanted, rerank_pool_size(policy.max_tools, len(index.catalog)))
        ranking = await self._rank(index, query, wanted, strategy)
        if rerank:
            ranking, policy = await self._reranked(index, query, ranking, policy)
        selection = select(ranking, policy, started)
        self._hub.publish(
            SelectionFinished(
                query_hash=query_hash(query, self._key),
                query=query if self.config.events.include_queries else None,
                tool_ids=selection.tool_ids,
                scores=selection.scores,
                strategy=selection.strategy,
                outcome=selection.outcome,
                degraded=selection.outcome is Outcome.DEGRADED,
                latency_ms=selection.latency_ms,
                reason=selection.reason,
            )
        )
        return selection

    async def _reranked(
        self, index: ToolIndex, query: str, ranking: Ranking, policy: Policy
    ) -> tuple[Ranking, Policy]:
        """``ranking`` re-ordered by the generator, and the policy for re-ranked scores."""
        assert self._generator is not None
        ids = ranking.tool_ids
        if policy.threshold is not None and ranking.outcome is Outcome.APPLIED:
            # toolpick applies the threshold first; afterwards scores are on another scale.
            ids = tuple(
                i for i, s in zip(ids, ranking.scores, strict=True) if s >= policy.threshold
            )
        candidates = [index.catalog[i] for i in ids]
        if len(index.catalog) <= RERANK_TOOL_LIMIT:
            # A small catalogue is shown whole: the model may find what recall missed.
            shown = set(ids)
            candidates += [t for t in index.catalog if t.id not in shown]
        result = await rerank(
            query,
            candidates,
            self._generator,
            limit=policy.max_tools,
            deadline_s=self.config.rerank.deadline_s,
        )
        if result.outcome is Outcome.DEGRADED:
            self._hub.publish(
                FailOpen(operation="select", what_failed="reranker", reason=result.reason)
            )
        anchored = _anchored(ranking, policy.tool_sets)  # floors read recall's cosine scores
        policy = attrs.evolve(
            policy, threshold=None, adaptive=False, forced_sets=(*policy.forced_sets, *anchored)
        )
        return reranked_ranking(ranking, result), policy

    async def prepare_step(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        session: str | None = None,
        force_sets: Iterable[str] = (),
        release_sets: Iterable[str] = (),
    ) -> StepSelection:
        """The tools to show on the next step of an agent loop.

        The request is extracted from the conversation (``toolroute._core.conversation``). After
        one step in which the model called no tool the next page of ranked tools is shown;
        after two, every tool (at most ``selection.all_tools_ceiling``, best first). A step
        with a tool call starts again from the first page. Steps of one session run one at a
        time, in arrival order.

        Tool sets (``open_engine(tool_sets=...)``) add their members when an anchor scores at
        its floor, and then stay forced on the session's next ``sessions.sticky_steps`` steps.

        Args:
            force_sets: names of tool sets forced from this step on, until released (without
                a session: on this step only).
            release_sets: names of tool sets no longer forced nor sticky (applied before
                ``force_sets``).

        Raises:
            ConfigError: a set name is not one of the engine's tool sets.
        """
        force = self._set_names(force_sets, "force_sets")
        release = self._set_names(release_sets, "release_sets")
        if session is None:
            return await self._step(messages, None, force)
        async with self._sessions.get(session).lock:
            state = self._sessions.get(session)
            state.release(release)
            state.force(force)
            return await self._step(messages, session)

    async def _step(
        self,
        messages: Sequence[Mapping[str, Any]],
        session: str | None,
        forced: tuple[str, ...] = (),  # a session's forced sets live in its state
    ) -> StepSelection:
        started = time.perf_counter()
        defaults = self.config.selection
        query = extract_query(messages)
        page = min(idle_steps(messages), 2)
        found: tuple[str, ...] = ()  # tools the agent found with search_tools, shown once
        state: SessionState | None = None
        if session is not None:
            state = self._sessions.get(session)
            state.idle_steps = page
            found, state.activated = state.activated, ()
            forced = state.step_sets()
        index, sets = self._index, self._sets
        always = self._served_ids(defaults.always_active)
        routing: RoutingOutcome | None = None
        hidden: frozenset[str] = frozenset()  # tools of the servers routing dropped
        if defaults.route_servers and query.strip():
            routing = await self._router.route(
                messages, index.catalog, session=session, state=state
            )
            hidden = frozenset(routing.excluded_tools) - set(always)
        if not query.strip():
            members = (m for s in sets if s.name in forced for m in s.members)
            shown = tuple(dict.fromkeys((*always, *found, *members)))
            step = StepSelection(
                shown or None, "", page, Outcome.SKIPPED, "no request text", active_sets=forced
            )
        elif page >= 2 and len(index.catalog) - len(hidden) <= defaults.all_tools_ceiling:
            every = tuple(t.id for t in index.catalog if t.id not in hidden) if hidden else None
            step = StepSelection(every, query, page, Outcome.APPLIED, active_sets=forced)
        else:
            size = defaults.max_tools
            start, count = (0, defaults.all_tools_ceiling) if page >= 2 else (page * size, size)
            # Tool sets read the scores of more than the picks: anchors may rank just below.
            wanted = count if page >= 2 else start + size * (3 if sets else 1)
            ranking = await self._rank(index, query, wanted + len(hidden), None)
            if hidden:
                ranking = ranking.only(i for i in ranking.tool_ids if i not in hidden)
            anchored = _anchored(ranking, sets)
            if state is not None:
                state.remember(anchored, self.config.sessions.sticky_steps)
            policy = Policy(
                max_tools=count,
                adaptive=False,
                always_active=(*always, *found),
                tool_sets=sets,
                forced_sets=(*forced, *anchored),
            )
            this_page = attrs.evolve(
                ranking, tool_ids=ranking.tool_ids[start:], scores=ranking.scores[start:]
            )
            chosen = select(this_page, policy, started)
            step = StepSelection(
                chosen.tool_ids,
                query,
                page,
                ranking.outcome,
                ranking.reason,
                active_sets=chosen.active_sets,
            )
        step = attrs.evolve(
            step,
            latency_ms=(time.perf_counter() - started) * 1000.0,
            system_prompts=tuple(system_prompts(sets, step.active_sets)),
            routing=routing,
        )
        self._hub.publish(
            StepFinished(
                session=session,
                query_hash=query_hash(query, self._key),
                page=step.page,
                tool_ids=step.tool_ids,
                outcome=step.outcome,
                latency_ms=step.latency_ms,
                reason=step.reason,
                query=query if self.config.events.include_queries else None,
            )
        )
        return step

    async def update(
        self,
        *,
        add: Sequence[Tool] = (),
        remove: Sequence[str] = (),
        replace: Sequence[Tool] = (),
    ) -> None:
        """Change the catalogue: ``remove`` ids, ``replace`` tools by id, ``add`` new tools.

        Only tools whose embedding text changed are embedded again (the rest keep their
        vectors); readers see the old snapshot or the new one, never a mix. If embedding
        fails the new catalogue is served keyword-only (``degraded``) and a ``fail_open``
        event says why.

        Raises:
            ConfigError: ``remove`` or ``replace`` names an id the catalogue does not have.
            CatalogError: the result would have duplicate ids.
        """
        async with self._updating:
            old = self._index
            catalog = updated_catalog(self._source, add=add, remove=remove, replace=replace)
            dedup = await self._deduplicate(catalog, "update")
            # Unchanged tools keep their enrichment; added and replaced ones are enriched at
            # the next warm-up (the disk cache keeps the rest).
            changed = {t.id for t in (*add, *replace)}
            extra = {i: t for i, t in old.extra_text.items() if i not in changed}
            new = await self._run_cpu(
                functools.partial(ToolIndex, embedder=None, cache=None, extra_text=extra),
                served(dedup),
                limiter=self._cpu,
            )
            if self._embedder is not None:
                # During warm-up this embeds the whole catalogue (the disk cache absorbs the
                # repeat); warm-up then sees the catalogue changed and drops its stale vectors.
                new = await self._with_vectors(new, old, self._embedder)
            self._serve(catalog, dedup, new)
            self._version += 1
            self._hub.publish(
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
                rows[missing] = await self._run_cpu(
                    embed_with_cache,
                    embedder,
                    [texts[i] for i in missing],
                    self._cache(),
                    limiter=self._cpu,
                )
            return new.with_vectors(embedder, rows)
        except Exception as exc:  # the new catalogue is served keyword-only
            reason = brief(exc)
            self._hub.publish(FailOpen(operation="update", what_failed="embedder", reason=reason))
            return new.without_vectors(f"embedder failed while indexing: {reason}")

    # -- decisions and server routing -----------------------------------------------------------

    @property
    def decider(self) -> Decider | None:
        """The decision provider ``decide``, ``try_decide`` and ``route_servers`` use."""
        return self._decisions.decider

    async def decide(
        self, request: DecisionRequest, *, provider: Decider | None = None
    ) -> DecisionResult:
        """``toolroute.decide`` under the provider's shared concurrency limit.

        Raises:
            DecisionError: as ``toolroute.decide``; also when the engine has no provider.
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
        ``None`` means carry on as before (no provider, every batch failed, or late)."""
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

        Never raises for a provider failure: a failure keeps every server.
        """
        candidates = servers if servers is not None else self._index.catalog
        if session is None:
            return await self._router.route(query, candidates, session=None, state=None)
        async with self._sessions.get(session).lock:
            state = self._sessions.get(session)
            return await self._router.route(query, candidates, session=session, state=state)

    async def search_tools(
        self, arguments: object, *, session: str | None = None, k: int = 5
    ) -> dict[str, Any]:
        """Handle a ``search_tools`` call (see ``search_tools_definition``).

        Args:
            arguments: the call's arguments, ``{"query": ...}`` or its JSON text.
            session: the conversation; the tools found are shown on its next step.

        Returns:
            ``{"tools": [{"name", "description", "relevance"}], "hint"}``, ready to send back
            to the model as the tool's output.
        """
        query = read_arguments(arguments)
        index = self._index
        ranking = await self._rank(index, query, k, None)
        if session is not None:
            state = self._sessions.get(session)
            state.activated = tuple(dict.fromkeys((*state.activated, *ranking.tool_ids)))
        return {
            "tools": [
                {
                    "name": index.catalog[tool_id].name,
                    "description": index.catalog[tool_id].description,
                    "relevance": round(score, 2),
                }
                for tool_id, score in zip(ranking.tool_ids, ranking.scores, strict=True)
            ],
            "hint": HINT,
        }

    # -- internals ----------------------------------------------------------------------------

    def _serve(self, source: Catalog, dedup: DedupResult, index: ToolIndex) -> None:
        """Swap in a new snapshot; no await, so readers never see a mix."""
        self._source, self._dedup, self._index = source, dedup, index
        self._representative = {removed.name: removed.duplicate_of for removed in dedup.removed}
        # The sets as served: a removed member stands for its representative; a member an
        # update removed is dropped.
        self._sets = tuple(self._served_set(s, index.catalog) for s in self._tool_sets)

    def _served_ids(self, ids: Iterable[str]) -> tuple[str, ...]:
        """``ids`` with every tool dedup removed replaced by its representative."""
        return tuple(dict.fromkeys(self._representative.get(i, i) for i in ids))

    def _served_set(self, tool_set: ToolSet, catalog: Catalog | None = None) -> ToolSet:
        def ids(values: tuple[str, ...]) -> tuple[str, ...]:
            served = self._served_ids(values)
            return served if catalog is None else tuple(i for i in served if i in catalog)

        return attrs.evolve(tool_set, members=ids(tool_set.members), anchors=ids(tool_set.anchors))

    def _served_policy(self, policy: Policy) -> Policy:
        """``policy`` naming representatives instead of removed tools (which cannot be shown)."""
        if not self._representative:
            return policy
        related: dict[str, tuple[str, ...]] = {}
        for key, targets in policy.related.items():
            head = self._representative.get(key, key)
            related[head] = self._served_ids((*related.get(head, ()), *targets))
        return attrs.evolve(
            policy,
            always_active=self._served_ids(policy.always_active),
            related=related,
            tool_sets=[self._served_set(s) for s in policy.tool_sets],
        )

    def _set_names(self, names: Iterable[str], field: str) -> tuple[str, ...]:
        chosen = id_tuple(names, field)
        known = [s.name for s in self._tool_sets]
        unknown = [name for name in chosen if name not in known]
        if unknown:
            raise ConfigError(
                f"{field} names unknown tool sets: {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(map(repr, known)) or 'none'}"
            )
        return chosen

    async def _deduplicate(self, catalog: Catalog, operation: str) -> DedupResult:
        result, failure = await dedupe_catalog(
            catalog, self.config, self._embedder, self._run_cpu, self._cpu
        )
        if failure:
            self._hub.publish(FailOpen(operation=operation, what_failed="dedup", reason=failure))
        return result

    def _policy(self, options: Mapping[str, Any]) -> Policy:
        defaults = self.config.selection
        merged = {
            "max_tools": defaults.max_tools,
            "threshold": defaults.threshold,
            "adaptive": defaults.adaptive,
            "always_active": defaults.always_active,
            "tool_sets": self._sets,
            **options,
        }
        try:
            return Policy(**merged)
        except TypeError as exc:
            raise ConfigError(f"invalid selection option: {exc}") from None

    async def _rank(
        self, index: ToolIndex, query: str, k: int, strategy: Strategy | None
    ) -> Ranking:
        default: Strategy = "combined" if self._embedder is not None else "keyword"
        chosen = strategy or default
        vector: npt.NDArray[np.float32] | None = None
        reason = index.degraded_reason or ("" if self._ready.is_set() else "warming up")
        if chosen != "keyword" and index.vectors is not None and query.strip() and self._batcher:
            vector, reason = await self._embed_query(index, query)
        if len(index.catalog) < _SCORE_IN_THREAD_FROM:
            return index.rank(query, vector, k, strategy=chosen, reason=reason)
        # Scoring a large catalogue takes milliseconds: off the event loop, so other tasks run.
        ranked: Ranking = await self._run_cpu(
            functools.partial(index.rank, strategy=chosen, reason=reason),
            query,
            vector,
            k,
            limiter=self._cpu,
        )
        return ranked

    async def _embed_query(
        self, index: ToolIndex, query: str
    ) -> tuple[npt.NDArray[np.float32] | None, str]:
        deadline = self.config.deadlines.embed_s
        reason = f"the request's embedding took longer than {deadline} s"
        assert self._batcher is not None  # an engine with vectors has an embedder
        with trio.move_on_after(deadline):
            try:
                return await self._batcher.embed(query), ""
            except Exception as exc:  # the request degrades to keyword-only; it never raises
                reason = f"embedder failed on the query: {brief(exc)}"
        self._hub.publish(FailOpen(operation="select", what_failed="embedder", reason=reason))
        return None, reason

    async def _enrich(self) -> None:
        """Add the generator's phrasings to the recall text (``config.enrichment``); tools
        whose batch failed keep their original text."""
        settings = self.config.enrichment
        if not settings.enabled or self._generator is None:
            return
        catalog = self._index.catalog
        result = await enrich_tools(
            list(catalog),
            self._generator,
            cache_dir=cache_dir(self.config),
            batch=settings.batch,
            deadline_s=settings.deadline_s,
            concurrency=settings.concurrency,
        )
        if result.failed:
            why = result.reasons[0] if result.reasons else "no phrasings came back"
            self._hub.publish(
                FailOpen(
                    operation="warmup",
                    what_failed="enrichment",
                    reason=f"{result.failed} tools keep their original text: {why}",
                )
            )
        if not result.texts:
            return
        async with self._updating:
            if self._index.catalog is catalog and self._index.vectors is None:
                self._index = await self._run_cpu(
                    functools.partial(
                        ToolIndex, embedder=None, cache=None, extra_text=result.texts
                    ),
                    catalog,
                    limiter=self._cpu,
                )

    async def _warm_up(self, embedder: Embedder | None) -> None:
        await self._enrich()
        if embedder is None:
            self._ready.set()
            return
        started = time.perf_counter()
        token = trio.lowlevel.current_trio_token()
        catalog = self._index.catalog
        texts = self._index.embedding_texts()
        cache = self._cache()
        counts: list[int] = []

        def progress(done: int, total: int) -> None:
            if self._closing():
                raise EngineClosing("warm-up stopped: the engine is shutting down")
            counts.append(total)
            # Thread-safe hop back to the trio thread; publish never blocks there.
            token.run_sync_soon(self._hub.publish, WarmupProgress(done=done, total=total))

        try:
            vectors = await self._run_cpu(
                embed_with_cache,
                embedder,
                texts,
                cache,
                progress,
                self.config.warmup.batch,
                limiter=self._cpu,
            )
            async with self._updating:
                # An update during warm-up brought its own vectors: these are stale then.
                if self._index.catalog is catalog and self._index.vectors is None:
                    self._index = self._index.with_vectors(embedder, vectors)
            degraded, reason = False, ""
        except Exception as exc:  # warm-up failure leaves the engine keyword-only
            degraded, reason = True, brief(exc)
            self._index = self._index.without_vectors(f"embedder failed while indexing: {reason}")
            self._hub.publish(FailOpen(operation="warmup", what_failed="embedder", reason=reason))
        embedded = counts[0] if counts else 0
        self._hub.publish(
            WarmupFinished(
                tools=len(catalog),
                embedded=embedded,
                from_cache=len(catalog) - embedded if not degraded else 0,
                seconds=time.perf_counter() - started,
                degraded=degraded,
                reason=reason,
            )
        )
        self._ready.set()

    def _cache(self) -> EmbeddingCache | None:
        return open_cache(self.config)


def _anchored(ranking: Ranking, sets: Sequence[ToolSet]) -> tuple[str, ...]:
    """Sets an anchor genuinely activates in ``ranking`` (as ``select``: never on keyword-only
    scores, which are on another scale than the floors)."""
    if not sets or ranking.outcome is not Outcome.APPLIED or ranking.strategy not in COSINE_SCALED:
        return ()
    return activated_sets(dict(zip(ranking.tool_ids, ranking.scores, strict=True)), sets)


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
) -> AsyncIterator[Engine]:
    """Run an engine over ``catalog`` for the duration of the block.

    Args:
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
        generator: the chat model for the generative routing fallback; none by default.

    By default the block starts at once and requests are served keyword-only (``degraded``)
    until embeddings are ready; ``config.warmup.wait`` makes the start wait instead. With
    ``config.dedup.enabled`` near-duplicate tools are dropped before indexing (in
    ``embedding`` mode the catalogue is embedded before the block starts); if dedup fails,
    every tool is served.

    Raises:
        ConfigError: a tool set is malformed or names a tool not in ``catalog``,
            ``embedding`` dedup is asked of a keyword-only engine, or the environment
            configures a decision provider badly (an http base URL off loopback, say).

    **Resource handling:** leaving the block cancels warm-up and closes every subscription,
    and the connections of a decider the engine made itself.
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
    dedup, failure = await dedupe_catalog(
        catalog, config, embedder, workers.run, trio.CapacityLimiter(1)
    )
    if failure:
        hub.publish(FailOpen(operation="open_engine", what_failed="dedup", reason=failure))
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            engine = Engine(
                catalog,
                config,
                embedder,
                hub,
                workers,
                tool_sets=tool_sets,
                dedup=dedup,
                decider=decider,
                generator=generator,
            )
            if embedder is not None:
                engine._batcher = QueryBatcher(
                    lambda: engine.index._query_vectors,  # the current snapshot's embedding
                    workers.run,
                    max_batch=max(1, int(embedder.max_batch)),
                    limiter=engine._cpu,
                )
                await nursery.start(
                    run_supervised,
                    "query batcher",
                    engine._batcher.run,
                    config.restarts,
                    hub.publish,
                )
            if embedder is None and not (config.enrichment.enabled and generator is not None):
                engine._ready.set()  # nothing to warm up
            nursery.start_soon(engine._warm_up, embedder)
            if config.warmup.wait:
                await engine.ready()
            try:
                yield engine
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                nursery.cancel_scope.cancel("engine shutdown")
                if engine._batcher is not None:
                    engine._batcher.close()
                hub.close()
    except BaseExceptionGroup as group:
        # The nursery is an internal detail: callers see their own error, or EngineCrashed.
        crashed = group.subgroup(EngineCrashed)
        if crashed is not None:
            raise EngineCrashed(str(crashed.exceptions[0])) from group
        if body_error is not None and group.exceptions == (body_error,):
            raise body_error from None
        raise
    finally:
        # Every task of the engine has ended; model calls they abandoned may still run in
        # worker threads. Wait for them (bounded), so none outlives the block.
        await workers.aclose()
        if owned_decider and decider is not None:
            with trio.move_on_after(SHUTDOWN_GRACE_S, shield=True):
                await decider.aclose()  # type: ignore[attr-defined]
