"""Admission to one decision provider, as bookkeeping with no I/O.

The decision actor asks :class:`Admission` what to start whenever something changed (a job
arrived, a batch finished); it answers with the batches to start and the jobs to drop, and
the actor carries that out. Every step costs O(1) per batch started or job dropped, however
long the queue: a job waits in the queue once (not once per batch), and a job that cannot
start now is not in the queue at all.

**Order.** Jobs are served round-robin in arrival order: a job that starts a batch and still
has batches to start joins the back of the queue, as a ``trio.CapacityLimiter`` shared by
sliding windows would serve them. Batches of one job start in question order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import attrs

T = TypeVar("T")


@attrs.define(eq=False)
class Ticket(Generic[T]):
    """One job's place in admission: its batches, its window and its deadline.

    Attributes:
        job: what the actor knows about the job (opaque here).
        batches: batches the job has.
        window: batches of this job in flight at once.
        deadline: trio time past which none of its batches may start.
        started: batches started (the next one to start is ``started``).
        running: batches started and not yet finished.
        closed: answered or dropped; nothing of it starts any more.
    """

    job: T
    batches: int
    window: int
    deadline: float
    started: int = 0
    running: int = 0
    closed: bool = False
    queued: bool = False

    @property
    def wants_slot(self) -> bool:
        return not self.closed and self.started < self.batches and self.running < self.window

    @property
    def finished(self) -> bool:
        """Every batch started has finished and none is left to start."""
        return self.running == 0 and (self.closed or self.started == self.batches)


@attrs.frozen
class Start(Generic[T]):
    """Start batch ``index`` of ``ticket``'s job."""

    ticket: Ticket[T]
    index: int


@attrs.frozen
class Drop(Generic[T]):
    """``ticket``'s job cannot start anything more: its caller has gone or its deadline passed."""

    ticket: Ticket[T]
    reason: str


class Admission(Generic[T]):
    """One provider's admission: at most ``slots`` batches in flight, a queue of jobs."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots!r}")
        self.slots = slots
        self.busy = 0
        self._queue: deque[Ticket[T]] = deque()

    @property
    def idle(self) -> bool:
        """Nothing in flight and nobody waiting: the admission can be forgotten."""
        return self.busy == 0 and not self._queue

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def enqueue(self, ticket: Ticket[T]) -> None:
        """Queue ``ticket`` if it has a batch to start and is not queued yet."""
        if ticket.wants_slot and not ticket.queued:
            ticket.queued = True
            self._queue.append(ticket)

    def plan(self, now: float, caller_present: Callable[[T], bool]) -> list[Start[T] | Drop[T]]:
        """What to do now: batches to start while slots are free, jobs found dead on the way.

        A job whose deadline has passed or whose caller has gone is dropped when it comes up,
        before anything of it starts; its batches already running are the actor's to cancel.
        """
        actions: list[Start[T] | Drop[T]] = []
        while self.busy < self.slots and self._queue:
            ticket = self._queue.popleft()
            ticket.queued = False
            if not ticket.wants_slot:
                continue  # closed, or its window filled while it waited
            if now >= ticket.deadline:
                ticket.closed = True
                actions.append(Drop(ticket, "deadline"))
                continue
            if not caller_present(ticket.job):
                ticket.closed = True
                actions.append(Drop(ticket, "caller gone"))
                continue
            actions.append(Start(ticket, ticket.started))
            ticket.started += 1
            ticket.running += 1
            self.busy += 1
            self.enqueue(ticket)  # to the back: round-robin between jobs
        return actions

    def finish(self, ticket: Ticket[T]) -> None:
        """One of ``ticket``'s batches ended (answered, failed or cancelled)."""
        if ticket.running < 1 or self.busy < 1:
            raise ValueError("finish() without a batch in flight")
        ticket.running -= 1
        self.busy -= 1
        self.enqueue(ticket)

    def close(self, ticket: Ticket[T]) -> None:
        """``ticket``'s job was answered: nothing more of it starts (it leaves the queue lazily)."""
        ticket.closed = True
