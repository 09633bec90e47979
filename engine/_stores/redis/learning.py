"""Learned evidence shared by every node through Redis, with a local near tier (the disk
files, or memory with caching off).

One Redis hash per embedder identity, ``<namespace>:learn:<sha256(identity)>``: a field per
tool id, whose value is the tool's entries in the disk file's format (an ``.npz``: vectors,
SHA-256 digests of the requests, sources, and texts only when the engine keeps them). No
request text reaches Redis unless ``LearningConfig.keep_text`` is on: the engine hands the
store entries without text, and the encoding writes no ``texts`` array for them.

Synchronous (``LearningStore``): the engine calls it from worker threads, and each round trip
hops onto the event loop under the link's deadline. A read Redis cannot answer serves the
near tier's evidence; a write or removal it cannot take waits (the latest per tool) and goes
out when Redis returns. Two nodes saving one tool at once both keep their evidence: a save
writes only if the tool's record is still the one it read (a script compares them), else it
reads again and merges: the entries others added since this node last knew the tool stay,
under the bound, with this node's own (``merged``: past it the oldest learned entries go);
what this node dropped on purpose (forgot, or bounded away) stays dropped. A save that
waits for Redis (down) is merged the same way when it goes out.

Every write that reaches Redis is announced on ``<namespace>:learned`` (which node, the
identity's hash, the tool ids or ``*``; never the evidence): the other attached nodes read
those tools again (``run_follower``), so a running node sees what another learned.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..._core.recall.learned import merged
from ..._core.stores import LearnedExample, LearningStore
from ..learning import _encoded, _read
from .caches import Command, _hgetall, _hset, _identity_hash, field_name
from .link import UNAVAILABLE, RedisLink
from .streams import _text, _xadd, follow
from .turns import run_script

if TYPE_CHECKING:
    import coredis


#: Set a tool's record only if it is still the one read (its SHA-1, ``""``: none): 1, else 0.
_SWAP = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
local seen = ''
if current then seen = redis.sha1hex(current) end
if seen ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""
#: Rounds of read, merge and swap before a save writes over whatever is there.
SWAP_ROUNDS: Final = 8


def _hget(key: str, field: str) -> Command[bytes | None]:
    async def command(client: coredis.Redis[bytes]) -> bytes | None:
        return await client.hget(key, field)

    return command


def _hdel(key: str, fields: Sequence[str]) -> Command[int]:
    async def command(client: coredis.Redis[bytes]) -> int:
        return await client.hdel(key, list(fields))

    return command


def _delete(key: str) -> Command[int]:
    async def command(client: coredis.Redis[bytes]) -> int:
        return await client.delete([key])

    return command


@attrs.define
class _Waiting:
    """What one identity's evidence owes Redis: a removal of every tool first (a
    ``forget`` of all), then each tool's latest entries (``None``: remove the tool)."""

    clear: bool = False
    tools: dict[str, bytes | None] = attrs.field(factory=dict)

    def __len__(self) -> int:
        return len(self.tools) + int(self.clear)


