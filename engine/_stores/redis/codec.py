"""Routing outcomes as JSON, for the routing cache other nodes read.

The store does not know the runtime's outcome type; it is handed the attrs class and reads
and writes it with a private converter. A record that does not fit the class (written by
another version, say) reads as a miss: the request is routed again, never answered wrong.
"""

from __future__ import annotations

import json
from typing import Generic, TypeVar

import attrs
import cattrs

T = TypeVar("T")


class AttrsCodec(Generic[T]):
    """JSON for instances of one attrs class (``RoutingCodec``)."""

    def __init__(self, cls: type[T]) -> None:
        if not attrs.has(cls):
            raise TypeError(f"expected an attrs class, got {cls!r}")
        self._cls = cls
        self._converter = cattrs.Converter(forbid_extra_keys=True)

    def encode(self, value: object) -> str | None:
        if not isinstance(value, self._cls):
            return None
        try:
            return json.dumps(self._converter.unstructure(value), allow_nan=False)
        except (TypeError, ValueError):
            return None

    def decode(self, text: str) -> T | None:
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        try:
            value: T = self._converter.structure(data, self._cls)  # type: ignore[assignment]
        except (ValueError, TypeError, KeyError, cattrs.BaseValidationError):
            return None
        return value
