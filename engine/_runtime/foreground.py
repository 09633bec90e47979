"""Public calls in flight in this process, so that background work stands aside for them.

Background fits run in a thread at the lowest CPU priority, but a CPU priority does not share
the interpreter: a fit's small numpy steps hold the GIL, and a thread that wants it back waits
up to the switch interval (5 ms). Under a burst every turn of the event loop paid that (a warm
BFCL burst while a refit ran: p99 967 ms against a 250 ms deadline). So background work calls
``stand_aside`` between its steps (each well under a millisecond of interpreter time):

- while ``CROWD`` or more public calls (of any engine in the process) are in flight, and for
  ``QUIET_S`` after, it sleeps, holding nothing;
- after every step it hands the interpreter over at once (``time.sleep(0)``), so a request
  waits for one step at most, never for the switch interval;
- it never stands aside longer than ``MAX_ASIDE_S`` at a time: a process that is always busy
  still learns, one step per ``MAX_ASIDE_S`` (~1 % of one core's interpreter time).

A lone caller does not stop it: such a request spends most of its time inside the model, which
releases the interpreter, and a server answering one request after another must keep
learning from them (standing aside for every call left a warm engine's fast tier unfitted).
The interpreter is the process's, so the count is too: a fit of one engine stands aside for
the requests of another.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

import trio

#: Public calls in flight from which background work stands aside (a burst, not a lone call).
CROWD: Final = 2
#: Seconds after a crowd thinned out before background work goes on.
QUIET_S: Final = 0.01
#: Seconds a background step sleeps before it looks again.
PAUSE_S: Final = 0.002
#: Longest a background step stands aside: then it takes one step anyway.
MAX_ASIDE_S: Final = 0.1


class Foreground:
    """Counts public calls in flight; background threads ``stand_aside`` while they crowd."""

    def __init__(self, *, quiet_s: float = QUIET_S, max_aside_s: float = MAX_ASIDE_S) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._quiet_s = quiet_s
        self._max_aside_s = max_aside_s
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
                if self._active >= CROWD:
                    self._quiet_until = time.monotonic() + self._quiet_s
                self._active -= 1

    def busy(self) -> bool:
        """``CROWD`` or more public calls are in flight, or were less than ``quiet_s`` ago."""
        return self._active >= CROWD or time.monotonic() < self._quiet_until

    def stand_aside(self, should_stop: Callable[[], bool]) -> bool:
        """From background work between two steps: wait while ``busy`` (at most
        ``max_aside_s``), hand the interpreter over, then ``should_stop()`` (also asked while
        waiting, so leaving an engine is never delayed).

        On an event loop's own thread (background work run inline, as under a mock clock)
        it never waits: sleeping there would hold up the very calls it waits for.
        """
        if _on_event_loop():
            return should_stop()
        until = time.monotonic() + self._max_aside_s
        while self.busy() and time.monotonic() < until:
            if should_stop():
                return True
            time.sleep(PAUSE_S)
        time.sleep(0)  # a thread waiting for the interpreter takes it now
        return should_stop()


def _on_event_loop() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


#: The process's foreground: every engine's public calls, every engine's background work.
FOREGROUND: Final = Foreground()
