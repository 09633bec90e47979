"""The decision actor: one task owns each provider's admission queue and concurrency.

Callers send a :class:`Decide` job (the batches of one call, its window, its deadline and a
one-shot reply channel) and wait for the reply under their own cancel scope. The actor never
awaits I/O in its loop: every batch runs as a child in the actor's nursery, under the job's
deadline, and reports back as a message; so does the actor's one alarm, set for the earliest
deadline. What to start next is :class:`~.admission.Admission`'s pure bookkeeping.

**Channel ends.** The handle (:class:`DecisionActor`) owns the send end of the inbox that
callers use; the running actor owns the receive end and a clone of the send end for its own
children. Each reply channel's send end travels in the job and is closed by the actor once it
has answered (``send_nowait``), or when it stops without answering, so no caller waits for a
reply that will not come (it sees ``EndOfChannel``).

**Deadlines.** A job's deadline is the earlier of the one it was given and its caller's own
effective deadline, so a job never waits in the queue past the moment its caller stops
waiting. When it passes, the actor cancels the job's running batches and answers with what
came back in time; a job still queued is dropped without starting.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

import attrs
import trio

from .._core.decide.types import DecisionRequest, DecisionResult
from .._core.errors import DecisionError, DecisionErrorKind
from .admission import Admission, Start, Ticket

if TYPE_CHECKING:
    from .._core.protocols import Decider

#: What one batch came to: its result, its error, or ``None`` (late, or never started).
BatchOutcome: TypeAlias = "DecisionResult | DecisionError | None"

#: Jobs and reports the inbox holds before senders wait (back-pressure, not a queue).
INBOX_BUFFER = 64


@attrs.frozen(eq=False)
class Decide:
    """Run ``requests`` (the batches of one call) on ``provider``; answer once on ``reply``.

    Attributes:
        provider: the decision provider.
        requests: the batches, each within the provider's caps, in question order.
        window: batches of this job in flight at once.
        deadline: trio time by which the job is answered, whatever came back.
        limiter: a caller's own limit, held by each batch while it runs (on top of admission).
        reply: the caller's one-shot reply channel.
    """

    provider: Decider
    requests: tuple[DecisionRequest, ...]
    window: int
    deadline: float
    limiter: trio.CapacityLimiter | None
    reply: trio.MemorySendChannel[Answered]


@attrs.frozen
class Answered:
    """The reply to a :class:`Decide`: one outcome per batch, in order.

    Attributes:
        outcomes: each batch's result or error; ``None`` for a batch that was late or never
            started.
        late: the job's deadline passed before every batch had ended.
        dropped: why the job was dropped before all of it started (empty when it was not).
    """

    outcomes: tuple[BatchOutcome, ...]
    late: bool = False
    dropped: str = ""


@attrs.frozen(eq=False)
class BatchEnded:
    """A batch child reports back."""

    job: _Job
    index: int
    outcome: BatchOutcome


@attrs.frozen(eq=False)
class Expire:
    """The actor's alarm rang: answer every job whose deadline has passed, then set
    ``handled`` (the alarm is set again for the next deadline only then)."""

    handled: trio.Event


Message: TypeAlias = "Decide | BatchEnded | Expire"


@attrs.define(eq=False)
class _Job:
    """The actor's private state of one job."""

    order: Decide
    ticket: Ticket[_Job]
    outcomes: list[BatchOutcome]
    number: int
    scopes: dict[int, trio.CancelScope] = attrs.field(factory=dict)
    answered: bool = False
    #: Set once the last batch started has begun; the next one waits for it.
    last_turn: trio.Event | None = None


async def call_provider(request: DecisionRequest, provider: Decider) -> DecisionResult:
    """One strict provider call; a custom provider's stray exception becomes ``server``."""
    try:
        return await provider.decide(request)
    except DecisionError:
        raise
    except Exception as exc:
        # A custom decider's bug must not escape as something callers do not expect.
        raise DecisionError(
            DecisionErrorKind.SERVER,
            f"{getattr(provider, 'name', type(provider).__name__)} failed:"
            f" {type(exc).__name__}: {exc}",
        ) from exc


@attrs.frozen(kw_only=True)
class DecisionStatistics:
    """Decision jobs (one ``try_decide``, ``decide`` or routing stage each) of this engine.

    Attributes:
        submitted: jobs sent to the decision actor since the engine opened.
        in_flight: jobs not answered yet (queued for admission or running).
        unanswered: jobs that ended with no reply because the actor stopped (they failed open).
    """

    submitted: int
    in_flight: int
    unanswered: int


