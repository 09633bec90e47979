"""Embedding and enrichment caches shared by every node through Redis, each in front of a
local near tier (the disk caches).

Keys follow the disk cache: a Redis hash per embedder identity,
``<namespace>:emb:<sha256(identity)>``, whose fields are the 32-byte ``sha256(text)`` and
whose values are the vector as little-endian float32 (a value of another width is ignored);
enrichment phrases live in ``<namespace>:enrich:<sha256(identity)>``, a field per tool key
holding the phrases as JSON.

Both are synchronous (``EmbeddingStore``, ``EnrichmentStore``): the engine calls them from
worker threads, and each Redis round trip hops onto the event loop under the link's
deadline. A read Redis cannot answer is a miss of the shared tier only (the near tier still
answers); a write it cannot take is kept, bounded, and sent when Redis returns.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt

from ..._core.stores import EmbeddingStore, EnrichmentStore
from ..embedding_cache import text_key
from .link import UNAVAILABLE, RedisLink

if TYPE_CHECKING:
    import coredis

T = TypeVar("T")
#: One Redis round trip, run by the link under its deadline.
Command: TypeAlias = "Callable[[coredis.Redis[bytes]], Awaitable[T]]"

#: Fields per Redis command: one call stays well inside its deadline (512 rows of 384
#: float32 are 0.8 MB).
CHUNK: Final = 512
#: Vectors kept for Redis while it is down; past this the oldest are dropped (counted).
MAX_PENDING: Final = 200_000


def _hmget(key: str, fields: Sequence[bytes]) -> Command[tuple[bytes | None, ...]]:
    async def command(client: coredis.Redis[bytes]) -> tuple[bytes | None, ...]:
        return await client.hmget(key, fields)

    return command


def _hset(
    key: str, values: Mapping[bytes, bytes] | Mapping[str, str] | Mapping[str, bytes]
) -> Command[int]:
    fields: dict[str | bytes, str | bytes] = {k: v for k, v in values.items()}  # noqa: C416

    async def command(client: coredis.Redis[bytes]) -> int:
        return await client.hset(key, fields)

    return command


def _hgetall(key: str) -> Command[dict[bytes, bytes]]:
    async def command(client: coredis.Redis[bytes]) -> dict[bytes, bytes]:
        return dict(await client.hgetall(key))

    return command


def _identity_hash(identity: str) -> str:
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()


class RedisEmbeddingStore:
    """Vectors shared through Redis, with ``near`` (a local store) in front.

    A lookup asks ``near`` first, then Redis for what it lacked (and keeps what Redis had in
    ``near``); a write goes to both.
    """

    def __init__(
        self, link: RedisLink, near: EmbeddingStore | None, *, max_pending: int = MAX_PENDING
    ) -> None:
        self._link = link
        self._near = near
        self._max_pending = max_pending
        self._lock = threading.Lock()
        # identity -> text key -> vector bytes, waiting for Redis (insertion order: oldest first)
        self._pending: dict[str, dict[bytes, bytes]] = {}
        self.from_redis = 0  # vectors the shared tier answered
        link.on_resync(self._resync, self.pending)

    def pending(self) -> int:
        with self._lock:
            return sum(len(rows) for rows in self._pending.values())

    def get_many(
        self, identity: str, dim: int, texts: Sequence[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        if self._near is not None:
            vectors, found = self._near.get_many(identity, dim, texts)
        else:
            vectors = np.zeros((len(texts), dim), dtype=np.float32)
            found = np.zeros(len(texts), dtype=np.bool_)
        missing = np.flatnonzero(~found).tolist()
        if not missing:
            return vectors, found
        key = self._link.key("emb", _identity_hash(identity))
        fetched: list[int] = []
        for start in range(0, len(missing), CHUNK):
            chunk = missing[start : start + CHUNK]
            fields = [text_key(texts[i]) for i in chunk]
            values = self._link.call_from_thread("embeddings read", _hmget(key, fields))
            if values is UNAVAILABLE:
                break
            for i, value in zip(chunk, values, strict=True):
                row = _vector(value, dim)
                if row is not None:
                    vectors[i] = row
                    found[i] = True
                    fetched.append(i)
        if fetched:
            self.from_redis += len(fetched)
            if self._near is not None:
                self._near.put_many(identity, [texts[i] for i in fetched], vectors[fetched])
        return vectors, found

    def put_many(
        self, identity: str, texts: Sequence[str], vectors: npt.NDArray[np.floating]
    ) -> None:
        array = np.asarray(vectors, dtype="<f4")
        if array.ndim != 2 or array.shape[0] != len(texts):
            raise ValueError(f"expected vectors of shape ({len(texts)}, dim), got {array.shape}")
        if self._near is not None:
            self._near.put_many(identity, texts, array)
        finite = np.all(np.isfinite(array), axis=1).tolist()
        rows = {text_key(t): array[i].tobytes() for i, t in enumerate(texts) if finite[i]}
        if rows:
            self._send(identity, rows)

    def _send(self, identity: str, rows: Mapping[bytes, bytes]) -> None:
        """Write ``rows`` to Redis; what it does not take waits for its return."""
        key = self._link.key("emb", _identity_hash(identity))
        items = list(rows.items())
        for start in range(0, len(items), CHUNK):
            chunk = dict(items[start : start + CHUNK])
            sent = self._link.call_from_thread("embeddings write", _hset(key, chunk))
            if sent is UNAVAILABLE:
                self._keep(identity, dict(items[start:]))
                return

    def _keep(self, identity: str, rows: Mapping[bytes, bytes]) -> None:
        with self._lock:
            waiting = self._pending.setdefault(identity, {})
            waiting.update(rows)
            total = sum(len(r) for r in self._pending.values())
            while total > self._max_pending and waiting:
                del waiting[next(iter(waiting))]
                self._link.counters.writes_dropped += 1
                total -= 1

    async def _resync(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for identity, rows in pending.items():
            key = self._link.key("emb", _identity_hash(identity))
            items = list(rows.items())
            for start in range(0, len(items), CHUNK):
                chunk = dict(items[start : start + CHUNK])
                sent = await self._link.call("embeddings resync", _hset(key, chunk))
                if sent is UNAVAILABLE:  # down again: keep the rest for the next recovery
                    self._keep(identity, dict(items[start:]))
                    break
                self._link.counters.writes_resynced += len(chunk)


def _vector(value: bytes | None, dim: int) -> npt.NDArray[np.float32] | None:
    if value is None or len(value) != 4 * dim:
        return None  # another width (another embedder build) never serves a wrong vector
    row = np.frombuffer(value, dtype="<f4")
    return row if bool(np.all(np.isfinite(row))) else None


class RedisEnrichmentStore:
    """Enrichment phrases shared through Redis, with ``near`` (a local store) in front."""

    def __init__(self, link: RedisLink, near: EnrichmentStore | None) -> None:
        self._link = link
        self._near = near
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, str]] = {}
        link.on_resync(self._resync, self.pending)

    def pending(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._pending.values())

    def load(self, identity: str) -> dict[str, tuple[str, ...]]:
        entries = self._near.load(identity) if self._near is not None else {}
        key = self._link.key("enrich", _identity_hash(identity))
        shared = self._link.call_from_thread("enrichment read", _hgetall(key))
        if shared is UNAVAILABLE:
            return entries
        fresh: dict[str, tuple[str, ...]] = {}
        for field, value in shared.items():
            phrases = _phrases(value)
            name = field_name(field)
            if name is not None and phrases is not None and entries.get(name) != phrases:
                fresh[name] = phrases
        if fresh:
            entries.update(fresh)
            if self._near is not None:
                self._near.save(identity, fresh)
        return entries

    def save(self, identity: str, entries: Mapping[str, Sequence[str]]) -> None:
        if self._near is not None:
            self._near.save(identity, entries)
        encoded = {k: json.dumps(list(v), ensure_ascii=False) for k, v in entries.items()}
        if not encoded:
            return
        key = self._link.key("enrich", _identity_hash(identity))
        sent = self._link.call_from_thread("enrichment write", _hset(key, encoded))
        if sent is UNAVAILABLE:
            with self._lock:
                self._pending.setdefault(identity, {}).update(encoded)

    async def _resync(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for identity, encoded in pending.items():
            key = self._link.key("enrich", _identity_hash(identity))
            sent = await self._link.call("enrichment resync", _hset(key, encoded))
            if sent is UNAVAILABLE:
                with self._lock:
                    self._pending.setdefault(identity, {}).update(encoded)
                break
            self._link.counters.writes_resynced += len(encoded)


def field_name(field: bytes) -> str | None:
    """A hash field's name (a tool's key or id); ``None`` for bytes toolroute never writes
    (not UTF-8: another program's field), which are skipped."""
    try:
        return field.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def _phrases(value: bytes) -> tuple[str, ...] | None:
    try:
        decoded = json.loads(value.decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(decoded, list) or not all(isinstance(p, str) for p in decoded):
        return None
    return tuple(decoded)
