"""The engine's decision service and its server routing with cache and stickiness.

One ``trio.CapacityLimiter`` per decision provider bounds its batches in flight, shared
by every caller of the engine: ``decide``, ``try_decide`` and ``route_servers`` alike,
so a burst of agents cannot open more connections than the provider's concurrency.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core.catalog import Catalog, Server
from .._core.config import EngineConfig
from .._core.decision import DecisionRequest, DecisionResult, reply_outcome
from .._core.errors import DecisionError, DecisionErrorKind
from .._core.events import DecisionFinished, Event, FailOpen, RoutingFinished, query_hash
from .._core.outcome import Outcome
from .._decisions.run import decide, decide_in_batches
from .._routing.pipeline import RoutingOutcome, route_servers, routing_query
from .._stores.sessions import SessionState

if TYPE_CHECKING:
    from ..providers import Decider, Embedder, Generator


class DecisionService:
    """Runs decisions for the engine under each provider's shared concurrency limit."""

    def __init__(
        self, decider: Decider | None, concurrency: int, publish: Callable[[Event], None]
    ) -> None:
        self.decider = decider
        self._concurrency = concurrency
        self._publish = publish
        self._limiters: dict[int, tuple[Decider, trio.CapacityLimiter]] = {}

    def limiter(self, decider: Decider) -> trio.CapacityLimiter:
        """The limit shared by every caller of ``decider`` (kept alive with it)."""
        entry = self._limiters.get(id(decider))
        if entry is None:
            entry = self._limiters[id(decider)] = (
                decider,
                trio.CapacityLimiter(self._concurrency),
            )
        return entry[1]

    def _chosen(self, provider: Decider | None) -> Decider | None:
        return provider if provider is not None else self.decider

    async def decide(
        self, request: DecisionRequest, provider: Decider | None = None
    ) -> DecisionResult:
        decider = self._chosen(provider)
        if decider is None:
            raise DecisionError(
                DecisionErrorKind.INVALID_REQUEST,
                "This engine has no decision provider; pass decider= to open_engine.",
            )
        started = time.perf_counter()
        try:
            async with self.limiter(decider):
                result = await decide(request, provider=decider)
        except DecisionError as exc:
            self._finished(decider, request, None, 1, started, f"{exc.kind}: {exc}")
            raise
        self._finished(decider, request, result, 1, started, "")
        return result

    async def try_decide(
        self,
        request: DecisionRequest,
        provider: Decider | None = None,
        deadline_s: float | None = None,
    ) -> DecisionResult | None:
        decider = self._chosen(provider)
        if decider is None or not request.questions:
            return None
        started = time.perf_counter()
        report = await decide_in_batches(
            request, decider, limiter=self.limiter(decider), deadline_s=deadline_s
        )
        self._finished(decider, request, report.result, report.batches, started, report.reason)
        return report.result

    def _finished(
        self,
        decider: Decider,
        request: DecisionRequest,
        result: DecisionResult | None,
        batches: int,
        started: float,
        reason: str,
    ) -> None:
        answered = len(result.answers) if result else 0
        outcome = reply_outcome(len(request.questions), answered)  # the rule routing uses too
        self._publish(
            DecisionFinished(
                provider=decider.name,
                questions=len(request.questions),
                answered=answered,
                batches=batches,
                outcome=outcome,
                latency_ms=(time.perf_counter() - started) * 1000.0,
                reason=reason[:500],
            )
        )


@attrs.define
class _Cached:
    outcome: RoutingOutcome
    expires: float


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
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._config = config
        self._decisions = decisions
        self._generator = generator
        self._embedder = embedder
        self._publish = publish
        self._key = key
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str], _Cached] = OrderedDict()

    async def route(
        self,
        query: str | Sequence[Mapping[str, Any]],
        servers: Sequence[Server] | Catalog,
        *,
        session: str | None,
        state: SessionState | None,
    ) -> RoutingOutcome:
        routing = self._config.routing
        memory = self._config.routing_session
        text = routing_query(query, config=routing)
        cache_key = (session, text) if session is not None and memory.cache else None
        cached = self._lookup(cache_key)
        if cached is not None:
            outcome = attrs.evolve(cached, cache_hit=True, latency_ms=0.0)
        else:
            sticky = tuple(state.sticky_servers) if state is not None else ()
            known = {s.id for s in (servers.servers if isinstance(servers, Catalog) else servers)}
            decider = self._decisions.decider
            outcome = await route_servers(
                text,
                servers,
                decider=decider,
                generator=self._generator,
                embedder=self._embedder() if routing.embedding else None,
                config=attrs.evolve(
                    routing,
                    always_include=tuple(
                        dict.fromkeys((*routing.always_include, *(s for s in sticky if s in known)))
                    ),
                ),
                limiter=self._decisions.limiter(decider) if decider is not None else None,
            )
            if cache_key is not None and outcome.outcome in (Outcome.APPLIED, Outcome.DEGRADED):
                self._store(cache_key, outcome)
        if state is not None:
            # Only what the router itself kept renews stickiness; a server kept because it
            # was sticky (or on failure) must be allowed to expire.
            judged = (
                outcome.outcome in (Outcome.APPLIED, Outcome.DEGRADED) and not outcome.cache_hit
            )
            held = {*routing.always_include, *state.sticky_servers}
            fresh = [s for s in outcome.selected if s not in held] if judged else []
            state.remember_servers(fresh, memory.sticky_turns)
        self._announce(text, outcome)
        return outcome

    def _lookup(self, key: tuple[str, str] | None) -> RoutingOutcome | None:
        if key is None:
            return None
        entry = self._cache.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return entry.outcome

    def _store(self, key: tuple[str, str], outcome: RoutingOutcome) -> None:
        memory = self._config.routing_session
        self._cache[key] = _Cached(outcome, self._clock() + memory.cache_ttl_s)
        self._cache.move_to_end(key)
        while len(self._cache) > memory.cache_entries:
            self._cache.popitem(last=False)

    def _announce(self, text: str, outcome: RoutingOutcome) -> None:
        include = self._config.events.include_queries
        self._publish(
            RoutingFinished(
                query_hash=query_hash(text, self._key),
                query=text if include else None,
                kept=outcome.selected,
                excluded=outcome.excluded,
                stage=outcome.strategy,
                outcome=outcome.outcome,
                latency_ms=outcome.latency_ms,
                reason=outcome.reason,
            )
        )
        if outcome.outcome is Outcome.FAILED_OPEN:
            self._publish(
                FailOpen(
                    operation="route_servers",
                    what_failed=outcome.strategy,
                    reason=outcome.reason,
                )
            )
