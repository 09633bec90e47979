"""The one way the shared stores reach Redis: every call under a deadline, every failure
counted, the change from up to down announced once, and a probe that brings the link back.

While the link is down no request pays a Redis deadline: calls answer ``UNAVAILABLE`` at once
(counted as skipped) and the stores use their local copies. A probe pings Redis every
``probe_interval_s``; when Redis answers, every registered resync runs (pending writes are
flushed) and calls go to Redis again.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, TypeVar

import attrs
import trio

from ..._core.events import Event, FailOpen

if TYPE_CHECKING:
    import coredis

T = TypeVar("T")


#: Calls missed (late or failed) in a row after which the link is down.
DOWN_AFTER: Final = 3


class _Unavailable(enum.Enum):
    UNAVAILABLE = "unavailable"


#: What a call answers when Redis did not (down, late, or an error).
UNAVAILABLE: Final = _Unavailable.UNAVAILABLE
Unavailable = _Unavailable


@attrs.frozen(kw_only=True)
class RedisStatistics:
    """What the shared stores have counted so far.

    Attributes:
        up: Redis answered the last call (or the last probe), and what was written while it
            was down has been sent.
        calls: calls sent to Redis.
        failures: calls that failed with an error (a refused or dropped connection, say).
        timeouts: calls that passed their deadline.
        skipped: calls answered locally at once because Redis was down.
        outages: times the link went from up to down.
        recoveries: times the probe found Redis back and the stores resynchronised.
        writes_pending: writes kept locally, to be sent when Redis returns.
        writes_resynced: pending writes sent after a recovery.
        writes_dropped: writes lost (a full pending buffer, or a session another node
            changed meanwhile); never silently: this is the count.
        events_published: events written to the stream.
        events_dropped: events lost (the subscriber fell behind or the outage buffer was full).
        lock_waits: session holds that waited for another node to finish a step.
        lock_timeouts: session holds that gave up waiting and used the local state.
        tickets_skipped: places in a session's line this node passed over because their
            node stopped renewing them (a crashed node's steps).
        tickets_late: steps of this node that held their session after later ones, their
            place skipped while this node was silent.
    """

    up: bool
    calls: int
    failures: int
    timeouts: int
    skipped: int
    outages: int
    recoveries: int
    writes_pending: int
    writes_resynced: int
    writes_dropped: int
    events_published: int
    events_dropped: int
    lock_waits: int
    lock_timeouts: int
    tickets_skipped: int
    tickets_late: int


@attrs.define
class Counters:
    """The link's counters (mutable; ``statistics()`` takes a frozen snapshot)."""

    calls: int = 0
    failures: int = 0
    timeouts: int = 0
    skipped: int = 0
    outages: int = 0
    recoveries: int = 0
    writes_resynced: int = 0
    writes_dropped: int = 0
    events_published: int = 0
    events_dropped: int = 0
    lock_waits: int = 0
    lock_timeouts: int = 0
    tickets_skipped: int = 0
    tickets_late: int = 0


class RedisLink:
    """Calls to one Redis client under a deadline, with the link's state and counters.

    Args:
        client: an entered ``coredis.Redis`` (bytes replies).
        namespace: the prefix of every key (several fleets can share one Redis).
        deadline_s: seconds one call may take.
        probe_interval_s: seconds between pings while Redis is down.
    """

    def __init__(
        self,
        client: coredis.Redis[bytes],
        *,
        namespace: str,
        deadline_s: float,
        probe_interval_s: float,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.deadline_s = deadline_s
        self.probe_interval_s = probe_interval_s
        self.counters = Counters()
        self.up = True
        self._publish: Callable[[Event], None] | None = None
        self._resyncs: list[Callable[[], Awaitable[None]]] = []
        self._pending: list[Callable[[], int]] = []
        self._down = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self.went_down_at: float | None = None
        self._down_reason = ""
        self._resyncing = False
        self._in_a_row = 0  # calls missed in a row
        self._refusals: set[str] = set()  # operations whose refusal was announced

    def key(self, *parts: str) -> str:
        return ":".join((self.namespace, *parts))

    def report_to(self, publish: Callable[[Event], None]) -> None:
        """Announce outages through ``publish`` (an engine's event hub); an outage already
        under way (Redis was down when the node started) is announced now."""
        first = self._publish != publish  # each store hands the same hub: announce once
        self._publish = publish
        if first and not self.up:
            publish(self._fail_open("connect", self._down_reason))

    def announce(self, event: Event) -> None:
        """Publish ``event`` through the engine's hub, once the engine handed it."""
        if self._publish is not None:
            self._publish(event)

    def on_resync(self, resync: Callable[[], Awaitable[None]], pending: Callable[[], int]) -> None:
        """Run ``resync`` when Redis returns; ``pending`` counts the writes it would send."""
        self._resyncs.append(resync)
        self._pending.append(pending)

    def statistics(self) -> RedisStatistics:
        c = self.counters
        return RedisStatistics(
            up=self.up and not self._resyncing,
            calls=c.calls,
            failures=c.failures,
            timeouts=c.timeouts,
            skipped=c.skipped,
            outages=c.outages,
            recoveries=c.recoveries,
            writes_pending=sum(p() for p in self._pending),
            writes_resynced=c.writes_resynced,
            writes_dropped=c.writes_dropped,
            events_published=c.events_published,
            events_dropped=c.events_dropped,
            lock_waits=c.lock_waits,
            lock_timeouts=c.lock_timeouts,
            tickets_skipped=c.tickets_skipped,
            tickets_late=c.tickets_late,
        )

    async def call(
        self,
        operation: str,
        fn: Callable[[coredis.Redis[bytes]], Awaitable[T]],
        *,
        blocks_s: float = 0.0,
    ) -> T | Unavailable:
        """``await fn(client)`` within the deadline (plus ``blocks_s`` for a command that
        waits on the server by design, a blocking read), or ``UNAVAILABLE`` (down, late,
        failed)."""
        if not self.up:
            self.counters.skipped += 1
            return UNAVAILABLE
        return await self._attempt(operation, fn, self.deadline_s + blocks_s)

    async def _attempt(
        self,
        operation: str,
        fn: Callable[[coredis.Redis[bytes]], Awaitable[T]],
        deadline_s: float,
    ) -> T | Unavailable:
        import coredis.exceptions

        self.counters.calls += 1
        with trio.move_on_after(deadline_s):
            try:
                answer = await fn(self.client)
            except (coredis.exceptions.RedisError, OSError) as exc:
                self.counters.failures += 1
                if _about_a_key(exc):
                    self._refused(operation, exc)
                else:
                    self._missed(operation, _described(exc))
                return UNAVAILABLE
            self._in_a_row = 0
            self._refusals.discard(operation)
            return answer
        self.counters.timeouts += 1
        self._missed(operation, f"no answer within {deadline_s} s")
        return UNAVAILABLE

    def _refused(self, operation: str, exc: Exception) -> None:
        # Redis answered: this call failed on what a key holds (another program's key in the
        # namespace, say), not because Redis is out of reach. The link stays up for every
        # other call; said once per operation until that operation works again.
        if operation in self._refusals or self._publish is None:
            return  # said already, or no engine to say it to yet: its next refusal is said
        self._refusals.add(operation)
        self.announce(
            FailOpen(
                operation=f"redis {operation}",
                what_failed="redis",
                reason=f"{_described(exc)}; Redis answered, so the link stays up and this "
                f"call used the local stores (does a key under namespace {self.namespace!r} "
                "hold what toolroute does not write there?)",
            )
        )

    def _missed(self, operation: str, reason: str) -> None:
        # One late answer on a busy node is not an outage: the call failed open by itself.
        # ``DOWN_AFTER`` in a row is, and then no call waits on Redis until the probe says.
        self._in_a_row += 1
        if self._in_a_row >= DOWN_AFTER:
            self._went_down(operation, reason)

    def call_from_thread(
        self, operation: str, fn: Callable[[coredis.Redis[bytes]], Awaitable[T]]
    ) -> T | Unavailable:
        """``call`` from a worker thread (the embedding stores' callers). On the event loop's
        own thread (an inline ``run_cpu``) a blocking round trip is impossible: skipped."""
        if not self.up or self._token is None or trio.lowlevel.in_trio_run():
            self.counters.skipped += 1
            return UNAVAILABLE
        try:
            return trio.from_thread.run(self.call, operation, fn, trio_token=self._token)
        except (trio.RunFinishedError, trio.Cancelled):
            self.counters.skipped += 1
            return UNAVAILABLE

    def _went_down(self, operation: str, reason: str) -> None:
        if not self.up:
            return
        self.up = False
        self.went_down_at = time.monotonic()
        self._down_reason = reason
        self.counters.outages += 1
        self._down.set()
        if self._publish is not None:
            self._publish(self._fail_open(operation, reason))

    @staticmethod
    def _fail_open(operation: str, reason: str) -> FailOpen:
        return FailOpen(
            operation=f"redis {operation}",
            what_failed="redis",
            reason=f"{reason}; serving from local stores until Redis answers again",
        )

    async def run_probe(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """While Redis is down, ping it every ``probe_interval_s``; when it answers, run the
        resyncs and let calls through again."""
        self._token = trio.lowlevel.current_trio_token()
        task_status.started()
        while True:
            await self._down.wait()
            await trio.sleep(self.probe_interval_s)
            answer = await self._attempt("ping", lambda client: client.ping(), self.deadline_s)
            if answer is UNAVAILABLE:
                continue
            self._in_a_row = 0
            self.up = True  # before resyncing: the resyncs' own calls must go through
            self._resyncing = True
            self._down = trio.Event()
            self.counters.recoveries += 1
            try:
                for resync in self._resyncs:
                    await resync()
            finally:
                self._resyncing = False
            self.went_down_at = None


#: The replies by which Redis says it cannot serve now (memory full, busy, a replica without
#: its primary...): the link is down until the probe sees it answer, as for a refused connection.
_SERVER_STATES: Final = ("OOM ", "BUSY ", "MASTERDOWN ", "MISCONF ", "NOREPLICAS ")
#: Where coredis puts a pipelined command's own error in the message it raises.
_PIPELINE_ERROR: Final = " of pipeline caused error: "
#: Characters of an error kept in a ``fail_open`` reason (a pipeline's error quotes its
#: commands, events' JSON included).
_REASON_CHARS: Final = 300


def _about_a_key(exc: Exception) -> bool:
    """Whether Redis refused this one call for what a key holds (a key of another type, a
    value a script cannot read), not for its own state or the connection's."""
    import coredis.exceptions

    if isinstance(exc, coredis.exceptions.WrongTypeError):
        return True
    if type(exc) is not coredis.exceptions.ResponseError:
        return False  # connection, authentication, read-only replica, loading...
    return not str(exc).rpartition(_PIPELINE_ERROR)[2].startswith(_SERVER_STATES)


def _described(exc: Exception) -> str:
    quoted, _, text = str(exc).rpartition(_PIPELINE_ERROR)
    if quoted:  # "Command # 1 (XADD key fields...)": name the command and its key
        text = " ".join(quoted.partition("(")[2].split(" ", 2)[:2]) + ": " + text
    if len(text) > _REASON_CHARS:
        text = text[: _REASON_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {text}"
