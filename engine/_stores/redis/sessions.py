"""Session state shared by every node through Redis: one writer at a time per session, and
the routing cache kept inside the session's record.

A session is one Redis string, ``<namespace>:session:<id>``: the state (paging, forced and
sticky sets, search activations, sticky servers), the session's routing cache entries (each
with its wall-clock expiry) and a version, as JSON, expiring ``ttl_s`` after its last write.
A node holds a session under a lease, ``<namespace>:session:<id>:lock`` (``SET NX PX`` with a
random token), taken and read in one script and written and released in another, so two
nodes never step one session at once and a crashed node's lease ends by itself.

Within a node the step actor already orders a session's steps by its inbox; the lease orders
them across nodes. **Fail-open:** when Redis is down or late, or another node holds the
session past ``lock_wait_s``, the step runs on this node's last known copy of the state
(counted, and the link announces the outage); the copy is written back when Redis returns,
unless another node changed the session meanwhile (then the write is counted as dropped:
that node's state is the newer).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs
import trio

from ..._core.stores import SessionState
from ..routing_cache import MemoryRoutingCache
from ..sessions import MemorySessionStore
from .link import UNAVAILABLE, RedisLink

if TYPE_CHECKING:
    import coredis
    from coredis.commands.script import Script

#: Routing entries kept per session record (the oldest go first).
ROUTING_PER_SESSION: Final = 32
#: Changes to sessions this node does not hold, waiting to be applied under their lease.
UPDATE_QUEUE: Final = 1024

_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('GET', KEYS[2]) or ''}
end
return {0, ''}
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
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


def _run(
    script: Script[bytes], keys: list[str], args: list[str | int]
) -> Callable[[coredis.Redis[bytes]], Awaitable[Any]]:
    async def command(_client: coredis.Redis[bytes]) -> Any:
        return await script(keys=keys, args=args)

    return command


class RoutingCodec(Protocol):
    """How routing outcomes travel between nodes (the runtime's type, not the store's)."""

    def encode(self, value: object) -> str | None: ...

    def decode(self, text: str) -> object | None: ...


@attrs.define(eq=False)
class _Held:
    state: SessionState
    holders: int
    ready: trio.Event
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


class RedisSessionStore:
    """``SessionStore`` over Redis, with this node's copies in ``local``.

    Args:
        link: the node's Redis link.
        local: this node's copies (its bound and idle time apply to them).
        ttl_s: seconds a session lives in Redis after its last step.
        lease_s: seconds a node's hold lasts at most (a crashed node's hold ends then).
        lock_wait_s: seconds a step waits for another node to release the session before it
            runs on this node's copy.
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
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._link = link
        self._local = local
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._lease_ms = max(1, int(lease_s * 1000))
        self._lock_wait_s = lock_wait_s
        self._clock = clock
        self._held: dict[str, _Held] = {}
        self._copies: dict[str, _Copy] = {}  # written while down, by session
        self._versions: dict[str, int] = {}  # the version each local copy was read at
        self._acquire = link.client.register_script(_ACQUIRE)
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

    @asynccontextmanager
    async def hold(self, session: str) -> AsyncIterator[SessionState]:
        entry = self._held.get(session)
        first = entry is None
        if entry is None:
            entry = _Held(state=self._local.get(session), holders=1, ready=trio.Event())
            entry.version = self._versions.get(session, 0)
            self._held[session] = entry
        else:
            entry.holders += 1
        try:
            if first:
                try:
                    await self._take(session, entry)
                finally:
                    entry.ready.set()  # holders waiting behind this one go on with what there is
            else:
                await entry.ready.wait()
            yield entry.state
        finally:
            entry.holders -= 1
            if not entry.holders:  # the last holder on this node lets go
                del self._held[session]
                # Twice the deadline: the write's own deadline ends it first, and counts it.
                with trio.move_on_after(2 * self._link.deadline_s, shield=True):
                    await self._give_back(session, entry)

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

    async def _take(self, session: str, entry: _Held) -> None:
        keys = [self._key(session, "lock"), self._key(session)]
        token = secrets.token_hex(8)
        waited = False
        with trio.move_on_after(self._lock_wait_s) as waiting:
            while True:
                reply: Any = await self._link.call(
                    "session hold", _run(self._acquire, keys, [token, self._lease_ms])
                )
                if reply is UNAVAILABLE:
                    return  # the local copy serves this step
                got, record = reply
                if int(got):
                    entry.token = token
                    self._read(session, entry, bytes(record))
                    return
                if not waited:
                    waited = True
                    self._link.counters.lock_waits += 1
                await trio.sleep(0.005)
        if waiting.cancelled_caught:
            self._link.counters.lock_timeouts += 1

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

    async def _give_back(self, session: str, entry: _Held) -> None:
        entry.state.last_seen = self._clock()
        self._keep_locally(session, entry.state)
        payload = _encode(entry.state, entry.version + 1, entry.routing)
        if entry.token is None:  # served from the local copy: goes back on recovery
            self._copies[session] = _Copy(payload, entry.version)
            self._versions[session] = entry.version
            return
        reply: Any = await self._link.call(
            "session write",
            _run(
                self._release,
                [self._key(session, "lock"), self._key(session)],
                [entry.token, payload, self._ttl_ms],
            ),
        )
        if reply is UNAVAILABLE:  # the lease stays taken: a retry writes and releases it
            self._copies[session] = _Copy(payload, entry.version, entry.token)
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
                _run(self._release, keys, [copy.token, copy.payload, self._ttl_ms]),
            )
        if reply is not UNAVAILABLE and not int(reply):
            reply = await self._link.call(
                "session resync",
                _run(self._resync_script, keys, [copy.payload, self._ttl_ms, copy.version]),
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

    def _key(self, session: str, *suffix: str) -> str:
        return self._link.key("session", session, *suffix)


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
