"""A tool and a server as the agent's model sees them (the leaf every reader builds)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ..errors import ConfigError

#: Separator between server and tool name in a qualified tool id (keeps OpenAI's name rule).
QUALIFIER = "__"


def id_tuple(value: Iterable[str], field: str) -> tuple[str, ...]:
    """A list of ids (or names) as a de-duplicated tuple; a bare string is a mistake."""
    if isinstance(value, str):
        raise ConfigError(f"{field} must be a list, not the string {value!r}")
    return tuple(dict.fromkeys(value))


def example_tuple(value: Iterable[str]) -> tuple[str, ...]:
    """Example requests as a tuple of distinct non-empty strings, in order.

    Raises:
        ConfigError: ``value`` is a bare string or holds something that is not a string.
    """
    if isinstance(value, str):
        raise ConfigError(f"examples must be a list of strings, not the string {value!r}")
    try:
        items = tuple(value)
    except TypeError:
        raise ConfigError(
            f"examples must be a list of strings, got {type(value).__name__}"
        ) from None
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(
                f"examples must be a list of strings, got an item of type {type(item).__name__}"
            )
    return tuple(dict.fromkeys(text.strip() for text in items if text.strip()))


@attrs.frozen
class Tool:
    """One tool as the agent's model sees it.

    Attributes:
        id: unique within a catalogue; defaults to ``name``. Readers that import several
            servers set ``f"{server}__{name}"`` when names clash.
        name: the name the model sees (never checked against a vendor's character rule).
        description: free text; may be empty.
        parameters: JSON Schema of the arguments (``{}`` when the tool takes none). Treat it
            as read-only: the catalogue shares it with every selection it serves.
        server: the MCP server or namespace the tool comes from, if any.
        annotations: MCP annotations (``readOnlyHint`` …) or other host metadata.
        title: a human-readable title (MCP ``title``), if any.
        examples: example requests this tool serves (keyword-only; a list of strings, kept
            in order without repeats). Recall ranks a request near one of them higher; they
            are never shown to the model.
    """

    id: str
    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    server: str | None = None
    annotations: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    title: str | None = None
    examples: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=example_tuple)


@attrs.frozen
class Server:
    """A server (or namespace) and the ids of its tools, in catalogue order."""

    id: str
    description: str = ""
    tool_ids: tuple[str, ...] = ()
