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
    """

    id: str
    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    server: str | None = None
    annotations: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    title: str | None = None


@attrs.frozen
class Server:
    """A server (or namespace) and the ids of its tools, in catalogue order."""

    id: str
    description: str = ""
    tool_ids: tuple[str, ...] = ()
