"""Per-session state in memory, bounded by count and idle time (the local ``SessionStore``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import attrs
import trio

from .._core.errors import ConfigError
from .._core.stores import SessionState

__all__ = ["MemorySessionStore", "SessionState"]


@attrs.define(eq=False)
class _Entry:
    state: SessionState
    holders: int = 0  # work holding the session (steps queued or running): never evicted


class MemorySessionStore:
    """Least-recently-used sessions, at most ``max_sessions``, dropped after ``idle_s`` unused.

    A dropped session starts again from a fresh state: it costs one step of paging escalation
    and forgets the tool sets the host forced (pass ``force_sets`` again to restore them). A
    held session (the step actor holds one while it has steps queued or running) is never
    dropped, by idle time or by count: the bound may be exceeded by the sessions in use, and
    is restored as they are released.

    Args:
        max_sessions: sessions kept at most (in use ones aside).
        idle_s: seconds unused after which a session is dropped.
        clock: the time source; ``trio.current_time`` by default, so a mock clock drives
            expiry like every other deadline of the engine.

    Raises:
        ConfigError: a bound is not positive.
    """

    def __init__(
        self,
        *,
        max_sessions: int = 10_000,
        idle_s: float = 3600.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if max_sessions < 1:
            raise ConfigError(f"max_sessions must be at least 1, got {max_sessions}")
        if not idle_s > 0:
            raise ConfigError(f"idle_s must be positive, got {idle_s}")
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self._clock = clock or trio.current_time
        self._sessions: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session: object) -> bool:
        return session in self._sessions

    def get(self, session: str) -> SessionState:
        """The session's state, created fresh when unknown or expired; marks it used."""
        return self._entry(session).state

    @asynccontextmanager
    async def hold(self, session: str) -> AsyncIterator[SessionState]:
        """See ``SessionStore.hold``: the state yielded is the one kept, looked up once.

        Holding never waits: the order of a session's steps is the step actor's (its inbox),
        not the store's; every holder of a session changes the one state."""
        entry = self._entry(session, holding=True)
        try:
            # No checkpoint: holding is bookkeeping, and the step actor pays for it per step.
            yield entry.state
        finally:
            entry.holders -= 1
            entry.state.last_seen = self._clock()
            if self._sessions.get(session) is entry:
                self._sessions.move_to_end(session)  # in use until now: the most recent
            self._trim()

    def update_nowait(self, session: str, change: Callable[[SessionState], None]) -> None:
        entry = self._sessions.get(session)
        if entry is not None:
            change(entry.state)

    def drop(self, session: str) -> None:
        self._sessions.pop(session, None)

    def _entry(self, session: str, *, holding: bool = False) -> _Entry:
        now = self._clock()
        self._expire(now)
        entry = self._sessions.pop(session, None) or _Entry(SessionState())
        entry.state.last_seen = now
        if holding:  # before trimming: the session about to be held is in use already
            entry.holders += 1
        self._sessions[session] = entry
        self._trim()
        return entry

    def _expire(self, now: float) -> None:
        # Oldest first: stop at the first idle-fresh session; sessions in use are skipped.
        # No copy of the whole map: this runs on every step, and the map holds up to
        # ``max_sessions`` entries; only the expired ones are collected.
        expired = []
        for key, entry in self._sessions.items():
            if now - entry.state.last_seen < self.idle_s:
                break
            if not entry.holders:
                expired.append(key)
        for key in expired:
            del self._sessions[key]

    def _trim(self) -> None:
        excess = len(self._sessions) - self.max_sessions
        if excess <= 0:
            return
        # Oldest first, stopping once enough idle sessions are found: at the bound this runs
        # on every new session, so scanning the whole map would cost O(max_sessions) a step.
        idle = []
        for key, entry in self._sessions.items():
            if not entry.holders:
                idle.append(key)
                if len(idle) == excess:
                    break
        for key in idle:
            del self._sessions[key]
