"""What the adapters share between a framework's hook and the engine: one step's narrowing.

An adapter hands the engine the conversation its framework holds, and gets back which of the
framework's tools to show. Tools are matched by the name the model sees (and by server for MCP
tools); a tool the engine's catalogue does not know is always shown, because the engine
cannot judge it (fail-open: more, never fewer).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import attrs

from .._core.catalog.catalog import Catalog
from .._core.errors import ConfigError, EngineCrashed
from .._core.select.conversation import Messages
from ..asyncio import AsyncioEngine
from ._hidden import Activations, OnHiddenCall, checked_mode

logger = logging.getLogger("toolroute.integrations")


def checked_engine(engine: object, adapter: str) -> AsyncioEngine:
    """``engine`` when it is the asyncio engine the framework hooks need.

    Raises:
        TypeError: anything else, saying how to open the right one.
    """
    if isinstance(engine, AsyncioEngine):
        return engine
    how = "open it with `async with toolroute.asyncio.open_engine(catalog) as engine:`"
    if type(engine).__name__ == "Engine" and type(engine).__module__.startswith("toolroute"):
        raise TypeError(
            f"{adapter} needs the asyncio engine, because the framework's hooks run on "
            f"asyncio: {how}; got the trio toolroute.Engine"
        )
    raise TypeError(
        f"{adapter} expected a toolroute.asyncio engine ({how}), got {type(engine).__name__}"
    )


@attrs.frozen
class Narrowing:
    """One step's answer: which tools the model may see, and why not all of them.

    Attributes:
        selected: names of the tools the engine chose, or ``None``: show every tool.
        known: every tool name the engine's catalogue has (a tool outside it is shown).
        keep: names shown whatever the engine chose (the search tool, activated tools).
        servers: ``(server, name)`` of the chosen tools that belong to an MCP server.
        known_on_servers: ``(server, name)`` of every catalogue tool that belongs to one: such
            a tool is matched on its own server, so a same-named tool elsewhere does not count.
        reason: why every tool is shown when the step failed open in the adapter.
    """

    selected: frozenset[str] | None
    known: frozenset[str]
    keep: frozenset[str] = frozenset()
    servers: frozenset[tuple[str, str]] | None = None
    known_on_servers: frozenset[tuple[str, str]] = frozenset()
    reason: str = ""

    def shows(self, name: str, server: str | None = None) -> bool:
        """Whether the tool ``name`` (of MCP server ``server``) is shown on this step."""
        if self.selected is None or name in self.keep:
            return True
        if server is not None and (server, name) in self.known_on_servers:
            return (server, name) in (self.servers or ())
        return name in self.selected or name not in self.known

    def filter(self, names: Iterable[str]) -> list[str]:
        """The shown ones of ``names``, in their order (a stable order keeps prompt caches)."""
        return [name for name in names if self.shows(name)]


def narrowing(
    catalog: Catalog,
    tool_ids: Sequence[str] | None,
    keep: Iterable[str] = (),
) -> Narrowing:
    """The narrowing for a step that selected ``tool_ids`` (``None``: every tool)."""
    known = frozenset(tool.name for tool in catalog.tools)
    known_on_servers = frozenset(
        (tool.server, tool.name) for tool in catalog.tools if tool.server is not None
    )
    if tool_ids is None:
        return Narrowing(None, known, frozenset(keep), None, known_on_servers)
    chosen = [catalog[i] for i in tool_ids if i in catalog]
    return Narrowing(
        selected=frozenset(tool.name for tool in chosen),
        known=known,
        keep=frozenset(keep),
        servers=frozenset((t.server, t.name) for t in chosen if t.server is not None),
        known_on_servers=known_on_servers,
    )


def every_tool(reason: str) -> Narrowing:
    """Show everything: the adapter could not judge this step."""
    return Narrowing(None, frozenset(), reason=reason)


class StepRouter:
    """One adapter's link to the engine: a step's narrowing, and the hidden-call rule's state.

    Args:
        engine: a ``toolroute.asyncio`` engine.
        adapter: the adapter's name, for error messages.
        on_hidden_call: ``"refuse"`` or ``"activate"`` (see ``_hidden``).
        search_tool: the name of the tool-search tool the model may be offered.
    """

    def __init__(
        self, engine: object, adapter: str, on_hidden_call: object, search_tool: str | None
    ) -> None:
        self.engine = checked_engine(engine, adapter)
        self.mode: OnHiddenCall = checked_mode(on_hidden_call)
        if search_tool is not None and not isinstance(search_tool, str):
            raise TypeError(
                f"search_tool must be a tool name or None, got {type(search_tool).__name__}"
            )
        self.search_tool = search_tool
        self.activations = Activations()

    async def narrow(self, messages: Messages, session: str | None) -> Narrowing:
        """The tools to show for the conversation ``messages`` on ``session``'s next step.

        **Fail-open:** a conversation the engine cannot read (a framework shape it does not
        know yet) or a crashed engine shows every tool, and logs why; a closed engine is
        the caller's mistake and raises.
        """
        keep = {*self.activations.of(session)}
        if self.search_tool is not None:
            keep.add(self.search_tool)
        try:
            step = await self.engine.prepare_step(messages, session=session)
        except (ConfigError, EngineCrashed) as exc:
            # The framework built this conversation, not the caller: a shape the reader does
            # not know is toolroute's gap, so the model sees every tool rather than none.
            logger.warning("toolroute shows every tool on this step: %s", exc)
            return every_tool(str(exc))
        return narrowing(self.engine.catalog, step.tool_ids, keep)
