"""A session's line across the fleet: every step takes a numbered ticket when it arrives at
a node, and holds the session only once every earlier ticket is served or abandoned.

Keys, next to the session's record and lease (``<ns>:session:<id>:…``), all expiring with
the session: ``ticket`` (the last number given), ``served`` (every ticket up to it is done)
and ``claims`` (a hash: ticket → the Redis server time, in ms, at which the place lapses
unless its node renews it).

- A step that arrives with no earlier step of its session on the node takes its ticket in
  its first look at the line (one script: number, claim, check the turn, take the lease), so
  an uncontended step costs the two round trips it did before there was a line. Steps that
  arrive behind it are numbered in the background, after it, in one ``INCRBY`` per batch,
  in arrival order, one take in flight per session: a node's own steps never line up out of
  their order.
- A waiting place renews its claim with every look at the line; while a node has more than
  one place in a session's line it renews them all every ``claim_s / 3``. A node that stops
  (it crashed, or cannot reach Redis) stops renewing: its places lapse ``claim_s`` later and
  the next place in line skips them.
- A place whose turn came advances ``served`` past the places it skipped and takes the
  session's lease in the same script. The lease still guards the one writer: a step whose
  own place lapsed while its node was silent finds ``served`` past it and takes the lease
  out of turn (counted as late).

**Fail-open:** a take or a turn Redis did not answer runs the step on the node's copy of
the session at once, as any missed call does; a place that waits past ``lock_wait_s`` runs
on the copy too (counted, and a ``fail_open`` event says so) and gives its place up.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..._core.events import FailOpen
from .link import UNAVAILABLE, RedisLink, Unavailable

if TYPE_CHECKING:
    import coredis
    from coredis.commands.script import Script

#: Seconds a place in line lasts unless its node renews it (renewed every third of it).
CLAIM_S: Final = 1.0
#: The first pause between two looks at the line, doubled up to ``POLL_MAX_S`` while the
#: line does not move. Polling, not a blocking pop on a wake-up list: ``BLPOP`` keeps one of
#: the client's pooled connections (64) per waiting step for the whole wait, so a burst of
#: waiting sessions would starve every other call of connections, and a push wakes one
#: waiter where a line may have one per node; keyspace notifications may be off. A wait is
#: bounded by ``lock_wait_s`` (0.25 s by default): about a dozen looks at most.
POLL_FIRST_S: Final = 0.002
POLL_MAX_S: Final = 0.025

_NOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""
# KEYS: ticket, served, claims. ARGV: count, claim_ms, ttl_ms. The last ticket given.
_TAKE = (
    _NOW
    + """
local served = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(redis.call('GET', KEYS[1]) or '0') < served then
  redis.call('SET', KEYS[1], served)  -- the count expired before the line: go on from it
end
local count = tonumber(ARGV[1])
local last = redis.call('INCRBY', KEYS[1], count)
for n = last - count + 1, last do
  redis.call('HSET', KEYS[3], n, now + tonumber(ARGV[2]))
end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
return last
"""
)
# KEYS: lock, record, ticket, served, claims. ARGV: ticket (0: take one now), token, lease_ms,
# claim_ms, ttl_ms. {1, record, served, ticket, skipped, late} with the lease taken,
# {0, '', served, ticket} to wait.
_TURN = (
    _NOW
    + """
