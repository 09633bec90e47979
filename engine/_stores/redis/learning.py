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
out when Redis returns. Two nodes saving one tool at once: the last write stands (each writes
the whole bounded list it holds).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import attrs

from ..._core.stores import LearnedExample, LearningStore
from ..learning import _encoded, _read
from .caches import Command, _hgetall, _hset, _identity_hash
from .link import UNAVAILABLE, RedisLink

if TYPE_CHECKING:
    import coredis


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

    def __init__(self, link: RedisLink, near: LearningStore) -> None:
        self._link = link
        self._near = near
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
            tool_id = field.decode("utf-8", "surrogatepass")
            if tool_id in owed:
                continue  # this node's newer entries wait for Redis: they stand
            read = _read(io.BytesIO(value), identity)
            if isinstance(read, str) or read[0] != tool_id or not read[1]:
                continue  # another version's record, or a mislabelled one: never misread
            entries = read[1]
            if not _same(found.get(tool_id, ()), entries):
                found[tool_id] = entries
                self._near.save(identity, tool_id, entries)
            self.from_redis += 1
        return found

    def save(self, identity: str, tool_id: str, entries: Sequence[LearnedExample]) -> None:
        self._near.save(identity, tool_id, entries)
        value = _encoded(identity, tool_id, entries) if entries else None
        key = self._key(identity)
        if value is None:
            sent = self._link.call_from_thread("learning write", _hdel(key, [tool_id]))
        else:
            sent = self._link.call_from_thread("learning write", _hset(key, {tool_id: value}))
        if sent is UNAVAILABLE:
            with self._lock:
                self._pending.setdefault(identity, _Waiting()).tools[tool_id] = value

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
        for tool_id, value in list(waiting.tools.items()):
            if value is None:
                sent = await self._link.call("learning resync", _hdel(key, [tool_id]))
            else:
                sent = await self._link.call("learning resync", _hset(key, {tool_id: value}))
            if sent is UNAVAILABLE:
                return False
            del waiting.tools[tool_id]
            self._link.counters.writes_resynced += 1
        return True


def _same(old: Sequence[LearnedExample], new: Sequence[LearnedExample]) -> bool:
    return [e.digest for e in old] == [e.digest for e in new]
