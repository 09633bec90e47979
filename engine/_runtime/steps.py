"""Steps: the async shell around the pure step planner (``toolroute._core.select.steps``).

It holds the session (so steps of one session apply one at a time, in arrival order), asks
the server router and recall, and applies what the planner decided to the session's state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from .._core.catalog.catalog import id_tuple
from .._core.config import EngineConfig
from .._core.errors import ConfigError
from .._core.events import Event, StepFinished, query_hash
from .._core.outcome import Outcome
from .._core.select.access import OPEN, ToolAccess, recall_depth
from .._core.select.conversation import extract_query, idle_steps
from .._core.select.explain import (
    ExplainRequest,
    Explanation,
    check_known,
    explain_ask,
    hidden_before_ranking,
)
from .._core.select.search_tool import HINT, read_arguments
from .._core.select.steps import (
    StepInput,
    StepPick,
    ranked_step,
    ranking_window,
    step_without_ranking,
)
from .._core.select.toolsets import ToolSet, system_prompts
from .._core.stores import SessionState, SessionStore
from .._routing.pipeline import RoutingOutcome
from .catalog_keeper import CatalogKeeper
from .recall import Recall
from .server_router import ServerRouter

#: What a step reads: the conversation as the agent passes it around.
Messages = Sequence[Mapping[str, Any]]


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

    def explanation(self, tool_id: str) -> Explanation | None:
        """The explanation of ``tool_id``, ``None`` when it was not explained."""
        return next((e for e in self.explanations if e.tool_id == tool_id), None)


class Steps:
    """``prepare_step``, ``search_tools`` and ``release_sets`` behind the facade."""

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
    ) -> None:
        self._keeper = keeper
        self._recall = recall
        self._router = router
        self._sessions = sessions
        self._config = config
        self._set_names_known = tuple(s.name for s in tool_sets)
        self._publish = publish
        self._key = key

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
        force = self.set_names(force_sets, "force_sets")
        release = self.set_names(release_sets, "release_sets")
        ask = explain_ask(explain)
        if ask is not None:
            check_known(ask, self._keeper.snapshot.source, "explain")
        if session is None:
            return await self._step(messages, None, None, force, ask, access)
        async with self._sessions.hold(session) as state:
            state.release(release)
            state.force(force)
            return await self._step(messages, session, state, (), ask, access)

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
        query = extract_query(messages)
        page = min(idle_steps(messages), 2)
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
            routing = await self._router.route(
                messages, index.catalog, session=session, state=state
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
        if pick is None:
            window = ranking_window(
                step,
                max_tools=defaults.max_tools,
                all_tools_ceiling=defaults.all_tools_ceiling,
                catalog_size=len(index.catalog),
            )
            ranking = await self._recall.rank(
                index, query, window.wanted, None, warming=not self._keeper.is_ready
            )
            pick, activated = ranked_step(step, window, ranking, started)
            if state is not None:
                state.remember(activated, self._config.sessions.sticky_steps)
        selection = self._finished(pick, sets, started, routing)
        self._publish(
            StepFinished(
                session=session,
                query_hash=query_hash(query, self._key),
                page=selection.page,
                tool_ids=selection.tool_ids,
                outcome=selection.outcome,
                latency_ms=selection.latency_ms,
                reason=selection.reason,
                query=query if self._config.events.include_queries else None,
            )
        )
        return selection

    @staticmethod
    def _finished(
        pick: StepPick, sets: Sequence[ToolSet], started: float, routing: RoutingOutcome | None
    ) -> StepSelection:
        return StepSelection(
            **attrs.asdict(pick, recurse=False),
            latency_ms=(time.perf_counter() - started) * 1000.0,
            system_prompts=tuple(system_prompts(sets, pick.active_sets)),
            routing=routing,
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


def _activate(state: SessionState, found: tuple[str, ...]) -> None:
    state.activated = tuple(dict.fromkeys((*state.activated, *found)))
