"""The decision actor of the stateless entry points: one per trio run, started on first use.

``toolroute.route_servers``, ``decide`` and ``try_decide`` called outside an engine share this
actor, so that 200 concurrent calls queue for a provider in trio, under each caller's
deadline, and never inside the provider's HTTP pool: it admits per provider as many batches
as that pool holds (:data:`~toolroute._core.decide.limits.PROVIDER_CONNECTIONS`).

It runs as a trio system task: it lives as long as the run, is cancelled when the run's main
task ends, and must never raise (an exception in a system task ends the run), so it restarts
itself after a crash instead; a crash answers the jobs then open with no answer (fail-open).
"""

from __future__ import annotations

import logging

import trio

from .._core.decide.limits import PROVIDER_CONNECTIONS
from .actor import DecisionActor

logger = logging.getLogger("toolroute.decisions")

_SHARED: trio.lowlevel.RunVar[DecisionActor] = trio.lowlevel.RunVar("toolroute_decision_actor")

#: Longest pause between two restarts after repeated crashes.
_MAX_BACKOFF_S = 1.0


def shared_actor() -> DecisionActor:
    """This trio run's stateless decision actor, started if it is not running yet."""
    try:
        return _SHARED.get()
    except LookupError:
        pass
    actor = DecisionActor(slots=PROVIDER_CONNECTIONS)
    _SHARED.set(actor)
    trio.lowlevel.spawn_system_task(_serve, actor, name="toolroute decision actor")
    return actor


async def _serve(actor: DecisionActor) -> None:
    """Run ``actor`` until the run ends, restarting it after a crash."""
    crashes = 0
    while True:
        try:
            await actor.run()
            return
        except Exception:
            crashes += 1
            logger.exception("the stateless decision actor crashed (%d); restarting", crashes)
        await trio.sleep(min(_MAX_BACKOFF_S, 0.01 * 2**crashes))