local mine = tonumber(ARGV[1])
local served = tonumber(redis.call('GET', KEYS[4]) or '0')
if mine == 0 then
  if tonumber(redis.call('GET', KEYS[3]) or '0') < served then
    redis.call('SET', KEYS[3], served)  -- the count expired before the line: go on from it
  end
  mine = redis.call('INCR', KEYS[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
local skipped, late = 0, 1
if served < mine then
  late = 0
  if tonumber(redis.call('GET', KEYS[3]) or '0') < mine then
    redis.call('SET', KEYS[3], mine, 'PX', ARGV[5])  -- the count was lost: later steps after
  end
  redis.call('HSET', KEYS[5], mine, now + tonumber(ARGV[4]))
  redis.call('PEXPIRE', KEYS[5], ARGV[5])
  local claims = redis.call('HGETALL', KEYS[5])
  for i = 1, #claims, 2 do
    local other = tonumber(claims[i])
    if other < mine and other > served and tonumber(claims[i + 1]) > now then
      return {0, '', served, mine}  -- an earlier step still waits or runs
    end
  end
  for i = 1, #claims, 2 do
    local other = tonumber(claims[i])
    if other < mine then
      if other > served then skipped = skipped + 1 end  -- its node went silent
      redis.call('HDEL', KEYS[5], claims[i])
    end
  end
  if served < mine - 1 then
    served = mine - 1
    redis.call('SET', KEYS[4], served, 'PX', ARGV[5])
  end
end
if redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then
  return {1, redis.call('GET', KEYS[2]) or '', served, mine, skipped, late}
end
return {0, '', served, mine}
"""
)
# KEYS: claims, ticket, served. ARGV: claim_ms, ttl_ms, tickets...
_RENEW = (
    _NOW
    + """
for i = 3, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], now + tonumber(ARGV[1])) end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return 1
"""
)
# KEYS: claims, lock. ARGV: ticket, token ('' for none). A place given up; the lease too if a
# late answer gave it to this place after it stopped waiting.
_DROP = """
redis.call('HDEL', KEYS[1], ARGV[1])
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return 1
"""


def run_script(
    script: Script[bytes], keys: list[str], args: list[str | int]
) -> Callable[[coredis.Redis[bytes]], Awaitable[Any]]:
    async def command(_client: coredis.Redis[bytes]) -> Any:
        return await script(keys=keys, args=args)

    return command


@attrs.define(eq=False)
class Place:
    """One step's place in its session's line on this node."""

    session: str
    ticket: int | None = None  # its number in the fleet's line (None: none could be taken)
    taken: trio.Event = attrs.field(factory=trio.Event)  # the take ended, with or without
    first: trio.Event = attrs.field(factory=trio.Event)  # no place of this node before it
    asked: str = ""  # the token the lease was asked for (a late answer may have given it)
    inline: bool = False  # numbered by its own first look at the line (the node's first)
    renewed: bool = True  # the node keeps its claim (until it gives it up)
    gone: bool = False  # left the line


@attrs.define(eq=False)
class _Line:
    """This node's places in one session's line, in arrival order."""

    places: deque[Place] = attrs.field(factory=deque)
    untaken: list[Place] = attrs.field(factory=list)  # arrived, not numbered yet
    taking: trio.Lock = attrs.field(factory=trio.Lock)  # one take in flight: order kept
    poke: trio.Event = attrs.field(factory=trio.Event)  # an arrival, a departure, a number
    kept: bool = False  # a keeper task takes and renews for it
    inline: Place | None = None  # the head numbering itself: the rest are numbered after it


class Lines:
    """This node's places in the lines of its sessions (see the module docstring).

    Args:
        link: the node's Redis link.
        ttl_s: seconds the line's keys live after their last write (the session's TTL).
        lease_s: seconds a node holds a session at most.
        lock_wait_s: seconds a place waits for its turn before its step runs on the copy.
        claim_s: seconds a place lasts unless renewed.
    """

    def __init__(
        self,
        link: RedisLink,
        *,
        ttl_s: float,
        lease_s: float,
        lock_wait_s: float,
        claim_s: float = CLAIM_S,
    ) -> None:
        self._link = link
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._lease_ms = max(1, int(lease_s * 1000))
        self._claim_ms = max(1, int(claim_s * 1000))
        self._claim_s = claim_s
        self._lock_wait_s = lock_wait_s
        self._lines: dict[str, _Line] = {}
        self._nursery: trio.Nursery | None = None
        self._take = link.client.register_script(_TAKE)
        self._turn = link.client.register_script(_TURN)
        self._renew = link.client.register_script(_RENEW)
        self._drop = link.client.register_script(_DROP)

    def arrive(self, session: str) -> Place:
        """A new place at the end of ``session``'s line. Alone there, it is entered at once
        and numbered by its first look; behind others of this node, it is numbered after
        them, in the background (or when it is entered, with no background task)."""
        line = self._lines.get(session)
        if line is None:
            line = self._lines[session] = _Line()
        place = Place(session)
        if not line.places:  # entered at once (nothing of this node before it)
            place.first.set()
            place.inline = True
            line.inline = place
        else:
            line.untaken.append(place)
        line.places.append(place)
        line.poke.set()
        # A lone place needs no keeper: it numbers itself and its looks renew its claim
        # (while it holds, the lease keeps the others out). One behind it does.
        if self._nursery is not None and not line.kept and not place.inline:
            line.kept = True
            self._nursery.start_soon(self._keep, session, line)
        return place

    def leave(self, place: Place, *, drop: bool = True) -> None:
        """``place`` leaves its line: the next place of this node goes first. With ``drop``
        its claim (and the lease, if a late answer gave it) is dropped in the background, or
        lapses by itself."""
        if place.gone:
            return
        place.gone, place.renewed = True, False
        line = self._lines.get(place.session)
        if line is None:
            return
        self._numbered_inline(place, line)
        head = bool(line.places) and line.places[0] is place
        line.places.remove(place)
        if place in line.untaken:
            line.untaken.remove(place)
        if head and line.places:
            line.places[0].first.set()
        if not line.places:
            del self._lines[place.session]
        line.poke.set()  # its keeper looks again (and ends with the line)
        if drop and place.ticket is not None and self._nursery is not None:
            self._nursery.start_soon(self.drop, place)

    async def numbered(self, place: Place) -> None:
        """Wait until ``place``'s take ended; take it now when no keeper runs."""
        line = self._lines.get(place.session)
        while not place.taken.is_set() and not place.inline and line is not None:
            if line.kept:  # its keeper numbers it (or lets it go unnumbered as it ends)
                await place.taken.wait()
            else:
                await self._take_for(place.session, line)

    async def turn(self, place: Place) -> bytes | Unavailable | None:
        """The session's record once ``place`` has its turn and the lease (for the token in
        ``place.asked``); ``None`` past ``lock_wait_s``, ``UNAVAILABLE`` when Redis missed
        a call. The wait for the ticket counts in ``lock_wait_s``."""
        with trio.move_on_after(self._lock_wait_s):
            try:
                return await self._wait_turn(place)
            finally:
                self._numbered_inline(place)  # numbered or not: the places behind it go on
        self._timed_out(place)
        return None

    async def _wait_turn(self, place: Place) -> bytes | Unavailable:
        await self.numbered(place)
        if place.ticket is None and not place.inline:
            return UNAVAILABLE  # the take missed: this step runs on the copy at once
        place.asked = secrets.token_hex(8)
        keys = [self._key(place.session, k) for k in ("lock", "", "ticket", "served", "claims")]
        counters = self._link.counters
        pause, served, waited = POLL_FIRST_S, None, False
        while True:
            args: list[str | int] = [
                place.ticket or 0,  # 0: numbered by this look
                place.asked,
                self._lease_ms,
                self._claim_ms,
                self._ttl_ms,
            ]
            reply = await self._link.call("session turn", run_script(self._turn, keys, args))
            if isinstance(reply, Unavailable):
                return reply
            got, raw, *more = reply
            if place.inline and len(more) >= 2:
                place.ticket = int(more[1])
            self._numbered_inline(place)
            if int(got):
                if len(more) >= 4:
                    counters.tickets_skipped += int(more[2])
                    counters.tickets_late += int(more[3])
                return bytes(raw)
            if not waited:
                waited = True
                counters.lock_waits += 1
            moved = int(more[0]) if more else None
            if moved != served:  # the line moved: this place's turn may be next
                served, pause = moved, POLL_FIRST_S
            await trio.sleep(pause)
            pause = min(2 * pause, POLL_MAX_S)

    def _numbered_inline(self, place: Place, line: _Line | None = None) -> None:
        """``place`` numbered itself (or never will): the keeper numbers the rest now."""
        if not place.inline:
            return
        place.inline = False
        place.taken.set()
        line = line or self._lines.get(place.session)
        if line is not None and line.inline is place:
            line.inline = None
            line.poke.set()

    def _timed_out(self, place: Place) -> None:
        self._link.counters.lock_timeouts += 1
        place.renewed = False
        self._link.announce(
            FailOpen(
                operation="redis session turn",
                what_failed="session turn",
                reason=(
                    f"the steps before it in the session's line did not finish within "
                    f"lock_wait_s={self._lock_wait_s} s; the step ran on this node's copy"
                ),
                session=place.session,
            )
        )

    async def drop(self, place: Place) -> None:
        """Give ``place``'s claim up (and the lease, if a late answer gave it)."""
        if place.ticket is None:
            return
        keys = [self._key(place.session, "claims"), self._key(place.session, "lock")]
        await self._link.call(
            "session drop", run_script(self._drop, keys, [place.ticket, place.asked])
        )

    def release_keys(self, session: str) -> list[str]:
        """The line's keys the release script advances: ``served``, ``claims``, ``ticket``."""
        return [self._key(session, k) for k in ("served", "claims", "ticket")]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the keepers: each line's takes and renewals, in the background."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for session, line in self._lines.items():  # arrived before this started
                    line.kept = True
                    nursery.start_soon(self._keep, session, line)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    async def _keep(self, session: str, line: _Line) -> None:
        """Take tickets as places arrive and renew the claims, while the line has places."""
        renew_at = trio.current_time() + self._claim_s / 3
        try:
            while line.places:
                if line.untaken and line.inline is None:
                    await self._take_for(session, line)
                elif trio.current_time() >= renew_at:  # however busy the line is
                    await self._renew_for(session, line)
                    renew_at = trio.current_time() + self._claim_s / 3
                else:
                    line.poke = trio.Event()
                    with trio.move_on_at(renew_at):
                        await line.poke.wait()
        finally:
            line.kept = False
            for place in line.untaken:  # stopped (the stores close): these run unnumbered
                place.taken.set()

    async def _take_for(self, session: str, line: _Line) -> None:
        async with line.taking:
            batch, line.untaken = line.untaken, []
            if not batch:
                return
            try:
                reply: Any = await self._link.call(
                    "session ticket",
                    run_script(
                        self._take,
                        [self._key(session, k) for k in ("ticket", "served", "claims")],
                        [len(batch), self._claim_ms, self._ttl_ms],
                    ),
                )
                if reply is not UNAVAILABLE:
                    last = int(reply)
                    for number, place in enumerate(batch, start=last - len(batch) + 1):
                        place.ticket = number
            finally:
                for place in batch:
                    place.taken.set()
                    if place.gone and place.ticket is not None and self._nursery is not None:
                        self._nursery.start_soon(self.drop, place)  # left while numbered

    async def _renew_for(self, session: str, line: _Line) -> None:
        tickets: list[str | int] = [
            p.ticket for p in line.places if p.ticket is not None and p.renewed
        ]
        if tickets:
            await self._link.call(
                "session renew",
                run_script(
                    self._renew,
                    [self._key(session, k) for k in ("claims", "ticket", "served")],
                    [self._claim_ms, self._ttl_ms, *tickets],
                ),
            )

    def _key(self, session: str, suffix: str) -> str:
        return self._link.key("session", session, *((suffix,) if suffix else ()))
