"""Worker calls: the engine's CPU and model work off the event loop, counted so that leaving
the engine leaves none of it running.

A request abandons its embedding at its deadline, and shutdown cancels warm-up, but a worker
thread cannot be stopped: it runs on inside the model. If the interpreter exits meanwhile,
ONNX Runtime's threads are torn down under it and the process aborts (SIGABRT, "terminate
called without an active exception"). So every call goes through ``WorkerCalls``: a call
abandoned before its thread began never begins, and ``aclose`` waits (bounded) for the ones
already inside ``fn``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import trio

T = TypeVar("T")

RunCpu = Callable[..., Awaitable[Any]]

#: Seconds ``open_engine`` waits, on leaving, for model calls still running in worker
#: threads (one embedding batch takes well under a second on two cores; warm-up stops
#: between its batches).
SHUTDOWN_GRACE_S: Final = 10.0


async def run_in_thread(fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter) -> T:
    """The default CPU seam: a worker thread the caller may abandon when cancelled."""
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter, abandon_on_cancel=True)


class EngineClosing(trio.ClosedResourceError):
    """Raised to work asked of an engine that is shutting down (or to a warm-up that should
    stop between batches): nothing new starts inside the model."""


class _Call:
    """One worker call's state, shared by the trio side and the thread (under ``lock``)."""

    __slots__ = ("lock", "state")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state = "pending"  # -> "running" -> "done", or "pending" -> "dropped"


class WorkerCalls:
    """The engine's ``run_cpu``, counting calls in flight (threads abandoned included).

    Args:
        run_cpu: how work runs (``await run_cpu(fn, *args, limiter=...)``): a worker thread
            by default, inline under a mock clock.
    """

    def __init__(self, run_cpu: RunCpu = run_in_thread) -> None:
        self._run_cpu = run_cpu
        self._running = 0
        self._idle = trio.Event()
        self._idle.set()
        self._closing = False

    @property
    def running(self) -> int:
        """Calls started and not yet finished, abandoned ones included."""
        return self._running

    @property
    def closing(self) -> bool:
        return self._closing

    async def run(self, fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter) -> T:
        """``fn(*args)`` through the seam, counted until it really ends.

        Raises:
            EngineClosing: the engine is shutting down; ``fn`` was not started.
            Exception: whatever ``fn`` raised.

        **Cancellation:** the caller may give up at once (the thread is abandoned, still
        counted); a call whose thread had not begun ``fn`` yet never begins it.
        """
        if self._closing:
            raise EngineClosing("the engine is shutting down; no new model or CPU work starts")
        call = _Call()
        token = trio.lowlevel.current_trio_token()

        def tracked(*inner: Any) -> T:
            with call.lock:
                if call.state == "dropped":  # abandoned before it began: do nothing
                    raise EngineClosing("the caller gave up before the call began")
                call.state = "running"
            try:
                return fn(*inner)
            finally:
                with call.lock:
                    call.state = "done"
                # After the run is over nobody is counting any more.
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(self._finished)

        self._started()
        try:
            result: T = await self._run_cpu(tracked, *args, limiter=limiter)
            return result
        finally:
            with call.lock:
                never_ran = call.state == "pending"
                if never_ran:
                    call.state = "dropped"
            if never_ran:
                self._finished()

    async def aclose(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Start nothing new, and wait up to ``grace_s`` for the calls still running.

        **Cancellation:** shielded (it is cleanup), bounded by ``grace_s``.
        """
        self._closing = True
        with trio.move_on_after(grace_s, shield=True):
            await self._idle.wait()

    def _started(self) -> None:
        if self._running == 0:
            self._idle = trio.Event()
        self._running += 1

    def _finished(self) -> None:
        self._running -= 1
        if self._running == 0:
            self._idle.set()
