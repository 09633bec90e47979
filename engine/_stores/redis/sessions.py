"""Session state shared by every node through Redis: one writer at a time per session, and
the routing cache kept inside the session's record.

A session is one Redis string, ``<namespace>:session:<id>``: the state (paging, forced and
sticky sets, search activations, sticky servers), the session's routing cache entries (each
with its wall-clock expiry) and a version, as JSON, expiring ``ttl_s`` after its last write.
A node holds a session under a lease, ``<namespace>:session:<id>:lock`` (``SET NX PX`` with a
random token), so two nodes never step one session at once and a crashed node's lease ends by
itself. Every step takes a place in the session's line across the fleet when it arrives
(``turns.py``): the lease is taken, and the record read, in the script that finds the
place's turn come; the record is written, the lease released and the line advanced in one
more. Within a node the places of a session are entered in their arrival order.

**Fail-open:** when Redis is down or late, or the steps before it hold the line past
``lock_wait_s``, the step runs on this node's last known copy of the state (counted, and the
link announces an outage); the copy is written back when Redis returns, unless another node
changed the session meanwhile (then the write is counted as dropped: that node's state is the
newer).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Final, Protocol

import attrs
import trio

from ..._core.stores import SessionState
from ..routing_cache import MemoryRoutingCache
from ..sessions import MemorySessionStore
from .link import UNAVAILABLE, RedisLink
from .turns import CLAIM_S, Lines, Place, run_script

#: Routing entries kept per session record (the oldest go first).
ROUTING_PER_SESSION: Final = 32
#: Changes to sessions this node does not hold, waiting to be applied under their lease.
UPDATE_QUEUE: Final = 1024

# KEYS: lock, record, served, claims, ticket. ARGV: token, record, ttl_ms, ticket (0: none).
# The step's place is done even when its lease ran out (its write is dropped then).
_RELEASE = """
local done = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('DEL', KEYS[1])
  done = 1
end
local mine = tonumber(ARGV[4])
if mine > 0 then
  redis.call('HDEL', KEYS[4], ARGV[4])
  if tonumber(redis.call('GET', KEYS[3]) or '0') < mine then
    redis.call('SET', KEYS[3], mine, 'PX', ARGV[3])
  end
  for i = 3, 5 do redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
end
return done
"""
# A copy written while Redis was down goes back only if nobody holds the session and its
# version is still the one the copy started from.
_RESYNC = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local current = redis.call('GET', KEYS[2])
if current and cjson.decode(current)['v'] ~= tonumber(ARGV[3]) then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
"""


class RoutingCodec(Protocol):
    """How routing outcomes travel between nodes (the runtime's type, not the store's)."""

    def encode(self, value: object) -> str | None: ...

    def decode(self, text: str) -> object | None: ...


@attrs.define(eq=False)
class _Held:
    state: SessionState
    token: str | None = None  # the lease, when this node got one
    version: int = 0  # the version the state was read at
    routing: dict[str, tuple[float, str]] = attrs.field(factory=dict)  # query -> (expiry, json)


@attrs.frozen
class _Copy:
    """A session written while Redis was down: sent back on recovery (under the lease it
    was read with, if the node still holds it)."""

    payload: str
    version: int
    token: str | None = None
    ticket: int = 0  # the place the write completes (0: none)


class _Turn:
    """One step's place in its session's line (``Turn``): entered when the step runs."""

    def __init__(self, store: RedisSessionStore, place: Place) -> None:
        self._store = store
        self._place = place
        self._entry: _Held | None = None

    @property
    def ticket(self) -> int | None:
        """Its number in the fleet's line; ``None`` until taken, or when none could be."""
        return self._place.ticket

    async def __aenter__(self) -> SessionState:
        self._entry = await self._store._enter(self._place)
        return self._entry.state

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        entry, self._entry = self._entry, None
        if entry is not None:
            await self._store._exit(self._place, entry)

    def leave(self) -> None:
        if self._entry is None:
            self._store._lines.leave(self._place)


