"""The trio runtime: ``open_engine`` and the ``Engine`` handle.

The engine serves every request from an immutable snapshot (a ``ToolIndex``) that it swaps
when warm-up finishes, so reads take no lock and make no round trip. It starts keyword-only
at once and embeds the catalogue in a worker thread; each request embeds its text in a worker
thread under a deadline and falls back to keyword-only recall when that is late or fails.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import numpy as np
import numpy.typing as npt
import trio

from ._batcher import QueryBatcher
from ._cache import EmbeddingCache, default_cache_dir
from ._catalog import Catalog, Tool
from ._config import EngineConfig
from ._conversation import extract_query, idle_steps
from ._errors import ConfigError, EngineCrashed
from ._events import (
    CatalogUpdated,
    FailOpen,
    SelectionFinished,
    StepFinished,
    WarmupFinished,
    WarmupProgress,
    new_query_key,
    query_hash,
)
from ._hub import EventHub
from ._index import Strategy, ToolIndex, brief, embed_with_cache
from ._outcome import Outcome
from ._policy import Policy, select
from ._search_tool import HINT, read_arguments
from ._selection import Ranking, Selection
from ._sessions import SessionStore
from ._supervisor import run_supervised
from ._text import embedding_text

if TYPE_CHECKING:
    from .providers import Embedder

T = TypeVar("T")
RunCpu = Callable[..., Awaitable[Any]]

_DEFAULT: Any = object()
#: Catalogues at least this large are scored in a worker thread (about 1 ms of numpy work
#: per request at this size; below it the thread hop costs more than it saves).
_SCORE_IN_THREAD_FROM = 20_000


async def run_in_thread(fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter) -> T:
    """The default CPU seam: a worker thread the caller may abandon when cancelled."""
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter, abandon_on_cancel=True)


@attrs.frozen
class StepSelection:
    """The tools to show on one agent step.

    Attributes:
        tool_ids: ids in order, or ``None`` to show every tool.
        query: the text extracted from the conversation and routed on.
        page: 0 for the best tools, 1 for the next page after a step without a tool call,
            2 for every tool after two such steps.
        outcome: as ``Selection.outcome``; ``skipped`` when the conversation has no text.
    """

    tool_ids: tuple[str, ...] | None
    query: str
    page: int
    outcome: Outcome
    reason: str = ""
    latency_ms: float = 0.0


class Engine:
    """Handle on a running engine; obtain one from ``open_engine``."""

    def __init__(
        self,
        catalog: Catalog,
        config: EngineConfig,
        embedder: Embedder | None,
        hub: EventHub,
        run_cpu: RunCpu,
    ) -> None:
        self.config = config
        self._embedder = embedder
        self._hub = hub
        self._run_cpu = run_cpu
        self._cpu = trio.CapacityLimiter(2)
        self._key = new_query_key()  # queries appear in events only as an HMAC
        self._index = ToolIndex(catalog, embedder=None, cache=None)
        self._ready = trio.Event()
        self._updating = trio.Lock()  # one catalogue change at a time
        self._version = 0
        self._batcher: QueryBatcher | None = None
        self._sessions = SessionStore(
            max_sessions=config.sessions.max_sessions, idle_s=config.sessions.idle_s
        )

    @property
    def catalog(self) -> Catalog:
        """The current catalogue (it changes with ``update``)."""
        return self._index.catalog

    @property
    def index(self) -> ToolIndex:
        """The current snapshot: keyword-only until warm-up finishes."""
        return self._index

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
        policy = policy or self._policy(options)
        index = self._index
        policy.check_ids(index.catalog)
        wanted = max(policy.max_tools, 1) * (3 if policy.tool_sets else 1)
        ranking = await self._rank(index, query, wanted, strategy)
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

    async def prepare_step(
        self, messages: Sequence[Mapping[str, Any]], *, session: str | None = None
    ) -> StepSelection:
        """The tools to show on the next step of an agent loop.

        The request is extracted from the conversation (``toolroute._conversation``). After
        one step in which the model called no tool the next page of ranked tools is shown;
        after two, every tool (at most ``selection.all_tools_ceiling``, best first). A step
        with a tool call starts again from the first page. Steps of one session run one at a
        time, in arrival order.
        """
        if session is None:
            return await self._step(messages, None)
        async with self._sessions.get(session).lock:
            return await self._step(messages, session)

    async def _step(
        self, messages: Sequence[Mapping[str, Any]], session: str | None
    ) -> StepSelection:
        started = time.perf_counter()
        defaults = self.config.selection
        query = extract_query(messages)
        page = min(idle_steps(messages), 2)
        found: tuple[str, ...] = ()  # tools the agent found with search_tools, shown once
        if session is not None:
            state = self._sessions.get(session)
            state.idle_steps = page
            found, state.activated = state.activated, ()
        always = defaults.always_active
        index = self._index
        if not query.strip():
            shown = tuple(dict.fromkeys((*always, *found)))
            step = StepSelection(shown or None, "", page, Outcome.SKIPPED, "no request text")
        elif page >= 2 and len(index.catalog) <= defaults.all_tools_ceiling:
            step = StepSelection(None, query, page, Outcome.APPLIED)
        else:
            size = defaults.max_tools
            wanted = defaults.all_tools_ceiling if page >= 2 else size * (page + 1)
            ranking = await self._rank(index, query, wanted, None)
            picked = ranking.tool_ids if page >= 2 else ranking.tool_ids[page * size :]
            ids = tuple(dict.fromkeys((*always, *found, *picked)))
            step = StepSelection(ids, query, page, ranking.outcome, ranking.reason)
        step = attrs.evolve(step, latency_ms=(time.perf_counter() - started) * 1000.0)
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
            catalog = updated_catalog(old.catalog, add=add, remove=remove, replace=replace)
            new = await self._run_cpu(
                functools.partial(ToolIndex, embedder=None, cache=None), catalog, limiter=self._cpu
            )
            if self._embedder is not None:
                # During warm-up this embeds the whole catalogue (the disk cache absorbs the
                # repeat); warm-up then sees the catalogue changed and drops its stale vectors.
                new = await self._with_vectors(new, old, self._embedder)
            self._index = new
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
        texts = [embedding_text(tool) for tool in new.catalog]
        known: dict[str, int] = {}
        if old.vectors is not None:
            known = {embedding_text(tool): i for i, tool in enumerate(old.catalog)}
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

    def _policy(self, options: Mapping[str, Any]) -> Policy:
        defaults = self.config.selection
        merged = {
            "max_tools": defaults.max_tools,
            "threshold": defaults.threshold,
            "adaptive": defaults.adaptive,
            "always_active": defaults.always_active,
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

    async def _warm_up(self, embedder: Embedder) -> None:
        started = time.perf_counter()
        token = trio.lowlevel.current_trio_token()
        catalog = self.catalog
        texts = [embedding_text(tool) for tool in catalog]
        cache = self._cache()
        counts: list[int] = []

        def progress(done: int, total: int) -> None:
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
                tools=len(self.catalog),
                embedded=embedded,
                from_cache=len(self.catalog) - embedded if not degraded else 0,
                seconds=time.perf_counter() - started,
                degraded=degraded,
                reason=reason,
            )
        )
        self._ready.set()

    def _cache(self) -> EmbeddingCache | None:
        if not self.config.cache:
            return None
        return EmbeddingCache(self.config.cache_dir or default_cache_dir())


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


@asynccontextmanager
async def open_engine(
    catalog: Catalog,
    *,
    config: EngineConfig | None = None,
    embedder: Embedder | None = _DEFAULT,
    run_cpu: RunCpu = run_in_thread,
) -> AsyncIterator[Engine]:
    """Run an engine over ``catalog`` for the duration of the block.

    Args:
        config: an ``EngineConfig``; defaults everywhere otherwise.
        embedder: any ``Embedder``; by default the offline MiniLM model; ``None`` for a
            keyword-only engine.
        run_cpu: how CPU work runs (``await run_cpu(fn, *args, limiter=...)``); a worker
            thread by default. Tests under a mock clock pass an inline version.

    By default the block starts at once and requests are served keyword-only (``degraded``)
    until embeddings are ready; ``config.warmup.wait`` makes the start wait instead.

    **Resource handling:** leaving the block cancels warm-up and closes every subscription.
    """
    config = config or EngineConfig()
    if embedder is _DEFAULT:
        from .providers import default_embedder

        embedder = await trio.to_thread.run_sync(default_embedder)
    hub = EventHub()
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            engine = Engine(catalog, config, embedder, hub, run_cpu)
            if embedder is None:
                engine._ready.set()
            else:
                engine._batcher = QueryBatcher(
                    lambda: engine.index._query_vectors,  # the current snapshot's embedding
                    run_cpu,
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
