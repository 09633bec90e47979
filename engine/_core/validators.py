"""attrs validators that raise ``ConfigError`` naming what was expected and what came."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeAlias

import attrs

from .errors import ConfigError

Check: TypeAlias = Callable[[object, "attrs.Attribute[Any]", Any], None]


def rule(ok: Callable[[Any], bool], expected: str) -> Check:
    """A validator: ``<field> must be <expected>, got <value>`` unless ``ok(value)``."""

    def check(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not ok(value):
            raise ConfigError(f"{attribute.name} must be {expected}, got {value!r}")

    return check


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
