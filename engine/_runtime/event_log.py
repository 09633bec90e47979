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
from collections.abc import Callable
from typing import Any

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


def _fail_open(event: FailOpen) -> None:
    logger.info(
        "fail open: %s (%s failed) request=%s session=%s",
        event.operation,
        event.what_failed,
        event.request_id,
        event.session,
    )
    logger.debug("fail open reason, request=%s: %s", event.request_id, event.reason)


def _restarted(event: ServiceRestarted) -> None:
    logger.warning(
        "service %r restarted (attempt %d): %s", event.service, event.attempt, event.error
    )


def _warmed_up(event: WarmupFinished) -> None:
    logger.log(
        logging.WARNING if event.degraded else logging.INFO,
        "warm-up finished: %d of %d tools embedded (%d from cache) in %.1f s%s",
        event.embedded,
        event.tools,
        event.from_cache,
        event.seconds,
        ", degraded: keyword-only" if event.degraded else "",
    )


def _updated(event: CatalogUpdated) -> None:
    logger.info(
        "catalogue version %d: %d added, %d removed, %d replaced",
        event.version,
        len(event.added),
        len(event.removed),
        len(event.replaced),
    )


def _answered(event: SelectionFinished | StepFinished | RoutingFinished) -> None:
    if logger.isEnabledFor(logging.DEBUG):  # the request path: one check when DEBUG is off
        logger.debug(
            "%s %s request=%s session=%s in %.2f ms",
            event.type,
            event.outcome,
            event.request_id,
            event.session,
            event.latency_ms,
        )


#: By the event's class: one lookup per event on the request path.
_WRITERS: dict[type[Any], Callable[[Any], None]] = {
    FailOpen: _fail_open,
    ServiceRestarted: _restarted,
    WarmupFinished: _warmed_up,
    CatalogUpdated: _updated,
    SelectionFinished: _answered,
    StepFinished: _answered,
    RoutingFinished: _answered,
}


def log_event(event: Event) -> None:
    """Write ``event`` to ``toolroute.runtime`` at its level (other events are not logged)."""
    writer = _WRITERS.get(type(event))
    if writer is not None:
        writer(event)
