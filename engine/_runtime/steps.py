"""Steps: the step actor around the pure step planner (``toolroute._core.select.steps``).

``Steps.run`` is a supervised actor. Callers send frozen requests (``PrepareStep``, and
``RouteSession`` for ``Engine.route_servers`` with a session) to its inbox and wait for the
reply on a one-shot channel. The inbox alone orders a session's work: the actor keeps one
FIFO queue per session with work pending, and one child task per such session drains it,
holding the session in the store until the queue is empty (so it is never evicted with
steps queued or running). Different sessions run concurrently, as children of the actor's
nursery; the actor's own loop never awaits anything but its inbox. A store that orders steps
across nodes (``OrderedSessionStore``, a fleet's) is told of each step as the inbox delivers
it, so this node's steps take their places in the fleet's line in that order, and the child
holds the session for one step at a time, in the step's turn.

A caller that gives up (its cancel scope, a deadline) cancels its request's scope: a queued
request is skipped, a running one is cancelled where it stands, and nothing of it lands later.
Replies travel in a ``OneShot``: a result slot and the parked caller, woken once (cheaper
per step than a memory channel, and the caller parks only there).
Each step asks the server router and recall, the planner decides, and the step applies what
the planner decided to the session's state.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

import attrs
import trio

from .._core.catalog.catalog import Catalog, Server, id_tuple
from .._core.config import EngineConfig
from .._core.errors import ConfigError
from .._core.events import Event, FailOpen, StepFinished, query_hash
from .._core.outcome import Outcome
from .._core.recall.learned import calls_since_request
from .._core.select.access import OPEN, ToolAccess, recall_depth
from .._core.select.conversation import (
    Messages,
    extract_query,
    idle_steps_of_turns,
    query_of_turns,
    read_turns,
)
from .._core.select.explain import (
    ExplainRequest,
    Explanation,
    check_known,
    explain_ask,
    hidden_before_ranking,
)
from .._core.select.no_tool import no_tool_step
from .._core.select.search_tool import HINT, read_arguments
from .._core.select.steps import (
    StepInput,
    StepPick,
    ranked_step,
    ranking_window,
    step_without_ranking,
)
from .._core.select.toolsets import ToolSet, system_prompts
from .._core.stores import OrderedSessionStore, SessionState, SessionStore, Turn
from .._routing.pipeline import RoutingOutcome
from .catalog_keeper import CatalogKeeper
from .decision_service import DecisionService
from .no_tool import ask_no_tool
from .one_shot import OneShot
from .recall import Recall
from .request_context import RequestTag, current, enter, leave, serving
from .server_router import ServerRouter
from .statistics import SessionStatistics

T = TypeVar("T")


#: Requests handed over without waiting (one per waiting caller): a burst of this many
#: callers never parks twice; past it callers wait to hand over, so the inbox stays bounded.
INBOX_BUFFER = 1024


@attrs.frozen(kw_only=True)
class StepSelection:
    """The tools to show on one agent step.

    Attributes:
        tool_ids: ids in order, or ``None`` to show every tool.
        query: the text extracted from the conversation and routed on.
        page: 0 for the best tools, 1 for the next page after a step without a tool call,
            2 for every tool after two such steps.
        outcome: as ``Selection.outcome``; ``skipped`` when the conversation has no text.
        reason: why the outcome is not ``applied`` (empty when it is).
        latency_ms: time the step took.
        active_sets: names of the tool sets active on this step (forced, sticky or anchored).
        system_prompts: the active sets' prompts, to append to the host's system prompt.
        routing: the server routing behind this step, when ``selection.route_servers`` is on
            (tools of the servers it dropped are not shown, ``always_active`` ones aside).
        explanations: when asked for (``explain=``), one ``Explanation`` per shown tool,
            then one per asked-about hidden tool; empty otherwise.
        request_id: the id of the ``Engine.prepare_step`` call; the step's events
            (``step.finished``, ``routing.finished``, a ``fail_open``) carry the same.
        no_tool_needed: the engine's decider answered "does this request need any tool?"
            with a confident "no" (``selection.no_tool`` on; asked on a first-page step
            without forced or found tools): only ``always_active`` tools are shown, and
            ``reason`` gives the probability.
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
    explanations: tuple[Explanation, ...] = ()
    request_id: str | None = None
    no_tool_needed: bool = False

    def explanation(self, tool_id: str) -> Explanation | None:
        """The explanation of ``tool_id``, ``None`` when it was not explained."""
        return next((e for e in self.explanations if e.tool_id == tool_id), None)


