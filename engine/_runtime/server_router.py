"""Server routing for the engine: ``route_servers`` with the engine's providers, a
per-session routing cache and sticky servers, and events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core.catalog.catalog import Catalog, Server
from .._core.config import EngineConfig
from .._core.events import Event, FailOpen, RoutingFinished, query_hash
from .._core.outcome import Outcome
from .._core.routing.usage import SimilarUses
from .._core.stores import RoutingCache, SessionState, SessionStore
from .._routing.pipeline import RoutingOutcome, route_servers_via, routing_query
from .decision_service import DecisionService
from .request_context import stamped

if TYPE_CHECKING:
    from ..providers import Embedder, Generator

#: ``Learning.similar_uses``: (request, servers, deadline) → what similar requests used.
SimilarUsesOf = Callable[[str, Sequence[Server], float], Awaitable[SimilarUses | None]]


class ServerRouter:
    """``route_servers`` with the engine's providers, a per-session cache and stickiness.

    The cache (``routing_session.cache``) keys on the session and the routing query and
    is used only with a session id, as a query alone says nothing about which
    conversation it belongs to. Sticky servers (``routing_session.sticky_turns``) were
    selected on one of the session's last N routings; they are treated as always-include
    (never asked, never dropped), so a follow-up turn keeps the servers just in use.
    """

    def __init__(
        self,
        config: EngineConfig,
        decisions: DecisionService,
        generator: Generator | None,
        embedder: Callable[[], Embedder | None],
        publish: Callable[[Event], None],
        key: bytes,
        sessions: SessionStore,
        cache: RoutingCache[object],
        clock: Callable[[], float] = trio.current_time,
        similar_uses: SimilarUsesOf | None = None,
    ) -> None:
        self._config = config
        self._decisions = decisions
        self._generator = generator
        self._embedder = embedder
        self._publish = publish
        self._key = key
        self._sessions = sessions
        self._cache = cache
        self._clock = clock
        self._similar_uses = similar_uses

    async def route_servers(
        self,
        query: str | Sequence[Mapping[str, Any]],
        servers: Sequence[Server] | Catalog,
        session: str | None,
    ) -> RoutingOutcome:
        """``route`` for ``Engine.route_servers``: a session is held while it routes."""
        if session is None:
            return await self.route(query, servers, session=None, state=None)
        async with self._sessions.hold(session) as state:
            return await self.route(query, servers, session=session, state=state)

    async def route(
        self,
        query: str | Sequence[Mapping[str, Any]],
        servers: Sequence[Server] | Catalog,
        *,
        session: str | None,
        state: SessionState | None,
    ) -> RoutingOutcome:
        settings = self._config.routing
        memory = self._config.routing_session
        text = routing_query(query, config=settings)
        cache_key = (session, text) if session is not None and memory.cache else None
        cached = self._cache.get(cache_key, self._clock()) if cache_key is not None else None
        if isinstance(cached, RoutingOutcome):
            routing = attrs.evolve(cached, cache_hit=True, latency_ms=0.0)
        else:
            sticky = tuple(state.sticky_servers) if state is not None else ()
            listed = servers.servers if isinstance(servers, Catalog) else servers
            known = {s.id for s in listed}
            similar = None
            # Only a decider that reads it is told what similar learned requests used (within
            # ``embed_s``: the request's one extra embedding).
            reads = getattr(self._decisions.decider, "reads_similar_uses", False)
            if self._similar_uses is not None and reads and text.strip():
                similar = await self._similar_uses(text, listed, self._config.deadlines.embed_s)
            routing = await route_servers_via(
                self._decisions.actor,
                text,
                servers,
                decider=self._decisions.decider,
                generator=self._generator,
                embedder=self._embedder() if settings.embedding else None,
                config=attrs.evolve(
                    settings,
                    always_include=tuple(
                        dict.fromkeys(
                            (*settings.always_include, *(s for s in sticky if s in known))
                        )
                    ),
                ),
                window=self._decisions.concurrency,
                similar=similar,
            )
            if cache_key is not None and routing.outcome in (Outcome.APPLIED, Outcome.DEGRADED):
                self._cache.put(cache_key, routing, self._clock())
        if state is not None:
            # Only what the router itself kept renews stickiness; a server kept because it
            # was sticky (or on failure) must be allowed to expire.
            judged = (
                routing.outcome in (Outcome.APPLIED, Outcome.DEGRADED) and not routing.cache_hit
            )
            held = {*settings.always_include, *state.sticky_servers}
            fresh = [s for s in routing.selected if s not in held] if judged else []
            state.remember_servers(fresh, memory.sticky_turns)
        routing = stamped(routing)
        self._announce(text, routing)
        return routing

    def _announce(self, text: str, routing: RoutingOutcome) -> None:
        include = self._config.events.include_queries
        self._publish(
            RoutingFinished(
                query_hash=query_hash(text, self._key),
                query=text if include else None,
                kept=routing.selected,
                excluded=routing.excluded,
                stage=routing.strategy,
                outcome=routing.outcome,
                latency_ms=routing.latency_ms,
                reason=routing.reason,
            )
        )
        if routing.outcome is Outcome.FAILED_OPEN:
            self._publish(
                FailOpen(
                    operation="route_servers",
                    what_failed=routing.strategy,
                    reason=routing.reason,
                )
            )
