"""The engine's decision service.

One ``trio.CapacityLimiter`` per decision provider bounds its batches in flight, shared
by every caller of the engine: ``decide``, ``try_decide`` and ``route_servers`` alike,
so a burst of agents cannot open more connections than the provider's concurrency.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from .._core.decide.types import DecisionRequest, DecisionResult, reply_outcome
from .._core.errors import DecisionError, DecisionErrorKind
from .._core.events import DecisionFinished, Event
from .._decisions.run import decide, decide_in_batches

if TYPE_CHECKING:
    from ..providers import Decider


class DecisionService:
    """Runs decisions for the engine under each provider's shared concurrency limit."""

    def __init__(
        self, decider: Decider | None, concurrency: int, publish: Callable[[Event], None]
    ) -> None:
        self.decider = decider
        self._concurrency = concurrency
        self._publish = publish
        # Keyed by identity and held weakly: a host that passes a provider per call (one per
        # tenant's key, say) must not keep every provider alive for the engine's lifetime.
        self._limiters: dict[int, tuple[Callable[[], object], trio.CapacityLimiter]] = {}

    def limiter(self, decider: Decider) -> trio.CapacityLimiter:
        """The limit shared by every caller of ``decider``, for as long as it lives."""
        key = id(decider)
        entry = self._limiters.get(key)
        if entry is not None and entry[0]() is decider:
            return entry[1]
        limiter = trio.CapacityLimiter(self._concurrency)

        def forget(_: object) -> None:
            self._limiters.pop(key, None)

        def kept() -> object:
            return decider

        held: Callable[[], object]
        try:
            held = weakref.ref(decider, forget)
        except TypeError:  # not weakly referenceable: keep it, as its limit must be kept
            held = kept
        self._limiters[key] = (held, limiter)
        return limiter

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
