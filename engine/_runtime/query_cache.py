"""The query-embedding cache: exact request text -> the full tier's vector, bounded by count.

One per engine, shared by every caller: a step that repeats its turn's user message, or a
popular request, costs no model call. Entries belong to one embedder and one vector width;
``get``/``put`` with another identity clear the cache first, so a vector of another model
is never served.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


class QueryCache:
    """Least recently used request vectors, at most ``size`` of them (0: off).

    Args:
        size: how many vectors are kept.

    Attributes:
        hits: lookups answered from the cache.
        misses: lookups that were not (each costs a model call, or a degraded answer).
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._owner: tuple[str, int] | None = None
        self._vectors: OrderedDict[str, Vector] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._vectors)

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before any lookup)."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def get(self, text: str, owner: tuple[str, int]) -> Vector | None:
        """The vector ``owner`` (embedder identity, width) gave ``text``, if kept; counted."""
        self._claim(owner)
        vector = self._vectors.get(text)
        if vector is None:
            self.misses += 1
            return None
        self._vectors.move_to_end(text)
        self.hits += 1
        return vector

    def put(self, text: str, vector: Vector, owner: tuple[str, int]) -> None:
        """Keep ``vector`` as ``owner``'s vector of ``text`` (read-only; the oldest goes)."""
        if self._size == 0:
            return
        self._claim(owner)
        vector = vector.copy()
        vector.setflags(write=False)  # shared by every caller: nobody may change it
        self._vectors[text] = vector
        self._vectors.move_to_end(text)
        while len(self._vectors) > self._size:
            self._vectors.popitem(last=False)

    def _claim(self, owner: tuple[str, int]) -> None:
        if owner != self._owner:
            self._vectors.clear()
            self._owner = owner
