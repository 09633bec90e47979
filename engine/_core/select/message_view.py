"""What every conversation reader shares: the ``Turn`` a message reduces to, a view of any
message object as a mapping (read by shape, never by importing its framework), and error
wording that names what came without quoting the caller's text."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

import attrs

from ..errors import ConfigError

#: How many keys or fields an error lists before it says "…".
SHOWN_KEYS = 8


@attrs.frozen
class Turn:
    """One message reduced to what routing needs."""

    role: str
    text: str
    tool_calls: tuple[str, ...] = ()
    is_tool_result: bool = False


def make_turn(role: str, texts: Sequence[str], calls: Sequence[str], tool_result: bool) -> Turn:
    """A turn from a message's texts and calls; a tool result carries no request text."""
    text = "" if tool_result else " ".join(t for t in texts if t.strip())
    return Turn(role, text.strip(), tuple(calls), tool_result)


def as_mapping(value: object, where: str) -> Mapping[str, Any]:
    """A message (or block, part, call) as a mapping, read by its shape.

    A dict as it is; a pydantic model (vendor SDK types, LangChain messages, MCP types) as
    its ``model_dump()``; a dataclass (Pydantic AI messages and parts, Agents run items) as
    its fields, without copying them.

    Raises:
        ConfigError: none of these, or a ``model_dump`` that fails.
    """
    if isinstance(value, Mapping):
        return value
    if isinstance(value, type):
        raise ConfigError(f"{where}: expected an object, got the class {value.__name__}")
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            dumped = dump(exclude_none=True)
        except Exception as exc:  # a caller's object that cannot describe itself
            raise ConfigError(f"{where}: cannot read {type(value).__name__}: {exc}") from exc
        if isinstance(dumped, Mapping):
            return dumped
    if dataclasses.is_dataclass(value):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    raise ConfigError(
        f"{where}: expected an object, got {shape(value)}; objects are read as dicts, "
        "pydantic models or dataclasses"
    )


def is_list(value: object) -> TypeGuard[Sequence[Any]]:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def shape(value: object) -> str:
    """What came, for an error: its type and keys (or length), never its text."""
    name = type(value).__name__
    if value is None or isinstance(value, bool | int | float):
        return f"{name} {value!r}"
    if isinstance(value, str):
        return f"{name} ({len(value)} characters)"
    if isinstance(value, bytes | bytearray):
        return f"{name} ({len(value)} bytes)"
    if isinstance(value, Mapping):
        return f"{name} with keys {listed(value.keys())}" if value else f"empty {name}"
    if isinstance(value, Sequence):
        return f"{name} of {len(value)} items"
    return name


def listed(keys: Iterable[object]) -> str:
    """Keys as ``'a', 'b', …`` (at most ``SHOWN_KEYS``), for an error message."""
    names = [repr(str(key)) for key in keys]
    more = ", …" if len(names) > SHOWN_KEYS else ""
    return ", ".join(names[:SHOWN_KEYS]) + more


def text_of(value: object) -> str | None:
    """The value when it is a string, else ``None``."""
    return value if isinstance(value, str) else None
