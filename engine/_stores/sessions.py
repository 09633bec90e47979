"""Per-session state, in a store bounded by count and idle time."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable

import attrs
import trio

from .._core.errors import ConfigError


@attrs.define
class SessionState:
    """What toolroute remembers about one agent conversation between steps.

    Attributes:
        idle_steps: consecutive steps in which the model called no tool (paging escalation).
        activated: tools the agent found through ``search_tools``; shown on its next step.
        forced_sets: tool sets the host forced; forced on every step until released.
        sticky_sets: tool sets an anchor activated, with the number of steps each stays forced.
        sticky_servers: MCP servers routing selected, with the routings each stays kept.
        last_seen: clock time of the last use (for idle expiry).
        lock: held by a runtime while it serves one step, so steps apply in arrival order
            (``trio.Lock`` is FIFO).
    """

    idle_steps: int = 0
    activated: tuple[str, ...] = ()
    forced_sets: tuple[str, ...] = ()
    sticky_sets: dict[str, int] = attrs.field(factory=dict)
    sticky_servers: dict[str, int] = attrs.field(factory=dict)
    last_seen: float = 0.0
    lock: trio.Lock = attrs.field(factory=trio.Lock, eq=False, repr=False)

    def force(self, names: Iterable[str]) -> None:
        self.forced_sets = tuple(dict.fromkeys((*self.forced_sets, *names)))

    def release(self, names: Collection[str]) -> None:
        """Stop forcing ``names``, whether the host forced them or an anchor made them sticky."""
        self.forced_sets = tuple(n for n in self.forced_sets if n not in names)
        for name in names:
            self.sticky_sets.pop(name, None)

    def step_sets(self) -> tuple[str, ...]:
        """The sets forced on this step (the host's, then the sticky ones); each sticky set
        has one step fewer to go."""
        carried = tuple(self.sticky_sets)
        self.sticky_sets = {n: left - 1 for n, left in self.sticky_sets.items() if left > 1}
        return tuple(dict.fromkeys((*self.forced_sets, *carried)))

    def remember(self, names: Iterable[str], steps: int) -> None:
        """Keep ``names`` forced for the next ``steps`` steps (0: not at all)."""
        if steps > 0:
            self.sticky_sets.update(dict.fromkeys(names, steps))

    def remember_servers(self, selected: Iterable[str], turns: int) -> None:
        """One routing happened: sticky servers have a turn fewer to go, and ``selected``
        stay kept for the next ``turns`` routings (0: not at all)."""
        self.sticky_servers = {s: left - 1 for s, left in self.sticky_servers.items() if left > 1}
        if turns > 0:
            self.sticky_servers.update(dict.fromkeys(selected, turns))


class SessionStore:
    """Least-recently-used sessions, at most ``max_sessions``, dropped after ``idle_s`` unused.

    A dropped session starts again from a fresh state: it costs one step of paging escalation
    and forgets the tool sets the host forced (pass ``force_sets`` again to restore them).

    Raises:
        ConfigError: a bound is not positive.
    """

    def __init__(
        self,
        *,
        max_sessions: int = 10_000,
        idle_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_sessions < 1:
            raise ConfigError(f"max_sessions must be at least 1, got {max_sessions}")
        if not idle_s > 0:
            raise ConfigError(f"idle_s must be positive, got {idle_s}")
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self._clock = clock
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session: object) -> bool:
        return session in self._sessions

    def get(self, session: str) -> SessionState:
        """The session's state, created fresh when unknown or expired; marks it used."""
        now = self._clock()
        self._expire(now)
        state = self._sessions.pop(session, None) or SessionState()
        state.last_seen = now
        self._sessions[session] = state
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return state

    def drop(self, session: str) -> None:
        self._sessions.pop(session, None)

    def _expire(self, now: float) -> None:
        # Oldest first: stop at the first session still fresh.
        while self._sessions:
            key, state = next(iter(self._sessions.items()))
            if now - state.last_seen < self.idle_s:
                break
            del self._sessions[key]
