"""The ``mcpServers`` configuration MCP clients use, read into one frozen spec per server.

Claude Desktop, Cursor, Windsurf and Claude Code write ``{"mcpServers": {name: entry}}``;
VS Code writes ``{"servers": {name: entry}}``. An entry is a stdio server (``command``,
``args``, ``env``, ``cwd``) or a remote one (``url``, ``headers``), optionally with
``type`` (``stdio``, ``http``, ``streamable-http``, ``streamableHttp``) and ``disabled``.
Keys other clients add (``alwaysAllow``, ``autoApprove``, ``timeout`` …) are ignored, so a
user's file works unchanged. A mistake in the file is a ``ConfigError`` naming the server and
the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import attrs

from ..._core.errors import ConfigError

_STDIO_TYPES = frozenset({"stdio"})
_HTTP_TYPES = frozenset({"http", "streamable-http", "streamableHttp", "streamable_http"})


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One upstream MCP server.

    Attributes:
        name: the key in the config; tools whose names clash across servers get the id
            ``f"{name}__{tool}"``.
        command, args, env, cwd: how to start a stdio server (``env`` is added to a safe
            default environment, ``HOME``, ``PATH``, ``USER`` and the like, not to the whole
            parent's: a variable the server needs, an API key say, goes in ``env``).
        url, headers: where a streamable-HTTP server listens, and the headers it needs.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


def read_mcp_config(source: object) -> tuple[McpServerConfig, ...]:
    """The servers of an MCP client's config: a path to its JSON file, the JSON text, or the
    parsed mapping (with ``mcpServers`` or ``servers``, or the server mapping itself).

    Raises:
        ConfigError: the file cannot be read, is not JSON, or an entry is malformed.
    """
    data = _load(source)
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected an MCP config object, got {type(data).__name__}")
    servers = data.get("mcpServers", data.get("servers"))
    if servers is None:
        if any(isinstance(v, Mapping) and ("command" in v or "url" in v) for v in data.values()):
            servers = data  # the server mapping on its own
        else:
            raise ConfigError(
                "expected an MCP config with an 'mcpServers' (or 'servers') object, "
                f"got the keys {sorted(map(str, data))}"
            )
    if not isinstance(servers, Mapping):
        raise ConfigError(f"'mcpServers' must be an object, got {type(servers).__name__}")
    specs = []
    for name, entry in servers.items():
        spec = _server(str(name), entry)
        if spec is not None:
            specs.append(spec)
    return tuple(specs)


def _load(source: object) -> object:
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and not source.lstrip().startswith("{")
    ):
        path = os.fspath(source)
        try:
            with open(path, encoding="utf-8-sig") as file:  # a BOM, as Windows editors write
                text = file.read()
        except OSError as exc:
            raise ConfigError(f"cannot read the MCP config {path!r}: {exc.strerror}") from None
        return _parsed(text, path)
    if isinstance(source, str):
        return _parsed(source, "the MCP config text")
    return source


def _parsed(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where} is not JSON: {exc}") from None


def _server(name: str, entry: object) -> McpServerConfig | None:
    where = f"MCP server {name!r}"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected an object, got {type(entry).__name__}")
    if entry.get("disabled") is True:
        return None
    kind = entry.get("type", entry.get("transport"))
    if kind is not None and kind not in _STDIO_TYPES | _HTTP_TYPES:
        raise ConfigError(
            f"{where}: field 'type' must be 'stdio' or 'http' (streamable HTTP), got {kind!r}"
            + (" (the SSE transport is not supported)" if kind == "sse" else "")
        )
    command, url = entry.get("command"), entry.get("url")
    if command is not None and url is not None:
        raise ConfigError(f"{where}: give 'command' (stdio) or 'url' (HTTP), not both")
    if command is not None or kind in _STDIO_TYPES:
        if not isinstance(command, str) or not command:
            raise ConfigError(
                f"{where}: field 'command' must be a non-empty string, got {command!r}"
            )
        return McpServerConfig(
            name=name,
            command=command,
            args=_strings(entry.get("args", []), where, "args"),
            env=_string_map(entry.get("env", {}), where, "env"),
            cwd=_optional_string(entry.get("cwd"), where, "cwd"),
        )
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{where}: expected 'command' (stdio) or an http(s) 'url', got url={url!r}"
        )
    return McpServerConfig(
        name=name, url=url, headers=_string_map(entry.get("headers", {}), where, "headers")
    )


def _strings(value: Any, where: str, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: field {field!r} must be a list of strings, got {value!r}")
    return tuple(value)


def _string_map(value: Any, where: str, field: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{where}: field {field!r} must map strings to strings, got {value!r}")
    return dict(value)


def _optional_string(value: Any, where: str, field: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{where}: field {field!r} must be a string, got {value!r}")
    return value
