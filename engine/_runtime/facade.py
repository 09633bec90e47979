"""The ``Engine`` facade: every operation forwards to the service that owns it.

The services (see DESIGN "trio runtime"): the catalogue keeper owns the snapshot every request
reads, recall embeds requests through the query batcher, the selector and the steps shell
answer ``select`` and ``prepare_step``, the decision service and the server router answer
decisions and routing, and the event hub fans events out. ``open_engine`` wires them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import trio

from .._core.catalog.catalog import Catalog, Server, Tool
from .._core.catalog.dedup import DedupResult
from .._core.config import EngineConfig
from .._core.decide.types import DecisionRequest, DecisionResult
from .._core.errors import ConfigError
from .._core.public import NoPublicConstructor
from .._core.recall.index import RecallIndex, Strategy
from .._core.select.access import ToolAccess, request_access
from .._core.select.arguments import count, query_text, session_id
from .._core.select.conversation import Messages
from .._core.select.policy import Policy
from .._core.select.selection import Selection
from .._core.select.toolsets import ToolSet
from .._routing.pipeline import RoutingOutcome
from .catalog_keeper import CatalogKeeper
from .decision_service import DecisionService
from .hub import Delivery, EventHub
from .learning import Learning, forget_arguments, learn_arguments, tool_id_arguments
from .recall import Recall
from .request_context import open_request, stamped
from .selector import FROM_CONFIG, FromConfig, SelectOptions, Selector
from .server_router import ServerRouter
from .statistics import EngineStatistics
from .steps import Steps, StepSelection
from .subscription_state import subscription_state

if TYPE_CHECKING:
    from ..providers import Decider

__all__ = ["Engine"]


class Engine(metaclass=NoPublicConstructor):
    """Handle on a running engine; obtain one from ``open_engine`` (calling ``Engine()``
    raises ``TypeError``).

    Every operation forwards to the service that owns it; reads take the catalogue keeper's
    current snapshot, so they never wait for warm-up or an update.

    After the ``open_engine`` block ends, every operation raises ``RuntimeError`` saying the
    engine is closed (the properties stay readable).
    """

    _way_in = "`async with toolroute.open_engine(catalog) as engine:`"

    def __init__(
        self,
        *,
        config: EngineConfig,
        tool_sets: tuple[ToolSet, ...],
        hub: EventHub,
        keeper: CatalogKeeper,
        selector: Selector,
        steps: Steps,
        decisions: DecisionService,
        router: ServerRouter,
        recall: Recall,
        learning: Learning | None = None,
    ) -> None:
        self.config = config
        self._learning = learning
        self._recall = recall
        self._tool_sets = tool_sets
        self._hub = hub
        self._keeper = keeper
        self._selector = selector
        self._steps = steps
        self._decisions = decisions
        self._router = router
        self._closed = False

    def _close(self) -> None:
        """Called by ``open_engine`` as its block ends: from then on operations refuse."""
        self._closed = True

    def _check_open(self, operation: str) -> None:
        """Refuse an operation on a closed engine: its services are gone, and an answer
        would come from a snapshot nothing keeps (a "warming up" that never ends)."""
        if self._closed:
            raise RuntimeError(
                f"Engine.{operation} was called after the engine closed (its "
                f"`async with open_engine(...)` block ended); call it inside the block, "
                f"or open a new engine"
            )

    @property
    def catalog(self) -> Catalog:
        """The current catalogue as given (it changes with ``update``), tools dedup removed
        included: look a provider up here. ``index.catalog`` holds the tools served."""
        return self._keeper.snapshot.source

    @property
    def index(self) -> RecallIndex:
        """The current snapshot's index: keyword-only until warm-up finishes. It holds no
        model: it ranks request vectors it is given (``await select`` embeds the request)."""
        return self._keeper.snapshot.index

    @property
    def dedup(self) -> DedupResult:
        """What the last dedup pass kept and removed (nothing removed when it is off)."""
        return self._keeper.snapshot.dedup

    @property
    def tool_sets(self) -> tuple[ToolSet, ...]:
        """The tool sets passed to ``open_engine``."""
        return self._tool_sets

    def statistics(self) -> EngineStatistics:
        """What the engine has counted so far, read now: recall (query-cache hits and misses,
        how many requests the full model, the fast tier and keyword-only recall answered),
        sessions (held, stepping, steps queued), decision jobs (submitted, in flight,
        unanswered) and events (subscribers, published, dropped)."""
        return EngineStatistics(
            recall=self._recall.statistics(),
            sessions=self._steps.statistics(),
            decisions=self._decisions.actor.statistics(),
            events=self._hub.statistics(),
        )

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
        self._check_open("providers_of")
        return self._keeper.snapshot.providers_of(tool_id)

    def release_sets(self, session: str, names: Iterable[str]) -> None:
        """Stop forcing the tool sets ``names`` on ``session``'s steps (forced or sticky).

        Raises:
            ConfigError: a name is not one of the engine's tool sets.
        """
        self._check_open("release_sets")
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
        self._check_open("ready")
        await self._keeper.ready()
        if self._learning is not None:
            await self._learning.ready()  # the catalogue's example requests, embedded

    def subscribe(
        self, buffer: int | None = None, *, snapshot: bool = True
    ) -> AbstractAsyncContextManager[trio.MemoryReceiveChannel[Delivery]]:
        """Receive the engine's events, as ``Delivery(event, dropped)`` items.

        The first delivery is a ``subscription.started`` event holding the engine's state
        as the subscription began (warm-up, catalogue version, tool count, fast tier);
        every later event is a change from it. Events of a public call carry its
        ``request_id`` (and ``session``), as its result does.

        Args:
            buffer: events this subscriber may fall behind by before it loses them
                (counted in the next delivery's ``dropped``, and reported within 100 ms by
                an ``events.dropped`` delivery even when nothing else is published);
                ``config.events.buffer`` when not given.
            snapshot: ``False`` to skip the ``subscription.started`` delivery (for a
                consumer that only forwards changes, such as a shared event stream).

        Returns:
            An async context manager yielding an async iterator of deliveries; it ends after
            the engine closes. Leaving the block unsubscribes.

        Raises:
            ConfigError: ``buffer`` is not an integer of at least 1, or ``snapshot`` is
                not a bool.

        **Cancellation:** cancelling the task that reads ends the subscription as leaving the
        block does; the engine never waits for a subscriber.

        **Fail-open:** a subscriber that falls behind loses events instead of slowing the
        engine (``publish`` never blocks); its next delivery says how many it lost.
        """
        self._check_open("subscribe")
        if not isinstance(snapshot, bool):
            raise ConfigError(f"snapshot must be True or False, got {snapshot!r}")
        first = functools.partial(subscription_state, self._keeper, self._recall)
        # ``is None``, not ``or``: a buffer of 0 is the caller's mistake, refused by the hub.
        return self._hub.subscribe(
            buffer=self.config.events.buffer if buffer is None else buffer,
            first=first if snapshot else None,
        )

    async def select(
        self,
        query: str,
        *,
        strategy: Strategy | str | None = None,
        max_tools: int | None = None,
        threshold: float | FromConfig | None = FROM_CONFIG,
        adaptive: bool | None = None,
        always_active: Sequence[str] | None = None,
        related: Mapping[str, Sequence[str]] | None = None,
        max_related: int = 5,
        tool_sets: Sequence[ToolSet] | None = None,
        forced_sets: Sequence[str] = (),
        policy: Policy | None = None,
        explain: bool | Sequence[str] = False,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] | None = None,
        tenant: ToolAccess | None = None,
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
            explain: ``True`` to explain every shown tool (``Selection.explanations``); a
                list of tool ids to explain those as well when they are hidden.
            allow: the only tools this request may be shown (narrows before recall).
            deny: tools this request is never shown, whatever fails open.
            tenant: the tenant's ``ToolAccess``; ``allow`` and ``deny`` narrow it further.

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
        self._check_open("select")
        query = query_text(query)
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
        access = request_access(allow, deny, tenant)
        with open_request("select"):
            selection = await self._selector.select(
                query, strategy, policy, options, explain, access
            )
            return stamped(selection)

    async def prepare_step(
        self,
        messages: Messages,
        *,
        session: str | None = None,
        force_sets: Iterable[str] = (),
        release_sets: Iterable[str] = (),
        explain: bool | Sequence[str] = False,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] | None = None,
        tenant: ToolAccess | None = None,
    ) -> StepSelection:
        """The tools to show on the next step of an agent loop.

        The request is extracted from the conversation. After one step in which the model
        called no tool the next page of ranked tools is shown; after two, every tool (at
        most ``selection.all_tools_ceiling``, best first). A step with a tool call starts
        again from the first page. Steps of one session run one at a time, in arrival order.

        Tool sets (``open_engine(tool_sets=...)``) add their members when an anchor scores at
        its floor, and then stay forced on the session's next ``sessions.sticky_steps`` steps.

        Args:
            messages: the conversation, as the agent or its framework passes it around:
                OpenAI Chat or Responses, Anthropic, Gemini, LangChain messages, Pydantic
                AI ``ModelMessage``s (or their dumps), OpenAI Agents items.
            session: the conversation's id; paging, sticky sets and tools found by
                ``search_tools`` need one.
            force_sets: names of tool sets forced from this step on, until released (without
                a session: on this step only).
            release_sets: names of tool sets no longer forced nor sticky (applied before
                ``force_sets``).
            explain: ``True`` to explain every shown tool (``StepSelection.explanations``);
                a list of tool ids to explain those as well when they are hidden.
            allow, deny, tenant: as ``select``; with any of them the step never answers
                ``tool_ids=None`` (every tool) but lists the permitted ones.

        Returns:
            A ``StepSelection`` (``tool_ids=None`` means every tool).

        Raises:
            ConfigError: a set name is not one of the engine's tool sets, ``session`` is
                not a string, or a message has no readable shape (the error names its
                index, type and keys, never its text).

        **Cancellation:** the caller's cancel scope cancels the step; a cancelled step
        leaves the session as the steps before it left it, but for what it had applied.

        **Fail-open:** as ``select``: recall degrades to keywords; failed routing keeps
        every server.
        """
        self._check_open("prepare_step")
        session = session_id(session)
        access = request_access(allow, deny, tenant)
        with open_request("prepare_step", session):
            return await self._steps.prepare_step(
                messages, session, force_sets, release_sets, explain, access
            )

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
        self._check_open("update")
        with open_request("update"):
            await self._keeper.update(add=add, remove=remove, replace=replace)

    async def replace_catalog(self, catalog: Catalog) -> None:
        """Serve ``catalog`` from now on: the engine works out what was added, removed and
        changed (by tool id) against the catalogue it serves and applies that, as ``update``.

        Only tools whose embedding text changed are embedded again; a catalogue equal to the
        one served changes nothing (no new version, no event). Replacements and updates apply
        one at a time, in arrival order, each against the catalogue the one before left.

        Args:
            catalog: the whole new catalogue (its order and server descriptions are kept).

        Raises:
            TypeError: ``catalog`` is not a ``Catalog``.

        **Cancellation** and **Fail-open:** as ``update``.
        """
        self._check_open("replace_catalog")
        if not isinstance(catalog, Catalog):
            raise TypeError(
                f"replace_catalog expects a toolroute.Catalog, got {type(catalog).__name__}"
                " (build one with Catalog.from_mcp_servers, Catalog.from_tools, ...)"
            )
        with open_request("replace_catalog"):
            await self._keeper.replace_catalog(catalog)

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
        self._check_open("decide")
        with open_request("decide"):
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
        self._check_open("try_decide")
        with open_request("try_decide"):
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
        self._check_open("route_servers")
        session = session_id(session)
        candidates = servers if servers is not None else self._keeper.snapshot.index.catalog
        with open_request("route_servers", session):
            if session is None:
                return await self._router.route_servers(query, candidates, None)
            return await self._steps.route_session(query, candidates, session)  # in order

    async def search_tools(
        self,
        arguments: object,
        *,
        session: str | None = None,
        k: int = 5,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] | None = None,
        tenant: ToolAccess | None = None,
    ) -> dict[str, Any]:
        """Handle a ``search_tools`` call (see ``search_tools_definition``).

        Args:
            arguments: the call's arguments, ``{"query": ...}`` or its JSON text.
            session: the conversation; the tools found are shown on its next step.
            k: how many tools to return.
            allow, deny, tenant: as ``select``: a tool they keep out is never found nor
                activated.

        Returns:
            ``{"tools": [{"name", "description", "relevance"}], "hint"}``, ready to send back
            to the model as the tool's output.

        Raises:
            ConfigError: the arguments are not a query.

        **Cancellation:** the caller's cancel scope cancels the search.

        **Fail-open:** as ``select``: recall degrades to keywords.
        """
        self._check_open("search_tools")
        session, k = session_id(session), count(k, "k", 1)
        access = request_access(allow, deny, tenant)
        with open_request("search_tools", session):
            return await self._steps.search_tools(arguments, session, k, access)

    async def learn(self, request: str, tool_ids: Sequence[str]) -> bool:
        """Record that ``tool_ids`` served ``request`` (what the agent actually used), so
        recall ranks them higher for requests like it. Kept in the learning store as the
        request's vector and a hash of its text (the text only with
        ``config.learning.keep_text``), at most ``config.learning.per_tool`` per tool.

        Returns:
            Whether it was recorded: ``False`` for a keyword-only engine (or one whose
            warm-up failed; a call during warm-up waits for it), or when the request could
            not be embedded within ``config.learning.deadline_s``.

        Raises:
            ConfigError: ``request`` is not a non-empty string, or ``tool_ids`` is a bare
                string, empty, or names a tool not in the catalogue.

        **Cancellation:** the caller's cancel scope cancels the wait; a request already
        handed to the learning service may still be recorded.

        **Fail-open:** learned evidence only ever lifts the tools it names; a failure to
        embed or to persist never raises (a ``fail_open`` event says why).
        """
        self._check_open("learn")
        ids = learn_arguments(request, tool_ids, self._keeper.snapshot.source)
        if self._learning is None:
            return False
        with open_request("learn"):
            await self._keeper.ready()  # evidence is a vector: learned from warm-up on
            return await self._learning.learn(request, ids)

    async def forget(self, tool_ids: Sequence[str] | None = None) -> None:
        """Remove what was learned from use (``learn``, recorded tool calls) for
        ``tool_ids``, or for every tool when ``None``. A tool's own example requests stay as
        long as it carries them (change them with ``update``).

        Raises:
            ConfigError: ``tool_ids`` is a bare string, holds something not a string, or
                names a tool that is neither in the catalogue nor has anything learned (a
                tool since removed from the catalogue can still be forgotten), as ``learn``
                refuses a tool it does not know.

        **Cancellation:** the caller's cancel scope cancels the wait; the removal may still
        happen.
        """
        self._check_open("forget")
        learning = self._learning
        ids = forget_arguments(
            tool_ids,
            self._keeper.snapshot.source,
            learning.has_evidence if learning is not None else lambda _tool_id: False,
        )
        if self._learning is not None:
            with open_request("forget"):
                await self._learning.forget(ids)

    async def reload_learned(self, tool_ids: Sequence[str] | None = None) -> None:
        """Read ``tool_ids``' learned evidence (every tool's when ``None``) again from the
        learning store: what another node of a fleet learned since this engine opened.
        ``toolroute.redis``'s ``attach`` calls it when another node announces a change.

        Raises:
            ConfigError: ``tool_ids`` is a bare string or holds something not a string.

        **Fail-open:** a store that cannot be read leaves the evidence as it was (a
        ``fail_open`` event says why).
        """
        self._check_open("reload_learned")
        ids = tool_id_arguments(tool_ids, "reload_learned")
        if self._learning is not None:
            with open_request("reload_learned"):
                await self._learning.reload(ids)
