"""The fast tier as an engine service: built after warm-up, then fitted to served traffic.

The tier is opened in the background once the catalogue's tool vectors exist (the bundled
model's table ships with the package, so a first build is a fit on the catalogue: ~1.7 s of
CPU for BFCL's 1,702 tools; afterwards it loads from the cache). Until it is open, and until
its table was fitted on at least ``load.min_served`` requests the full tier answered (by
default none: fitted on the catalogue's text it already ranks above keyword-only), recall
does not use it.

Background work (the build, every fit) runs in a thread of its own at the lowest CPU
priority (``at_low_priority``), so a foreground request's model call wins any contest for a
core; between its steps it stands aside while public calls crowd (``FOREGROUND``: a CPU
priority does not share the interpreter), and it stops once the engine is leaving
(``WorkerCalls.closing``): shutdown never waits for a fit. The service runs under the
engine's supervisor.

Every request the full tier answers is a free training pair. Pairs wait in memory (at most
``load.learn_buffer``; the oldest go first) and are learned and refitted in a worker thread;
the old table keeps serving meanwhile. Fits get rarer as the tier learns (the gap doubles
with what it has learned, from ``load.refit_every``), so a busy server does not spend a core
refitting. Only statistics reach the disk, never request text.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt
import trio

from .._core.config import LoadConfig
from .._core.events import Event, FailOpen
from .._core.protocols import FastTierModel as FastTierModel
from .._core.recall.index import RecallIndex, brief
from .foreground import FOREGROUND
from .workers import EngineClosing, WorkerCalls

Vectors = npt.NDArray[np.float32]
T = TypeVar("T")

#: ``opener(index, should_stop)``: the fast tier for ``index``'s tool vectors (background).
Opener = Callable[[RecallIndex, Callable[[], bool]], FastTierModel]

#: Served requests learned between two ``should_stop`` calls of a fit.
_LEARN_SLICE: Final = 128

#: The nice value of background threads: the lowest priority an unprivileged thread can take.
BACKGROUND_NICE: Final = 19


def at_low_priority(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a fresh thread at the lowest CPU priority; waits for it.

    A fresh thread, because an unprivileged thread cannot raise its priority again: lowering
    a pooled worker thread would slow every later model call that lands on it. The calling
    (worker) thread only waits. On Linux a nice value is per thread; elsewhere the work runs
    at normal priority.

    Raises:
        Exception: whatever ``fn`` raised.
    """
    outcome: list[Any] = []

    def target() -> None:
        if sys.platform == "linux":
            # A sandbox may forbid it: then normal priority, still interruptible.
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
        try:
            outcome.append((True, fn(*args)))
        except BaseException as exc:  # handed back to the waiting thread as it is
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name="toolroute-background", daemon=True)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    result: T = value
    return result


