"""The runtime's log (logger ``toolroute.runtime``): what the engine's events say, in words.

One logger per layer: ``toolroute.runtime`` (the engine's services, written from its
events here), ``toolroute.decisions`` (decision calls and providers' answers),
``toolroute.asyncio`` (the asyncio bridge). Nothing at INFO or above holds request text: a
request appears only as its request id (and session id), never as its query, even when
``events.include_queries`` puts the query in the events; the reasons of a fail-open (which
may quote a provider's error message) go to DEBUG.
"""

from __future__ import annotations

import logging

from .._core.events import (
    CatalogUpdated,
    Event,
    FailOpen,
    RoutingFinished,
    SelectionFinished,
    ServiceRestarted,
    StepFinished,
    WarmupFinished,
)

__all__ = ["log_event", "logger"]

logger = logging.getLogger("toolroute.runtime")


def log_event(event: Event) -> None:
    """Write ``event`` to ``toolroute.runtime`` at its level (cheap when the level is off)."""
    match event:
        case FailOpen():
            logger.info(
                "fail open: %s (%s failed) request=%s session=%s",
                event.operation,
                event.what_failed,
                event.request_id,
                event.session,
            )
            logger.debug("fail open reason, request=%s: %s", event.request_id, event.reason)
        case ServiceRestarted():
            logger.warning(
                "service %r restarted (attempt %d): %s", event.service, event.attempt, event.error
            )
        case WarmupFinished():
            level = logging.WARNING if event.degraded else logging.INFO
            logger.log(
                level,
                "warm-up finished: %d of %d tools embedded (%d from cache) in %.1f s%s",
                event.embedded,
                event.tools,
                event.from_cache,
                event.seconds,
                ", degraded: keyword-only" if event.degraded else "",
            )
        case CatalogUpdated():
            logger.info(
                "catalogue version %d: %d added, %d removed, %d replaced",
                event.version,
                len(event.added),
                len(event.removed),
                len(event.replaced),
            )
        case SelectionFinished() | StepFinished() | RoutingFinished():
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "%s %s request=%s session=%s in %.2f ms",
                    event.type,
                    event.outcome,
                    event.request_id,
                    event.session,
                    event.latency_ms,
                )
        case _:
            pass