@attrs.frozen(eq=False)
class PrepareStep:
    """Prepare one step of ``session`` (``None``: a step outside any session); the reply is
    the ``StepSelection`` or the exception that stopped it (a caller's mistake among them).

    ``scope`` belongs to the caller, who cancels it on giving up: the actor runs the step
    inside it, so a step nobody waits for stops where it stands."""

    messages: Messages
    session: str | None
    force: tuple[str, ...]
    release: tuple[str, ...]
    ask: tuple[str, ...] | None  # hidden tools to explain too (``None``: no explanations)
    access: ToolAccess
    scope: trio.CancelScope
    reply: OneShot[StepSelection | Exception]
    tag: RequestTag | None  # the caller's request: the step's events and result carry it


@attrs.frozen(eq=False)
class RouteSession:
    """Route ``query`` among ``servers`` for ``session`` (``Engine.route_servers``): in the
    session's queue, since routing reads and renews its sticky servers."""

    query: str | Sequence[Mapping[str, Any]]
    servers: Sequence[Server] | Catalog
    session: str
    scope: trio.CancelScope
    reply: OneShot[RoutingOutcome | Exception]
    tag: RequestTag | None


StepRequest = PrepareStep | RouteSession


class Steps:
    """The step actor's handle: ``prepare_step``, ``route_session``, ``search_tools`` and
    ``release_sets`` behind the facade; ``run`` is the (supervised) actor itself."""

    def __init__(
        self,
        keeper: CatalogKeeper,
        recall: Recall,
        router: ServerRouter,
        sessions: SessionStore,
        *,
        config: EngineConfig,
        tool_sets: Sequence[ToolSet],
        publish: Callable[[Event], None],
        key: bytes,
        record: Callable[[str, Sequence[str]], None] | None = None,
        decisions: DecisionService | None = None,
    ) -> None:
        self._decisions = decisions  # asked "any tool needed?" when ``selection.no_tool``
        self._keeper = keeper
        self._recall = recall
        self._record = record  # the learning service's ``offer`` with ``record_calls`` on
        self._router = router
        self._sessions = sessions
        # Orders a session's steps across the nodes sharing it: a step takes its place in line
        # when the inbox delivers it, not when its turn in this node's queue comes.
        self._ordered = sessions if isinstance(sessions, OrderedSessionStore) else None
        self._config = config
        self._set_names_known = tuple(s.name for s in tool_sets)
        self._publish = publish
        self._key = key
        self._inbox: trio.MemorySendChannel[StepRequest] | None = None
        #: The running actor's per-session queues (read by ``statistics``; the actor owns them).
        self._queues: dict[str, deque[StepRequest]] = {}
        #: The places in line of the queued requests (an ordered store only).
        self._turns: dict[StepRequest, Turn] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor: read requests in arrival order, queue each behind its session's.

        Each (re)start opens a fresh inbox. It is unbounded so that a caller hands its
        request over without parking twice (once to send, once for the reply): each caller
        has one request in flight, so the backlog is bounded by the callers. On a crash or
        shutdown every request sent, queued or running gets ``None`` as its reply, so no
        caller hangs (it fails open, see ``prepare_step``).
        """
        send, receive = trio.open_memory_channel[StepRequest](INBOX_BUFFER)
        queues: dict[str, deque[StepRequest]] = {}
        self._queues = queues
        self._turns = {}
        try:
            async with trio.open_nursery() as nursery:
                self._inbox = send
                task_status.started()
                async for first in receive:
                    request: StepRequest | None = first
                    while request is not None:
                        try:
                            self._dispatch(request, queues, nursery)
                        except BaseException:
                            # Taken, never queued: its caller must not hang.
                            request.reply.deliver(None)
                            raise
                        # Everything already waiting, without a checkpoint per request: under
                        # load the whole backlog is queued in one pass of the scheduler.
                        try:
                            request = receive.receive_nowait()
                        except trio.WouldBlock:
                            request = None
        finally:
            send.close()  # callers arriving from now on fail open at once
            # Sent but never taken (no checkpoint since the close: nothing more arrives).
            with receive:
                while True:
                    try:
                        receive.receive_nowait().reply.deliver(None)
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break

    def statistics(self) -> SessionStatistics:
        """Sessions the store keeps, and the steps queued or running per session now."""
        return SessionStatistics(
            sessions=len(self._sessions),
            stepping=len(self._queues),
            queued_steps=sum(len(queue) for queue in self._queues.values()),
        )

    def _dispatch(
        self,
        request: StepRequest,
        queues: dict[str, deque[StepRequest]],
        nursery: trio.Nursery,
    ) -> None:
        session = request.session
        if session is None:  # nothing to order it against
            nursery.start_soon(self._serve, request, None)
            return
        if (queue := queues.get(session)) is not None:
            queue.append(request)  # behind the session's earlier requests
        else:
            queues[session] = queue = deque([request])
            nursery.start_soon(self._drain, session, queue, queues)
        if self._ordered is not None:  # in inbox order, no checkpoint before the drain reads it
            self._turns[request] = self._ordered.arrive(session)

    async def _drain(
        self, session: str, queue: deque[StepRequest], queues: dict[str, deque[StepRequest]]
    ) -> None:
        """Serve ``session``'s queue in order, holding the session while anything is queued."""
        try:
            if self._ordered is not None:
                await self._drain_in_turns(queue)
            while queue:
                async with self._sessions.hold(session) as state:
                    while queue:
                        await self._serve(queue[0], state)
                        queue.popleft()
                        if queue:  # a step may finish without yielding: let others run
                            await trio.lowlevel.checkpoint()
                # Requests that came while the store released the session: hold it again.
        finally:
            # No checkpoint between the last look at the queue and this: a request arriving
            # from now on starts a new queue.
            if queues.get(session) is queue:
                del queues[session]
            for request in queue:  # cancelled (shutdown, a crash): nobody will serve these
                request.reply.deliver(None)
                if (turn := self._turns.pop(request, None)) is not None:
                    turn.leave()  # the steps behind it in line go on

    async def _drain_in_turns(self, queue: deque[StepRequest]) -> None:
        """Serve the queue one step per turn: each waits for the steps before it in the
        fleet's line, which may be on other nodes, between this node's own."""
        while queue:
            request = queue[0]
            turn = self._turns[request]
            if request.reply.abandoned:  # gave up while queued: its place goes too
                turn.leave()
            else:
                with serving(request.tag):  # a wait that fails open says so in its name
                    async with turn as state:
                        await self._serve(request, state)
            del self._turns[request]
            queue.popleft()
            if queue:
                await trio.lowlevel.checkpoint()

    async def _serve(self, request: StepRequest, state: SessionState | None) -> None:
        reply = request.reply
        if reply.abandoned:
            return  # the caller gave up while it was queued: it costs nothing
        token = enter(request.tag)  # the caller's request: its events and result carry it
        try:
            with request.scope:
                match request:
                    case PrepareStep():
                        request.reply.deliver(await _attempt(self._prepare(request, state)))
                    case RouteSession():
                        routed = self._router.route(
                            request.query, request.servers, session=request.session, state=state
                        )
                        request.reply.deliver(await _attempt(routed))
        finally:
            leave(token)
            reply.deliver(None)  # stopped before it answered (a no-op once answered)

    async def _ask(
        self, request: StepRequest, reply: OneShot[T | Exception]
    ) -> T | Exception | None:
        """Send ``request`` and wait for its reply; ``None`` when the actor is not running."""
        try:
            if self._inbox is None:
                return None
            try:
                self._inbox.send_nowait(request)  # the common case: no wait to hand over
            except trio.WouldBlock:
                await self._inbox.send(request)  # a burst past the buffer: back-pressure
            return await reply.wait()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return None
        finally:
            reply.abandoned = True
            if not reply.settled:  # gave up: stop the step where it stands
                request.scope.cancel("the caller gave up")

    def set_names(self, names: Iterable[str], field: str) -> tuple[str, ...]:
        """``names`` checked against the engine's tool sets.

        Raises:
            ConfigError: a name is not one of them.
        """
        chosen = id_tuple(names, field)
        known = self._set_names_known
        unknown = [name for name in chosen if name not in known]
        if unknown:
            raise ConfigError(
                f"{field} names unknown tool sets: {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(map(repr, known)) or 'none'}"
            )
        return chosen

    def release_sets(self, session: str, names: Iterable[str]) -> None:
        released = self.set_names(names, "release_sets")
        self._sessions.update_nowait(session, lambda state: state.release(released))

    async def prepare_step(
        self,
        messages: Messages,
        session: str | None,
        force_sets: Iterable[str],
        release_sets: Iterable[str],
        explain: bool | Sequence[str] = False,
        access: ToolAccess = OPEN,
    ) -> StepSelection:
        """One step, through the actor (see ``Engine.prepare_step``).

        **Fail-open:** when the actor is not running (restarting after a crash) or stopped
        before it answered, every tool is shown (``failed_open``).
        """
        force = self.set_names(force_sets, "force_sets")
        release = self.set_names(release_sets, "release_sets")
        ask = explain_ask(explain)
        if ask is not None:
            check_known(ask, self._keeper.snapshot.source, "explain")
        reply = OneShot[StepSelection | Exception]()
        request = PrepareStep(
            messages, session, force, release, ask, access, trio.CancelScope(), reply, current()
        )
        result = await self._ask(request, reply)
        if isinstance(result, Exception):
            raise result
        if result is None:
            return self._unserved(messages)
        return result

    async def route_session(
        self,
        query: str | Sequence[Mapping[str, Any]],
        servers: Sequence[Server] | Catalog,
        session: str,
    ) -> RoutingOutcome:
        """``Engine.route_servers`` for a session: queued with the session's steps.

        **Fail-open:** when the actor is not running, the request is routed without the
        session's memory (no cache, no sticky servers), in the caller's task.
        """
        reply = OneShot[RoutingOutcome | Exception]()
        request = RouteSession(query, servers, session, trio.CancelScope(), reply, current())
        result = await self._ask(request, reply)
        if isinstance(result, Exception):
            raise result
        if result is None:
            return await self._router.route(query, servers, session=None, state=None)
        return result

    async def _prepare(self, request: PrepareStep, state: SessionState | None) -> StepSelection:
        ask, access = request.ask, request.access
        if state is None:
            return await self._step(request.messages, None, None, request.force, ask, access)
        state.release(request.release)
        state.force(request.force)
        return await self._step(request.messages, request.session, state, (), ask, access)

    def _unserved(self, messages: Messages) -> StepSelection:
        reason = "the step service is not running"
        self._publish(FailOpen(operation="prepare_step", what_failed="steps", reason=reason))
        tag = current()
        return StepSelection(
            tool_ids=None,
            query=extract_query(messages),
            page=0,
            outcome=Outcome.FAILED_OPEN,
            reason=reason,
            request_id=tag.request_id if tag is not None else None,
        )

    async def _step(
        self,
        messages: Messages,
        session: str | None,
        state: SessionState | None,
        forced: tuple[str, ...],  # a session's forced sets live in its state
        ask: tuple[str, ...] | None,
        access: ToolAccess,
    ) -> StepSelection:
        started = time.perf_counter()
        defaults = self._config.selection
        turns = read_turns(messages)  # once: reading the conversation is a tenth of a step
        if self._record is not None:
            request, called = calls_since_request(turns)
            if called:
                self._record(request, called)
        query = query_of_turns(turns)
        page = min(idle_steps_of_turns(turns), 2)
        found: tuple[str, ...] = ()  # tools the agent found with search_tools, shown once
        if state is not None:
            state.idle_steps = page
            found, state.activated = state.activated, ()
            forced = state.step_sets()
        snapshot = self._keeper.snapshot
        index, sets = snapshot.index, snapshot.tool_sets
        always = snapshot.served_ids(defaults.always_active)
        routing: RoutingOutcome | None = None
        hidden: frozenset[str] = frozenset()  # tools of the servers routing dropped
        if defaults.route_servers and query.strip():
            # Routing reads the conversation with the same reader (``read_turns``), so every
            # shape a step reads; only its annotation still names the dict shapes.
            conversation = cast("Sequence[Mapping[str, Any]]", messages)
            routing = await self._router.route(
                conversation, index.catalog, session=session, state=state
            )
            hidden = frozenset(routing.excluded_tools) - set(always)
        explain, explained = None, {}
        if ask is not None:
            explain = ExplainRequest(ask=ask, index=index, query=query)
            explained = hidden_before_ranking(
                ask,
                denied=[i for i in ask if not access.permits(i)],
                representative=snapshot.representative,
                routed_out=hidden,
                server_of={i: index.catalog[i].server for i in ask if i in hidden},
                routing_stage=routing.strategy if routing is not None else None,
            )
        step = StepInput(
            query=query,
            page=page,
            forced=forced,
            found=found,
            always=always,
            hidden=hidden,
            sets=sets,
            explain=explain,
            explained=explained,
            access=access,
        )
        pick = step_without_ranking(
            step, index.catalog, all_tools_ceiling=defaults.all_tools_ceiling
        )
        no_tool = False
        if pick is None:
            window = ranking_window(
                step,
                max_tools=defaults.max_tools,
                all_tools_ceiling=defaults.all_tools_ceiling,
                catalog_size=len(index.catalog),
            )
            # No checkpoint of its own: the caller is parked, and the drain yields between
            # a session's steps (``_drain``), so others run and a queued step can be skipped.
            ranking = await self._recall.rank(
                index,
                query,
                window.wanted,
                None,
                warming=not self._keeper.is_ready,
                checkpoint=False,
            )
            pick, activated = ranked_step(step, window, ranking, started)
            if state is not None:
                state.remember(activated, self._config.sessions.sticky_steps)
            if page == 0 and not forced and not found and pick.tool_ids is not None:
                verdict = await ask_no_tool(
                    self._decisions,
                    self._config,
                    query,
                    index.catalog,
                    ranking.tool_ids,
                    access,
                    operation="prepare_step",
                    publish=self._publish,
                    session=session,
                )
                if verdict.no_tool:
                    pick = no_tool_step(pick, always, access, verdict.reason)
                    no_tool = True
        selection = self._finished(pick, sets, started, routing)
        if no_tool:
            selection = attrs.evolve(selection, no_tool_needed=True)
        self._recall.finished()
        self._publish(
            StepFinished(
                request_id=selection.request_id,  # set here: no copy to stamp it on the way
                session=session,
                query_hash=query_hash(query, self._key),
                page=selection.page,
                tool_ids=selection.tool_ids,
                outcome=selection.outcome,
                latency_ms=selection.latency_ms,
                reason=selection.reason,
                query=query if self._config.events.include_queries else None,
                no_tool_needed=selection.no_tool_needed,
            )
        )
        return selection

    @staticmethod
    def _finished(
        pick: StepPick, sets: Sequence[ToolSet], started: float, routing: RoutingOutcome | None
    ) -> StepSelection:
        tag = current()
        return StepSelection(
            **attrs.asdict(pick, recurse=False),
            latency_ms=(time.perf_counter() - started) * 1000.0,
            system_prompts=tuple(system_prompts(sets, pick.active_sets)),
            routing=routing,
            request_id=tag.request_id if tag is not None else None,
        )

    async def search_tools(
        self, arguments: object, session: str | None, k: int, access: ToolAccess = OPEN
    ) -> dict[str, Any]:
        query = read_arguments(arguments)
        index = self._keeper.snapshot.index
        depth = recall_depth(k, access, len(index.catalog))
        ranking = await self._recall.rank(
            index, query, depth, None, warming=not self._keeper.is_ready
        )
        if access.restricts:  # a tool kept out is never found, so never activated
            ranking = ranking.only(access.only(ranking.tool_ids)[:k])
        if session is not None:
            found = ranking.tool_ids
            if session in self._sessions:  # never waits for a step the session is in
                self._sessions.update_nowait(session, lambda state: _activate(state, found))
            else:
                async with self._sessions.hold(session) as state:
                    _activate(state, found)
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


async def _attempt(work: Awaitable[T]) -> T | Exception:
    """``work``'s result, or the exception it raised: the caller's to see, as if it had run
    the work itself (a mistake of its own, mostly)."""
    try:
        return await work
    except Exception as exc:
        return exc


def _activate(state: SessionState, found: tuple[str, ...]) -> None:
    state.activated = tuple(dict.fromkeys((*state.activated, *found)))
