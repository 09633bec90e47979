"""A one-shot reply: a result slot and the one task parked waiting for it.

The step actor answers each request through one: cheaper per step than opening a memory
channel, and it tells the actor, without a checkpoint, that the caller stopped waiting.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import outcome
import trio

T = TypeVar("T")


class OneShot(Generic[T]):
    """One reply, from the actor to one parked caller: a result slot and the caller's task.

    ``deliver`` settles it once (later calls are no-ops) and wakes the caller; ``None`` says
    nobody served the request (a crash, shutdown), so the caller fails open. ``abandoned``
    is set once the caller stopped waiting: the actor then skips the request.
    """

    __slots__ = ("_settled", "_value", "_waiter", "abandoned")

    def __init__(self) -> None:
        self._settled = False
        self._value: T | None = None
        self._waiter: trio.lowlevel.Task | None = None
        self.abandoned = False

    @property
    def settled(self) -> bool:
        """Whether ``deliver`` was called (answered, or given up on by the actor)."""
        return self._settled

    def deliver(self, value: T | None) -> None:
        if self._settled:
            return
        self._settled, self._value = True, value
        if self._waiter is not None:
            waiter, self._waiter = self._waiter, None
            trio.lowlevel.reschedule(waiter, outcome.Value(value))

    async def wait(self) -> T | None:
        """The delivered value; a cancellation point like any trio wait."""
        if self._settled:  # served while the caller was still handing the request over
            await trio.lowlevel.checkpoint()
            return self._value
        self._waiter = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiter = None
            self.abandoned = True
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)  # type: ignore[no-any-return]