class RedisLearningStore:
    """``LearningStore`` shared through Redis, with ``near`` (a local store) in front.

    ``load`` answers the near tier's evidence with Redis's over it (a tool Redis knows gets
    the fleet's entries, which the near tier then keeps); ``save`` and ``forget`` go to both.
    """

    def __init__(
        self,
        link: RedisLink,
        near: LearningStore,
        *,
        node: str = "",
        maxlen: int = 10_000,
        per_tool: int = 32,
    ) -> None:
        self._link = link
        self._per_tool = per_tool
        # (identity, tool id) -> the digests this node's engine last held for the tool: what
        # a save finds in Redis beyond them (and beyond the save's own) another node added.
        self._known: dict[tuple[str, str], frozenset[str]] = {}
        self._swap = link.client.register_script(_SWAP)
        self._near = near
        self._node = node
        self._maxlen = maxlen
        self._notices = link.key("learned")
        self._identities: dict[str, str] = {}  # hash -> identity, of those this node loaded
        self._lock = threading.Lock()
        self._pending: dict[str, _Waiting] = {}
        self.from_redis = 0  # tools whose evidence the shared tier answered
        link.on_resync(self._resync, self.pending)

    def __repr__(self) -> str:
        return f"RedisLearningStore(near={self._near!r})"

    def pending(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._pending.values())

    def _key(self, identity: str) -> str:
        return self._link.key("learn", _identity_hash(identity))

    def load(self, identity: str) -> dict[str, tuple[LearnedExample, ...]]:
        self._identities[_identity_hash(identity)] = identity
        found = self._near.load(identity)
        shared = self._link.call_from_thread("learning read", _hgetall(self._key(identity)))
        if shared is UNAVAILABLE:
            return found
        with self._lock:
            waiting = self._pending.get(identity)
            owed = set(waiting.tools) if waiting is not None else set()
            if waiting is not None and waiting.clear:
                return found  # this node forgot every tool; Redis has not heard yet
        for field, value in shared.items():
            tool_id = field_name(field)
            if tool_id is None or tool_id in owed:
                continue  # not a tool's; or this node's newer entries wait for Redis: they stand
            read = _read(io.BytesIO(value), identity)
            if isinstance(read, str) or read[0] != tool_id or not read[1]:
                continue  # another version's record, or a mislabelled one: never misread
            entries = read[1]
            self._knows(identity, tool_id, entries)
            if not _same(found.get(tool_id, ()), entries):
                found[tool_id] = entries
                self._near.save(identity, tool_id, entries)
            self.from_redis += 1
        return found

    def _knows(self, identity: str, tool_id: str, entries: Sequence[LearnedExample]) -> None:
        with self._lock:
            self._known[identity, tool_id] = frozenset(e.digest for e in entries)

    def save(self, identity: str, tool_id: str, entries: Sequence[LearnedExample]) -> None:
        self._near.save(identity, tool_id, entries)
        value = _encoded(identity, tool_id, entries) if entries else None
        key = self._key(identity)
        if value is None:
            sent: object = self._link.call_from_thread("learning write", _hdel(key, [tool_id]))
        else:
            sent = self._merge(identity, tool_id, entries)
        if sent is UNAVAILABLE:
            with self._lock:
                self._pending.setdefault(identity, _Waiting()).tools[tool_id] = value
        else:
            self._announce_from_thread(identity, [tool_id])

    def _merge(self, identity: str, tool_id: str, entries: Sequence[LearnedExample]) -> object:
        """Write ``entries`` with what other nodes added to the tool since this node last knew
        it (read, merge, swap if unchanged; a few rounds, then the last write stands), and
        keep the result in the near tier; ``UNAVAILABLE`` when Redis missed a round trip."""
        key = self._key(identity)
        with self._lock:
            known = self._known.get((identity, tool_id), frozenset())
        mine = {e.digest for e in entries}
        kept = tuple(entries)
        for _ in range(SWAP_ROUNDS):
            current = self._link.call_from_thread("learning read", _hget(key, tool_id))
            if current is UNAVAILABLE:
                return UNAVAILABLE
            theirs: Sequence[LearnedExample] = ()
            if current is not None:
                read = _read(io.BytesIO(current), identity)
                if not isinstance(read, str) and read[0] == tool_id:
                    theirs = read[1]
            added = [e for e in theirs if e.digest not in known and e.digest not in mine]
            kept = merged(added, entries, self._per_tool) if added else tuple(entries)
            seen = hashlib.sha1(current).hexdigest() if current is not None else ""
            value = _encoded(identity, tool_id, kept)
            swapped = self._link.call_from_thread(
                "learning write",
                run_script(self._swap, [key], [tool_id, seen, value]),  # type: ignore[list-item]
            )
            if swapped is UNAVAILABLE:
                return UNAVAILABLE
            if int(swapped):
                break
        else:
            value = _encoded(identity, tool_id, kept)
            sent = self._link.call_from_thread("learning write", _hset(key, {tool_id: value}))
            if sent is UNAVAILABLE:
                return UNAVAILABLE
        # Known only once written: a save that waits for Redis merges from the same start.
        self._knows(identity, tool_id, entries)
        if not _same(kept, entries):
            self._near.save(identity, tool_id, kept)
        return None

    def forget(self, identity: str, tool_ids: Collection[str] | None = None) -> None:
        self._near.forget(identity, tool_ids)
        key = self._key(identity)
        if tool_ids is None:
            sent = self._link.call_from_thread("learning write", _delete(key))
        elif tool_ids:
            sent = self._link.call_from_thread("learning write", _hdel(key, list(tool_ids)))
        else:
            return
        if sent is UNAVAILABLE:
            with self._lock:
                waiting = self._pending.setdefault(identity, _Waiting())
                if tool_ids is None:
                    waiting.clear, waiting.tools = True, {}
                else:
                    waiting.tools.update(dict.fromkeys(tool_ids))
        else:
            self._announce_from_thread(identity, None if tool_ids is None else list(tool_ids))

    # -- notices for the other nodes ----------------------------------------------------------

    def _notice(self, identity: str, tools: Sequence[str] | None) -> Callable[..., Any]:
        fields = {
            "node": self._node,
            "identity": _identity_hash(identity),
            "tools": "*" if tools is None else json.dumps(list(tools)),
        }

        async def send(client: coredis.Redis[bytes]) -> Any:
            return await _xadd(client, self._notices, fields, self._maxlen)

        return send

    def _announce_from_thread(self, identity: str, tools: Sequence[str] | None) -> None:
        # Best effort: a notice Redis misses costs the other nodes that change until they
        # read the tool again (a restart, or a later notice); the evidence itself is in Redis.
        self._link.call_from_thread("learning notice", self._notice(identity, tools))

    async def run_follower(
        self,
        reload: Callable[[tuple[str, ...] | None], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Read again the tools other nodes announce, for the identities this node loaded
        (``reload(tool_ids)``, ``None`` for every tool), in stream order, from now on."""

        async def handle(raw: Mapping[Any, Any]) -> None:
            fields = {_text(k): _text(v) for k, v in raw.items()}
            if not self._concerns_this_node(fields):
                return
            try:
                tools = _announced_tools(fields)
            except ValueError:
                return  # not a notice this version writes
            await self._read_again(self._identities[fields["identity"]], tools)
            await reload(tools)

        await follow(self._link, self._notices, "learning follow", handle, task_status=task_status)

    async def _read_again(self, identity: str, tools: tuple[str, ...] | None) -> None:
        """Bring the near tier to Redis's version of ``tools`` (``None``: every tool): a
        tool Redis no longer holds was forgotten there. Tools this node still owes Redis
        keep this node's entries (newer)."""
        shared = await self._link.call("learning read", _hgetall(self._key(identity)))
        if shared is UNAVAILABLE:
            return
        names = {field: field_name(field) for field in shared}
        held = {name: shared[field] for field, name in names.items() if name is not None}

        def apply() -> None:
            with self._lock:
                waiting = self._pending.get(identity)
                owed = set(waiting.tools) if waiting is not None else set()
            names = set(tools) if tools is not None else set(self._near.load(identity)) | set(held)
            for tool_id in names - owed:
                value = held.get(tool_id)
                read = _read(io.BytesIO(value), identity) if value is not None else None
                if isinstance(read, str) or (read is not None and read[0] != tool_id):
                    continue  # another version's record: never misread
                entries = read[1] if read is not None else ()
                self._near.save(identity, tool_id, entries)
                self._knows(identity, tool_id, entries)

        await trio.to_thread.run_sync(apply)

    def _concerns_this_node(self, fields: dict[str, str]) -> bool:
        """Another node's notice, of an identity this node serves."""
        return fields.get("node") != self._node and fields.get("identity") in self._identities

    async def _resync(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        items = list(pending.items())
        for at, (identity, waiting) in enumerate(items):
            if not await self._send(identity, waiting):
                # Down again: what was not sent waits for the next recovery, under what was
                # written meanwhile (newer).
                with self._lock:
                    for unsent, older in items[at:]:
                        later = self._pending.pop(unsent, None)
                        if later is not None:
                            older.clear = older.clear or later.clear
                            if later.clear:
                                older.tools = {}
                            older.tools.update(later.tools)
                        self._pending[unsent] = older
                return

    async def _send(self, identity: str, waiting: _Waiting) -> bool:
        """Send ``waiting`` (removing from it what went out); whether all of it did."""
        key = self._key(identity)
        if waiting.clear:
            if await self._link.call("learning resync", _delete(key)) is UNAVAILABLE:
                return False
            waiting.clear = False
            self._link.counters.writes_resynced += 1
            await self._link.call("learning notice", self._notice(identity, None))
        for tool_id, value in list(waiting.tools.items()):
            read = _read(io.BytesIO(value), identity) if value is not None else None
            sent: object
            if value is None:
                sent = await self._link.call("learning resync", _hdel(key, [tool_id]))
            elif isinstance(read, str) or read is None:  # never: this process encoded it
                sent = await self._link.call("learning resync", _hset(key, {tool_id: value}))
            else:  # merged with what the others learned meanwhile, as a save is
                merge = self._merge
                sent = await trio.to_thread.run_sync(merge, identity, tool_id, read[1])
            if sent is UNAVAILABLE:
                return False
            del waiting.tools[tool_id]
            self._link.counters.writes_resynced += 1
            await self._link.call("learning notice", self._notice(identity, [tool_id]))
        return True


def _same(old: Sequence[LearnedExample], new: Sequence[LearnedExample]) -> bool:
    return [e.digest for e in old] == [e.digest for e in new]


def _announced_tools(fields: dict[str, str]) -> tuple[str, ...] | None:
    """A notice's tool ids (``None``: every tool).

    Raises:
        ValueError: the notice is not one this version writes.
    """
    if fields.get("tools") == "*":
        return None
    tools = json.loads(fields.get("tools", ""))
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise ValueError("not a list of tool ids")
    return tuple(tools)
