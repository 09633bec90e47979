"""Public calls in flight in this process, so that background work stands aside for them.

Background fits run in a thread at the lowest CPU priority, but a CPU priority does not share
the interpreter: a fit's small numpy steps hold the GIL, and every turn of the event loop (a
request's scoring, its wake-up after the model) then waits for it. A warm burst of 200 on
BFCL while a refit ran: p99 967 ms against a 250 ms deadline. So background work asks
``stand_aside`` between its steps (each well under a millisecond of interpreter time), which
sleeps, holding nothing, while any public call of any engine in the process is in flight, and
for ``QUIET_S`` after the last one ended (a caller's next request usually follows at once).

The interpreter is the process's, so the count is too: a fit of one engine stands aside for
the requests of another. A process that is never idle never refits; its fast tier keeps the
table it has (the lowest priority, as the fit's nice value says).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

import trio

#: Seconds after the last public call ends before background work goes on.
QUIET_S: Final = 0.01
#: Seconds a background step sleeps before it looks again.
PAUSE_S: Final = 0.002


class Foreground:
    """Counts public calls in flight; background threads ``stand_aside`` while there are any."""

    def __init__(self, quiet_s: float = QUIET_S) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._quiet_s = quiet_s
        self._quiet_until = 0.0

    @contextmanager
    def serving(self) -> Iterator[None]:
        """The block is a public call (any thread, any event loop)."""
        with self._lock:
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                self._quiet_until = time.monotonic() + self._quiet_s

    def busy(self) -> bool:
        """A public call is in flight or ended less than ``quiet_s`` ago."""
        return self._active > 0 or time.monotonic() < self._quiet_until

    def stand_aside(self, should_stop: Callable[[], bool]) -> bool:
        """From background work between two steps: wait while ``busy``, then
        ``should_stop()`` (also asked while waiting, so leaving an engine is never delayed).

        On an event loop's own thread (background work run inline, as under a mock clock)
        it never waits: sleeping there would hold up the very calls it waits for.
        """
        while self.busy() and not _on_event_loop():
            if should_stop():
                return True
            time.sleep(PAUSE_S)
        return should_stop()


def _on_event_loop() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


#: The process's foreground: every engine's public calls, every engine's background work.
FOREGROUND: Final = Foreground()
