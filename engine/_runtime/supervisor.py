"""Supervision: restart a crashed service with backoff, within a restart budget."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .._core.config import RestartPolicy as RestartPolicy
from .._core.errors import EngineCrashed
from .._core.events import ServiceRestarted

Service = Callable[..., Awaitable[None]]


async def run_supervised(
    name: str,
    service: Service,
    policy: RestartPolicy,
    publish: Callable[[Any], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``service`` (a ``run_*`` taking ``task_status``) and restart it when it crashes.

    Returns when the service returns. ``Cancelled`` and other ``BaseException``s are never
    caught: only ordinary exceptions count as crashes, and not even those once the supervisor
    itself is cancelled (engine shutdown): a service's cleanup may fail as it is torn down,
    and that is not a crash to restart or to spend the budget on.

    Raises:
        EngineCrashed: the service crashed more than ``max_restarts`` times in ``window_s``.
    """
    crashes: deque[float] = deque()
    started = False
    while True:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(service)
                if not started:
                    started = True
                    task_status.started()
            return
        except Exception as exc:  # a crash: restart within the budget
            error = _cause(exc)
        # Cancelled from outside (shutdown)? Then whatever the service raised came from being
        # torn down: let Cancelled propagate instead of counting it.
        await trio.lowlevel.checkpoint_if_cancelled()
        now = trio.current_time()
        crashes.append(now)
        while crashes and now - crashes[0] > policy.window_s:
            crashes.popleft()
        if len(crashes) > policy.max_restarts:
            raise EngineCrashed(
                f"service {name!r} crashed {len(crashes)} times within {policy.window_s} s; "
                f"last error: {type(error).__name__}: {error}"
            ) from error
        publish(
            ServiceRestarted(
                service=name, attempt=len(crashes), error=f"{type(error).__name__}: {error}"[:300]
            )
        )
        await trio.sleep(min(policy.max_backoff_s, policy.backoff_s * 2 ** (len(crashes) - 1)))


def _cause(error: Exception) -> Exception:
    """The one exception inside the service's nursery group (what the service raised), so
    events and errors name it; a group of several stays a group."""
    while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