class RedisSessionStore:
    """``SessionStore`` over Redis, with this node's copies in ``local``.

    Args:
        link: the node's Redis link.
        local: this node's copies (its bound and idle time apply to them).
        ttl_s: seconds a session lives in Redis after its last step.
        lease_s: seconds a node's hold lasts at most (a crashed node's hold ends then).
        lock_wait_s: seconds a step waits for the steps before it in the session's line
            before it runs on this node's copy.
        claim_s: seconds a place in line lasts unless this node renews it.
        clock: the time source of ``SessionState.last_seen``.
    """

    def __init__(
        self,
        link: RedisLink,
        local: MemorySessionStore,
        *,
        ttl_s: float,
        lease_s: float,
        lock_wait_s: float,
        claim_s: float = CLAIM_S,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._link = link
        self._local = local
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._clock = clock
        self._held: dict[str, _Held] = {}
        self._copies: dict[str, _Copy] = {}  # written while down, by session
        self._versions: dict[str, int] = {}  # the version each local copy was read at
        self._lines = Lines(
            link, ttl_s=ttl_s, lease_s=lease_s, lock_wait_s=lock_wait_s, claim_s=claim_s
        )
        self._release = link.client.register_script(_RELEASE)
        self._resync_script = link.client.register_script(_RESYNC)
        self._updates_in, self._updates_out = trio.open_memory_channel[
            tuple[str, Callable[[SessionState], None]]
        ](UPDATE_QUEUE)
        self._retries_in, self._retries_out = trio.open_memory_channel[str](UPDATE_QUEUE)
        link.on_resync(self._resync, lambda: len(self._copies))

    def __len__(self) -> int:
        return len(self._local)

    def __contains__(self, session: object) -> bool:
        # Only a session held here can change without a round trip (``update_nowait``).
        return session in self._held

    def held_routing(self, session: str) -> dict[str, tuple[float, str]] | None:
        """The routing entries of ``session`` while this node holds it."""
        entry = self._held.get(session)
        return entry.routing if entry is not None else None

    def arrive(self, session: str) -> _Turn:
        """A place at the end of ``session``'s line, numbered at once (in the background)."""
        return _Turn(self, self._lines.arrive(session))

    @asynccontextmanager
    async def hold(self, session: str) -> AsyncIterator[SessionState]:
        async with self.arrive(session) as state:
            yield state

    async def _enter(self, place: Place) -> _Held:
        """Wait for ``place``'s turn (this node's earlier places of the session first, then
        the fleet's line), take the lease and read the state; the local copy when Redis
        did not answer or the turn did not come within ``lock_wait_s``."""
        session = place.session
        try:
            await place.first.wait()
            entry = _Held(state=self._local.get(session))
            entry.version = self._versions.get(session, 0)
            record = await self._lines.turn(place)
            if isinstance(record, bytes):
                entry.token = place.asked
                self._read(session, entry, record)
        except BaseException:
            self._lines.leave(place)
            raise
        self._held[session] = entry
        return entry

    async def _exit(self, place: Place, entry: _Held) -> None:
        if self._held.get(place.session) is entry:
            del self._held[place.session]
        try:
            # Twice the deadline: the write's own deadline ends it first, and counts it.
            with trio.move_on_after(2 * self._link.deadline_s, shield=True):
                await self._give_back(place, entry)
        finally:
            self._lines.leave(place, drop=False)  # written, dropped, or lapsing by itself

    def update_nowait(self, session: str, change: Callable[[SessionState], None]) -> None:
        entry = self._held.get(session)
        if entry is not None:
            change(entry.state)  # written with the rest when the hold ends
            return
        if session in self._local:
            change(self._local.get(session))
        try:
            self._updates_in.send_nowait((session, change))
        except trio.WouldBlock:
            self._link.counters.writes_dropped += 1

    async def run_updates(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Apply ``update_nowait``'s changes to sessions this node did not hold, each under
        the session's lease."""
        task_status.started()
        async with self._updates_out:
            async for session, change in self._updates_out:
                async with self.hold(session) as state:
                    change(state)

    def _read(self, session: str, entry: _Held, record: bytes) -> None:
        decoded = _decode(record) if record else None
        if record and decoded is None:
            return  # unreadable: keep the local copy; the write replaces the record
        version = decoded[1] if decoded is not None else 0
        copy = self._copies.pop(session, None)
        if copy is not None and copy.version == version:
            # A step here whose write Redis missed, and nobody changed the session since:
            # that step's state is the newest.
            decoded = _decode(copy.payload.encode())
            self._link.counters.writes_resynced += 1
        elif copy is not None:
            self._link.counters.writes_dropped += 1  # another node's state is newer
        if decoded is None:  # unknown to the fleet (new, or expired): fresh here too
            entry.state = SessionState(last_seen=self._clock())
            entry.version = 0
            return
        state, _, routing = decoded
        state.last_seen = self._clock()
        entry.state, entry.version, entry.routing = state, version, routing

    async def _give_back(self, place: Place, entry: _Held) -> None:
        session = place.session
        entry.state.last_seen = self._clock()
        self._keep_locally(session, entry.state)
        payload = _encode(entry.state, entry.version + 1, entry.routing)
        if entry.token is None:  # served from the local copy: goes back on recovery
            self._copies[session] = _Copy(payload, entry.version)
            self._versions[session] = entry.version
            await self._lines.drop(place)  # its place, for the steps behind it
            return
        ticket = place.ticket or 0
        reply: Any = await self._link.call(
            "session write",
            run_script(
                self._release,
                self._release_keys(session),
                [entry.token, payload, self._ttl_ms, ticket],
            ),
        )
        if reply is UNAVAILABLE:  # the lease stays taken: a retry writes and releases it
            self._copies[session] = _Copy(payload, entry.version, entry.token, ticket)
            self._versions[session] = entry.version
            if self._link.up:  # a missed call, not an outage: retry soon, not at recovery
                # A full queue: the copy stays for the next hold or the next recovery.
                with contextlib.suppress(trio.WouldBlock):
                    self._retries_in.send_nowait(session)
        elif int(reply):
            self._versions[session] = entry.version + 1
            self._copies.pop(session, None)
        else:  # the lease ran out and another node took the session: its state is newer
            self._link.counters.writes_dropped += 1

    def _keep_locally(self, session: str, state: SessionState) -> None:
        # The next local read (an outage) starts from what this step left.
        mine = self._local.get(session)
        mine.idle_steps, mine.activated = state.idle_steps, state.activated
        mine.forced_sets, mine.sticky_sets = state.forced_sets, dict(state.sticky_sets)
        mine.sticky_servers, mine.last_seen = dict(state.sticky_servers), state.last_seen

    async def _resync(self) -> None:
        for session in list(self._copies):
            if await self._resync_one(session) is UNAVAILABLE:
                return  # down again: the rest waits for the next recovery

    async def _resync_one(self, session: str) -> object:
        """Send ``session``'s copy: under its lease if still ours, else if nobody changed
        the session since the copy's version (otherwise it is dropped, and counted)."""
        copy = self._copies.pop(session, None)
        if copy is None or session in self._held:
            if copy is not None:
                self._copies[session] = copy  # held again here: its next write supersedes it
            return None
        keys = [self._key(session, "lock"), self._key(session)]
        reply: Any = 0
        if copy.token is not None:
            reply = await self._link.call(
                "session resync",
                run_script(
                    self._release,
                    self._release_keys(session),
                    [copy.token, copy.payload, self._ttl_ms, copy.ticket],
                ),
            )
        if reply is not UNAVAILABLE and not int(reply):
            reply = await self._link.call(
                "session resync",
                run_script(self._resync_script, keys, [copy.payload, self._ttl_ms, copy.version]),
            )
        if reply is UNAVAILABLE:
            self._copies.setdefault(session, copy)
            return UNAVAILABLE
        if int(reply):
            self._link.counters.writes_resynced += 1
            self._versions[session] = copy.version + 1
        else:
            self._link.counters.writes_dropped += 1
        return reply

    async def run_retries(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Send again, shortly after, the session writes a call missed while Redis was up
        (the session's lease is released then, so other nodes do not wait out the lease)."""
        task_status.started()
        async with self._retries_out:
            async for session in self._retries_out:
                await trio.sleep(self._link.deadline_s)
                await self._resync_one(session)

    async def run_lines(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Number each step's place as it arrives and renew this node's places."""
        await self._lines.run(task_status=task_status)

    def _key(self, session: str, *suffix: str) -> str:
        return self._link.key("session", session, *suffix)

    def _release_keys(self, session: str) -> list[str]:
        return [self._key(session, "lock"), self._key(session), *self._lines.release_keys(session)]


def _encode(state: SessionState, version: int, routing: dict[str, tuple[float, str]]) -> str:
    now = time.time()
    live = [(q, e) for q, e in routing.items() if e[0] > now][-ROUTING_PER_SESSION:]
    return json.dumps(
        {
            "v": version,
            "idle_steps": state.idle_steps,
            "activated": list(state.activated),
            "forced_sets": list(state.forced_sets),
            "sticky_sets": state.sticky_sets,
            "sticky_servers": state.sticky_servers,
            "routing": {q: [expiry, value] for q, (expiry, value) in live},
        },
        ensure_ascii=False,
    )


def _decode(record: bytes) -> tuple[SessionState, int, dict[str, tuple[float, str]]] | None:
    """A record another node wrote; ``None`` when it cannot be read with certainty."""
    try:
        data: Any = json.loads(record.decode("utf-8", "surrogatepass"))
        state = SessionState(
            idle_steps=int(data["idle_steps"]),
            activated=tuple(str(t) for t in data["activated"]),
            forced_sets=tuple(str(t) for t in data["forced_sets"]),
            sticky_sets={str(k): int(v) for k, v in data["sticky_sets"].items()},
            sticky_servers={str(k): int(v) for k, v in data["sticky_servers"].items()},
        )
        routing = {str(q): (float(e), str(v)) for q, (e, v) in data["routing"].items()}
        return state, int(data["v"]), routing
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        return None


class RedisRoutingCache:
    """``RoutingCache`` whose entries live in the session's record (read when a node holds
    the session, written when it lets go), with ``local`` for what no held session has."""

    def __init__(
        self,
        sessions: RedisSessionStore,
        local: MemoryRoutingCache[object],
        codec: RoutingCodec,
        *,
        ttl_s: float,
    ) -> None:
        self._sessions = sessions
        self._local = local
        self._codec = codec
        self._ttl_s = ttl_s

    def get(self, key: tuple[str, str], now: float) -> object | None:
        routing = self._sessions.held_routing(key[0])
        if routing is not None and (entry := routing.get(key[1])) is not None:
            if entry[0] > time.time():
                value = self._codec.decode(entry[1])
                if value is not None:
                    return value
            del routing[key[1]]
        return self._local.get(key, now)

    def put(self, key: tuple[str, str], value: object, now: float) -> None:
        self._local.put(key, value, now)
        routing = self._sessions.held_routing(key[0])
        encoded = self._codec.encode(value)
        if routing is not None and encoded is not None:
            routing.pop(key[1], None)  # re-inserted last: the newest
            routing[key[1]] = (time.time() + self._ttl_s, encoded)