class DecisionActor:
    """Handle on a decision actor; :meth:`run` is the (restartable) actor itself.

    Args:
        slots: batches in flight per provider, shared by every job of this actor.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots!r}")
        self.slots = slots
        self._submitted = self._in_flight = self._unanswered = 0
        # One inbox for the handle's lifetime: jobs sent while the actor (re)starts wait in it.
        self._inbox, self._receive = trio.open_memory_channel[Message](INBOX_BUFFER)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve jobs until cancelled; a crash answers every open job with ``EndOfChannel``."""
        with self._inbox.clone() as internal:
            await run_decision_actor(self._receive, internal, self.slots, task_status=task_status)

    async def submit(
        self,
        provider: Decider,
        requests: Sequence[DecisionRequest],
        *,
        window: int,
        deadline: float = math.inf,
        limiter: trio.CapacityLimiter | None = None,
    ) -> Answered | None:
        """Run ``requests`` through the provider's admission; ``None`` if the actor stopped.

        **Cancellation:** the caller's cancel scope cancels the wait; the job's deadline is
        at the latest the caller's effective deadline, so its batches stop then too.
        """
        deadline = min(deadline, trio.current_effective_deadline())
        self._submitted += 1
        self._in_flight += 1
        try:
            return await self._submit(provider, requests, window, deadline, limiter)
        finally:
            self._in_flight -= 1

    def statistics(self) -> DecisionStatistics:
        """Jobs submitted, in flight and unanswered (the actor stopped) so far."""
        return DecisionStatistics(
            submitted=self._submitted, in_flight=self._in_flight, unanswered=self._unanswered
        )

    async def _submit(
        self,
        provider: Decider,
        requests: Sequence[DecisionRequest],
        window: int,
        deadline: float,
        limiter: trio.CapacityLimiter | None,
    ) -> Answered | None:
        reply, answer = trio.open_memory_channel[Answered](1)
        order = Decide(provider, tuple(requests), max(1, window), deadline, limiter, reply)
        with answer:
            try:
                await self._inbox.send(order)
            except BaseException:
                reply.close()  # never handed over: it is still ours to close
                raise
            try:
                return await answer.receive()
            except trio.EndOfChannel:
                self._unanswered += 1
                return None


