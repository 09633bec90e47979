"""The engine's decision service: the engine's decision actor and its events.

One supervised decision actor owns each provider's admission (at most
``config.decision.concurrency`` batches in flight, shared by every caller of the engine:
``decide``, ``try_decide`` and ``route_servers`` alike), so a burst of agents queues in trio
under each caller's deadline and never opens more connections than that.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._core.decide.limits import PROVIDER_CONNECTIONS
from .._core.decide.types import DecisionRequest, DecisionResult, reply_outcome
from .._core.errors import DecisionError, DecisionErrorKind
from .._core.events import DecisionFinished, Event
from .._decisions.actor import DecisionActor
from .._decisions.run import check_caller_state, decide, decide_in_batches

if TYPE_CHECKING:
    from ..providers import Decider


class DecisionService:
    """Runs decisions for the engine through its decision actor (:attr:`actor`, which
    ``open_engine`` runs supervised)."""

    def __init__(
        self, decider: Decider | None, concurrency: int, publish: Callable[[Event], None]
    ) -> None:
        self.decider = decider
        # Never more than a provider's HTTP pool holds: a batch must not queue in the pool.
        self.concurrency = min(concurrency, PROVIDER_CONNECTIONS)
        self._publish = publish
        self.actor = DecisionActor(slots=self.concurrency)

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
            result = await decide(request, provider=decider, actor=self.actor)
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
        check_caller_state(request, decider)  # the caller's mistake is raised, as by decide
        started = time.perf_counter()
        report = await decide_in_batches(
            request, decider, actor=self.actor, window=self.concurrency, deadline_s=deadline_s
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
