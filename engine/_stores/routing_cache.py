"""Routing outcomes in memory, per (session, routing query), with a time to live (the local
``RoutingCache``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

import attrs

V = TypeVar("V")


@attrs.define
class _Cached(Generic[V]):
    value: V
    expires: float


class MemoryRoutingCache(Generic[V]):
    """At most ``entries`` outcomes, least recently used dropped first, each kept ``ttl_s``."""

    def __init__(self, *, entries: int, ttl_s: float) -> None:
        self.entries = entries
        self.ttl_s = ttl_s
        self._cache: OrderedDict[tuple[str, str], _Cached[V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, key: tuple[str, str], now: float) -> V | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        if entry.expires <= now:
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return entry.value

    def put(self, key: tuple[str, str], value: V, now: float) -> None:
        self._cache[key] = _Cached(value, now + self.ttl_s)
        self._cache.move_to_end(key)
        while len(self._cache) > self.entries:
            self._cache.popitem(last=False)
