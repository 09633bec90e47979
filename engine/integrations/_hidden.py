"""The one rule every adapter applies to a call of a tool the selection hid.

A model sometimes calls a tool it was not shown (it remembers it from an earlier step, or
guesses a name). Frameworks answer that differently — Pydantic AI spends a retry, the Agents
SDK ends the run with ``ModelBehaviorError``, LangChain runs the tool anyway — so each adapter
routes the call here instead, and the answer is the same everywhere:

- ``on_hidden_call="refuse"`` (the default): the tool does not run; the model gets a tool
  result saying so, and what to do next (call ``search_tools`` where it is offered, else use
  a tool it was shown);
- ``on_hidden_call="activate"``: the tool is activated for the session — shown on every later
  step of it — and runs where the framework lets an adapter run it.

Never a crash of the run, never a silent execution of a hidden tool. This module imports no
framework and no engine: it is plain bookkeeping the adapters share.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Literal, TypeAlias

from .._core.errors import ConfigError

#: What an adapter does with a call to a tool the selection hid.
OnHiddenCall: TypeAlias = Literal["refuse", "activate"]

_MODES = ("refuse", "activate")
#: Sessions whose activations are remembered; the oldest is forgotten first.
MAX_SESSIONS = 10_000
#: How many shown tools a refusal names when no search tool is offered.
_NAMED_IN_REFUSAL = 8


def checked_mode(value: object) -> OnHiddenCall:
    """``value`` as an ``OnHiddenCall``.

    Raises:
        ConfigError: ``value`` is not ``"refuse"`` or ``"activate"``.
    """
    if value == "refuse":
        return "refuse"
    if value == "activate":
        return "activate"
    raise ConfigError(
        f"on_hidden_call must be one of {', '.join(map(repr, _MODES))}, got {value!r}"
    )


def refusal(tool: str, *, search_tool: str | None, shown: Iterable[str]) -> str:
    """The tool result that tells the model its call of ``tool`` was not run, and what to do.

    Args:
        tool: the hidden tool the model called.
        search_tool: the name of the tool-search tool when the model is offered one.
        shown: the tools the model was shown on this step.
    """
    head = f"The tool {tool!r} is not available on this step, so it was not run."
    if search_tool is not None:
        return (
            f"{head} Call {search_tool!r} with a few words describing what you need; the "
            f"tools it finds can be called on your next step."
        )
    names = sorted(name for name in set(shown) if name != tool)
    if not names:
        return f"{head} Answer without calling a tool."
    listed = ", ".join(repr(name) for name in names[:_NAMED_IN_REFUSAL])
    more = ", …" if len(names) > _NAMED_IN_REFUSAL else ""
    return f"{head} Use one of the tools you were shown ({listed}{more}) or answer without one."


def activation_note(tool: str) -> str:
    """The tool result when the framework cannot run an activated tool in the same turn."""
    return (
        f"The tool {tool!r} was not available on this step, so it was not run; it is "
        f"available from your next step on: call it again."
    )


class Activations:
    """The tools each session activated by calling them while hidden (``activate`` mode).

    Bounded: past ``max_sessions`` the session used least recently is forgotten (its tools
    are then selected on their merits again, as for a new conversation).
    """

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._max = max_sessions
        self._tools: OrderedDict[str, frozenset[str]] = OrderedDict()

    def of(self, session: str | None) -> frozenset[str]:
        """The tools ``session`` activated (none without a session)."""
        if session is None:
            return frozenset()
        tools = self._tools.get(session)
        if tools is None:
            return frozenset()
        self._tools.move_to_end(session)
        return tools

    def activate(self, session: str | None, tool: str) -> None:
        """Show ``tool`` on every later step of ``session`` (nothing to keep without one)."""
        if session is None:
            return
        self._tools[session] = self.of(session) | {tool}
        self._tools.move_to_end(session)
        while len(self._tools) > self._max:
            self._tools.popitem(last=False)

    def __len__(self) -> int:
        return len(self._tools)