async def run_decision_actor(
    inbox: trio.MemoryReceiveChannel[Message],
    internal: trio.MemorySendChannel[Message],
    slots: int,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The actor loop: admit, start, collect and answer; ``internal`` is its children's way in.

    Admission per provider lives only while the provider has jobs, so a host passing a new
    provider per call (one per tenant's key) does not keep any of them alive.
    """
    async with trio.open_nursery() as nursery:
        state = _State(slots, nursery, internal)
        nursery.start_soon(_ring, state, internal)
        try:
            task_status.started()
            while True:
                message = await inbox.receive()
                state.apply(message)
                # Not held across the wait: a finished job must not keep its provider alive.
                del message
        finally:
            state.abandon()


@attrs.define(eq=False)
class _State:
    """Everything the actor owns, changed only by its loop.

    Deadlines are kept in one heap with one alarm (a cancel scope whose deadline is the
    earliest), not a timer task per job: at 200-way, the moment the deadline passes is the
    moment the loop is busiest, and one wake-up answers every job that is due.
    """

    slots: int
    nursery: trio.Nursery
    internal: trio.MemorySendChannel[Message]
    admissions: dict[int, Admission[_Job]] = attrs.field(factory=dict)
    jobs: set[_Job] = attrs.field(factory=set)
    deadlines: list[tuple[float, int]] = attrs.field(factory=list)
    #: Jobs with a deadline not answered yet, by number (heap entries of others are stale).
    timed: dict[int, _Job] = attrs.field(factory=dict)
    alarm: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    numbers: itertools.count[int] = attrs.field(factory=itertools.count)

    def apply(self, message: Message) -> None:
        """One message: update the jobs it concerns, then start what their providers can."""
        match message:
            case Decide():
                self._advance(self._accept(message))
            case BatchEnded(job=job, index=index, outcome=outcome):
                job.scopes.pop(index, None)
                if not job.answered:
                    job.outcomes[index] = outcome
                self._admission(job).finish(job.ticket)
                if not job.answered and job.ticket.finished:
                    self._answer(job)
                self._advance(job)
            case Expire(handled=handled):
                for job in self._due(trio.current_time()):
                    self._answer(job, late=True)
                    self._advance(job)
                handled.set()

    def next_deadline(self) -> float:
        while self.deadlines and self.deadlines[0][1] not in self.timed:
            heapq.heappop(self.deadlines)  # answered before its deadline
        return self.deadlines[0][0] if self.deadlines else math.inf

    def abandon(self) -> None:
        """The actor is stopping: every caller still waiting sees ``EndOfChannel``."""
        for job in self.jobs:
            job.order.reply.close()
        self.jobs.clear()
        self.timed.clear()

    def _due(self, now: float) -> list[_Job]:
        due: list[_Job] = []
        while self.deadlines and self.deadlines[0][0] <= now:
            job = self.timed.pop(heapq.heappop(self.deadlines)[1], None)
            if job is not None and not job.answered:
                due.append(job)
        return due

    def _accept(self, order: Decide) -> _Job:
        ticket: Ticket[_Job] = Ticket(
            None,  # type: ignore[arg-type]  # set below: job and ticket point at each other
            batches=len(order.requests),
            window=order.window,
            deadline=order.deadline,
        )
        job = _Job(order, ticket, [None] * len(order.requests), next(self.numbers))
        ticket.job = job
        self.jobs.add(job)
        admission = self.admissions.setdefault(id(order.provider), Admission(self.slots))
        if not order.requests:
            self._answer(job)
            return job
        admission.enqueue(ticket)
        if math.isfinite(order.deadline):
            self.timed[job.number] = job
            heapq.heappush(self.deadlines, (order.deadline, job.number))
            if order.deadline < self.alarm.deadline:
                self.alarm.deadline = order.deadline
        return job

    def _admission(self, job: _Job) -> Admission[_Job]:
        return self.admissions[id(job.order.provider)]

    def _advance(self, job: _Job) -> None:
        """Start what ``job``'s provider has room for; forget what is over."""
        key = id(job.order.provider)
        admission = self.admissions.get(key)
        if admission is None:
            return  # a late report of a job answered and forgotten already
        for action in admission.plan(trio.current_time(), _caller_present):
            if isinstance(action, Start):
                self._start(action.ticket.job, action.index)
            elif not action.ticket.job.answered:
                self._answer(action.ticket.job, dropped=action.reason)
        if job.answered and job.ticket.finished:
            self.jobs.discard(job)
        if admission.idle:
            del self.admissions[key]

    def _start(self, job: _Job, index: int) -> None:
        # Created here, not in the child, so that only the loop ever touches job state.
        scope = trio.CancelScope(deadline=job.order.deadline)
        job.scopes[index] = scope
        previous, job.last_turn = job.last_turn, trio.Event()
        self.nursery.start_soon(_run_batch, job, index, scope, previous, job.last_turn, self.internal)

    def _answer(self, job: _Job, *, late: bool = False, dropped: str = "") -> None:
        """Answer ``job`` once with what it has; whatever of it still runs is cancelled."""
        job.answered = True
        # A batch cut off by the deadline may report before the alarm rings.
        late = late or trio.current_time() >= job.order.deadline
        self.timed.pop(job.number, None)
        self._admission(job).close(job.ticket)
        for scope in job.scopes.values():
            scope.cancel()
        reply = job.order.reply
        # BrokenResourceError: the caller gave up; there is nobody to tell.
        with reply, contextlib.suppress(trio.BrokenResourceError):
            reply.send_nowait(Answered(tuple(job.outcomes), late=late, dropped=dropped))
        if job.ticket.finished:
            self.jobs.discard(job)


def _caller_present(job: _Job) -> bool:
    return job.order.reply.statistics().open_receive_channels > 0


async def _run_batch(
    job: _Job,
    index: int,
    scope: trio.CancelScope,
    previous: trio.Event | None,
    turn: trio.Event,
    internal: trio.MemorySendChannel[Message],
) -> None:
    """One batch under the job's deadline; it reports back whatever happened.

    A job's batches reach the provider in question order (trio runs tasks started together
    in either order): each waits until the one started before it has begun."""
    order = job.order
    outcome: BatchOutcome = None
    with scope:
        try:
            if previous is not None:
                await previous.wait()
        finally:
            turn.set()
        try:
            if order.limiter is None:
                outcome = await call_provider(order.requests[index], order.provider)
            else:
                async with order.limiter:
                    outcome = await call_provider(order.requests[index], order.provider)
        except DecisionError as exc:
            outcome = exc
    await internal.send(BatchEnded(job, index, outcome))


async def _ring(state: _State, internal: trio.MemorySendChannel[Message]) -> None:
    """The alarm: sleeps until the earliest deadline (the actor moves it earlier as jobs
    arrive), asks the actor to answer what is due, and waits until it has."""
    while True:
        state.alarm = trio.CancelScope(deadline=state.next_deadline())
        with state.alarm:
            await trio.sleep_forever()
        handled = trio.Event()
        await internal.send(Expire(handled))
        await handled.wait()