class FastTierService:
    """Holds the engine's fast tier; ``run`` builds it and keeps it learning.

    Args:
        opener: builds or loads the tier (runs in the background).
        config: the engine's ``load`` section.
        workers: where the build and the fits run.
        publish: the event hub's ``publish``.
        background: how a build or fit runs inside its worker call (``at_low_priority`` by
            default; tests under a mock clock pass a plain call).
    """

    def __init__(
        self,
        opener: Opener,
        *,
        config: LoadConfig,
        workers: WorkerCalls,
        publish: Callable[[Event], None],
        background: Callable[..., Any] = at_low_priority,
    ) -> None:
        self._opener = opener
        self._config = config
        self._workers = workers
        self._publish = publish
        self._background = background
        self._tier: FastTierModel | None = None
        self._fitted_served = 0  # served requests the table in use was fitted on
        self._pairs: collections.deque[tuple[str, Vectors]] = collections.deque(
            maxlen=config.learn_buffer
        )
        self._learned_since_fit = 0
        self._wanted = trio.Event()
        self._limiter = trio.CapacityLimiter(1)  # background work: one thread at most
        self.failure = ""

    @property
    def usable(self) -> FastTierModel | None:
        """The tier, once open and fitted on at least ``min_served`` served requests."""
        if self._tier is None or self._fitted_served < self._config.min_served:
            return None
        return self._tier

    @property
    def served(self) -> int:
        """Served requests the table in use was fitted on."""
        return self._fitted_served

    @property
    def is_open(self) -> bool:
        return self._tier is not None

    def offer(self, text: str, vector: Vectors) -> None:
        """One request the full tier answered, to learn from (dropped if learning is off)."""
        if not self._config.learn or self._tier is None:
            return
        # A copy: the row is a view into its batch's matrix, which it would keep alive.
        self._pairs.append((text, np.array(vector, dtype=np.float32)))
        due = max(1, self._next_fit_gap() - self._learned_since_fit)
        if len(self._pairs) >= min(due, self._config.learn_buffer):
            self._wanted.set()

    async def run(
        self,
        index_of: Callable[[], RecallIndex],
        ready: Callable[[], object],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Open the tier once the catalogue is embedded, then learn until cancelled.

        Started (``task_status``) at once: it waits for warm-up in the background. A restart
        after a crash keeps a tier already open.

        **Fail-open:** a failed build publishes ``fail_open`` (``fast tier``) and leaves recall
        with its other rungs; a failed fit keeps the old table. Nothing raises.
        """
        task_status.started()
        await ready()  # type: ignore[misc]
        if self._tier is None:
            index = index_of()
            if index.vectors is None:
                return  # the catalogue has no vectors to compare with: no fast tier
            try:
                tier: FastTierModel = await self._workers.run(
                    self._background, self._opener, index, self._stopping, limiter=self._limiter
                )
            except EngineClosing:
                return
            except Exception as exc:
                if self._workers.closing:
                    return  # stopped because the engine is leaving: not a failure
                self._fail("open_engine", f"the fast tier could not be built: {brief(exc)}")
                return
            self._fitted_served = tier.served_texts
            self._tier = tier
        await self._learn_forever(index_of)

    def _stopping(self) -> bool:
        """Asked by background work between its steps (from its thread): it stands aside
        while public calls crowd (``FOREGROUND``), then says whether the engine is leaving."""
        return FOREGROUND.stand_aside(self._is_closing)

    def _is_closing(self) -> bool:
        return self._workers.closing

    async def _learn_forever(self, index_of: Callable[[], RecallIndex]) -> None:
        assert self._tier is not None
        tier, known = self._tier, index_of()
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            pairs = list(self._pairs)
            self._pairs.clear()
            index = index_of()
            new_tools = index if index is not known and index.vectors is not None else None
            self._learned_since_fit += len(pairs)
            refit = new_tools is not None or self._learned_since_fit >= self._next_fit_gap()
            try:
                await self._workers.run(
                    self._background, self._fit, tier, pairs, new_tools, refit, self._stopping,
                    limiter=self._limiter,
                )  # fmt: skip
            except EngineClosing:
                return
            except Exception as exc:
                if self._workers.closing:
                    return  # stopped because the engine is leaving: not a failure
                self._fail("select", f"the fast tier's fit failed (old table kept): {brief(exc)}")
                continue
            known = index
            if refit:
                self._learned_since_fit = 0
                self._fitted_served = tier.served_texts

    @staticmethod
    def _fit(
        tier: FastTierModel,
        pairs: list[tuple[str, Vectors]],
        index: RecallIndex | None,
        refit: bool,
        should_stop: Callable[[], bool],
    ) -> None:
        """In the background: learn (milliseconds), then refit and persist when due."""
        if index is not None and index.vectors is not None:
            tier.learn_tools(index.embedding_texts(), index.vectors.matrix)
        # In slices, standing aside between them (a slice: a few ms of interpreter time).
        for first in range(0, len(pairs), _LEARN_SLICE):
            if should_stop():
                return
            part = pairs[first : first + _LEARN_SLICE]
            tier.learn([text for text, _ in part], np.stack([v for _, v in part]))
        if refit:
            tier.refit(should_stop=should_stop)
            tier.save()

    def _next_fit_gap(self) -> int:
        return max(self._config.refit_every, self._fitted_served)

    def _fail(self, operation: str, reason: str) -> None:
        self.failure = reason
        self._publish(FailOpen(operation=operation, what_failed="fast tier", reason=reason))
