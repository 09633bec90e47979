"""The engine for asyncio hosts (FastAPI, Starlette, agent SDKs), through trio guest mode.

::

    from toolroute.asyncio import open_engine

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with open_engine(catalog) as engine:   # asyncio awaitables from here on
            app.state.tools = engine
            yield

    selection = await app.state.tools.select("weather in Oslo")

trio runs as a guest on the host's asyncio loop, in the same thread
(``trio.lowlevel.start_guest_run``). There is one guest run per asyncio loop; it hosts every
engine opened on that loop (one per catalogue) and stops when the last one closes.
Cancelling an awaitable (as a web server does when a client goes away) cancels the trio work
behind it.

A web server stops in two steps: it waits for the responses still open, then runs the
lifespan's shutdown (where the engine closes). A subscription streamed to a client would hold
the first step for ever, so the guest run ends every subscription when the process is asked
to stop (SIGINT or SIGTERM, chained before the handler that was installed, as uvicorn's is),
and a stop that cancels the host's tasks (a second Ctrl-C) still waits for the guest run to
finish before the loop closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import outcome
import trio

from ._core.catalog.catalog import Catalog
from ._core.catalog.dedup import DedupResult
from ._core.config import EngineConfig
from ._core.protocols import Decider, Embedder, Generator
from ._core.public import publish as _publish
from ._core.recall.index import RecallIndex
from ._core.select.toolsets import ToolSet
from ._core.stores import Stores
from ._routing.pipeline import route_servers as trio_route_servers
from ._runtime.asyncio_streams import Deliveries, StopSignals
from ._runtime.engine import _DEFAULT, Engine
from ._runtime.engine import open_engine as open_trio_engine
from ._runtime.hub import Delivery
from ._runtime.stateless import decide as trio_decide
from ._runtime.stateless import try_decide as trio_try_decide
from ._runtime.statistics import EngineStatistics
from ._runtime.workers import RunCpu, run_in_thread

if TYPE_CHECKING:
    from ._core.catalog.tool import Tool
    from ._stores.redis.link import RedisStatistics
    from ._stores.redis.shared import RedisStores

__all__ = [
    "AsyncioEngine",
    "AsyncioRedisStores",
    "decide",
    "open_engine",
    "open_redis_stores",
    "route_servers",
    "try_decide",
]

T = TypeVar("T")
P = ParamSpec("P")

#: Each loop's guest run, from its start until it has ended (trio allows one run per thread,
#: so a loop's next guest run starts only once the one before it has ended).
_hosts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _GuestRun] = (
    weakref.WeakKeyDictionary()
)


logger = logging.getLogger("toolroute.asyncio")


def _retrieved(future: asyncio.Future[None]) -> None:
    # Every waiter gets the run's error; this only keeps asyncio from logging it again as
    # "never retrieved" when the waiters had gone (cancelled) before it came.
    if not future.cancelled():
        future.exception()


class _GuestRun:
    """One trio guest run on one asyncio loop, and the nursery its jobs run in.

    Its users are counted from the moment they ask for it, before it has started, so a user
    that gives up while it starts cannot stop it under another one waiting for the same start.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.users = 0
        #: Set once the last user has left: the run is ending and takes no new users.
        self.stopping = False
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._started: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._started.add_done_callback(_retrieved)
        self._done.add_done_callback(_retrieved)
        #: Open subscriptions' channels, ended when the process is asked to stop.
        self.streams: set[trio.MemoryReceiveChannel[Delivery]] = set()
        #: Set by a stop signal: streams end, and new ones end at once.
        self.streams_ended = False
        self._signals = StopSignals(loop, self.end_streams)

    def start(self) -> None:
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            done_callback=self._finished,
            host_uses_signal_set_wakeup_fd=True,
        )
        self._signals.chain()

    def end_streams(self) -> None:
        """End every open subscription: its iteration stops (what is buffered is dropped)."""
        if not self.streams_ended:
            logger.info("stop requested: ending %d open subscription(s)", len(self.streams))
        self.streams_ended = True
        if self._token is None:
            return
        for channel in list(self.streams):
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(channel.close)

    async def wait_started(self) -> None:
        """Until the run takes jobs; raises the run's error if it ended before that."""
        # Shielded: the future is shared by every user waiting for this start.
        await asyncio.shield(self._started)

    async def wait_finished(self) -> None:
        """Until the run has ended; raises the run's error if it failed."""
        await asyncio.shield(self._done)

    async def wait_ended(self) -> None:
        """Until the run has ended, whatever its result (that is its last user's to see)."""
        await asyncio.wait([self._done])

    def request_stop(self) -> None:
        """End the run once its jobs are cancelled; idempotent, and valid before it started."""
        if self.stopping:
            return
        self.stopping = True
        if self._token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._stop.set)
        # Otherwise ``_main`` has not run yet and reads ``stopping`` when it does.

    async def _main(self) -> None:
        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._started.set_result(None)
            if not self.stopping:  # every user may have left while the run was starting
                await self._stop.wait()
            nursery.cancel_scope.cancel("asyncio host closed the last engine")

    def _finished(self, result: outcome.Outcome[None]) -> None:
        self._signals.unchain()
        if _hosts.get(self.loop) is self:
            del _hosts[self.loop]
        error = result.error if isinstance(result, outcome.Error) else None
        if not self._started.done():
            self._started.set_exception(
                error or RuntimeError("the trio guest run ended before it started")
            )
        if self._done.done():
            return
        if error is not None:
            self._done.set_exception(error)
        else:
            self._done.set_result(None)

    def check_loop(self) -> None:
        """Raise when called from another loop than this run's (before anything runs).

        Raises:
            RuntimeError: the caller is on another event loop (another thread's, or the one
                a framework's ``run_sync`` starts), saying how to reach this one.
        """
        if asyncio.get_running_loop() is not self.loop:
            raise RuntimeError(
                "this toolroute.asyncio engine runs on the event loop it was opened on, and "
                "was called from another loop (another thread's, or one a framework's "
                "run_sync/invoke starts): await it on its own loop, or from another thread "
                "use asyncio.run_coroutine_threadsafe(coroutine, loop).result() with the "
                "engine's loop"
            )

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in trio and await it from asyncio; cancelling this cancels that."""
        self.check_loop()
        future: asyncio.Future[T] = self.loop.create_future()
        scope = trio.CancelScope()

        async def job() -> None:
            try:
                with scope:
                    result = await fn(*args, **kwargs)
            except BaseException as exc:
                if not future.done():
                    future.set_exception(_asyncio_error(exc))
                if not isinstance(exc, Exception):
                    raise  # Cancelled and friends keep propagating in trio
                return  # ordinary errors are the asyncio caller's to handle
            if not future.done():
                if scope.cancelled_caught:
                    future.set_exception(asyncio.CancelledError())
                else:
                    future.set_result(result)

        assert self._token is not None
        assert self._nursery is not None
        nursery = self._nursery
        self._token.run_sync_soon(nursery.start_soon, job)
        try:
            return await future
        except asyncio.CancelledError:
            self._token.run_sync_soon(scope.cancel)
            raise

    @contextlib.asynccontextmanager
    async def entered(
        self, manager: Callable[[], AbstractAsyncContextManager[T]]
    ) -> AsyncIterator[T]:
        """Enter ``manager()`` in trio and keep it entered while the asyncio block runs."""
        self.check_loop()
        opened: asyncio.Future[T] = self.loop.create_future()
        close = trio.Event()

        async def keep_open() -> None:
            async with manager() as value:
                opened.set_result(value)
                await close.wait()

        serving = asyncio.ensure_future(self.call(keep_open))
        try:
            waiting: set[asyncio.Future[Any]] = {opened, serving}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if serving in done:
                serving.result()  # entering failed: raise its error here
            yield opened.result()
        finally:
            if self._token is not None:
                with contextlib.suppress(trio.RunFinishedError):
                    self._token.run_sync_soon(close.set)
            with contextlib.suppress(asyncio.CancelledError):
                await serving


@contextlib.asynccontextmanager
async def _guest() -> AsyncIterator[_GuestRun]:
    """The running loop's guest run, started for this block if it has none yet.

    Concurrent first uses share one start; a block that begins while the last user's close
    is stopping the run waits for that run to end, then starts a fresh one.
    """
    host = await _join(asyncio.get_running_loop())
    try:
        yield host
    finally:
        if _leave(host):
            await _despite_cancellation(host.wait_finished())


async def _despite_cancellation(waiting: Awaitable[None]) -> None:
    """Await ``waiting`` to its end even if this task is cancelled meanwhile, then re-raise
    the cancellation: a host stopping its tasks (``asyncio.run``'s end, a forced server
    exit) must not close the loop under a guest run that is still finishing. The run ends
    within the engine's shutdown grace, so the wait is bounded."""
    task = asyncio.ensure_future(waiting)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise  # the wait itself was cancelled: nothing left to protect
            cancelled = True
            continue
        break
    if cancelled:
        raise asyncio.CancelledError


async def _join(loop: asyncio.AbstractEventLoop) -> _GuestRun:
    while True:
        host = _hosts.get(loop)
        if host is None:
            host = _hosts[loop] = _GuestRun(loop)
            try:
                host.start()
            except BaseException:
                del _hosts[loop]
                raise
        if host.stopping:
            await host.wait_ended()  # it leaves ``_hosts`` as it ends
            continue
        host.users += 1  # counted before the start is awaited: see ``_GuestRun``
        try:
            await host.wait_started()
        except BaseException:
            _leave(host)
            raise
        return host


def _leave(host: _GuestRun) -> bool:
    """Count one user out; ``True`` when it was the last, and the run is now stopping."""
    host.users -= 1
    if host.users > 0:
        return False
    host.request_stop()
    return True


def _asyncio_error(exc: BaseException) -> BaseException:
    return asyncio.CancelledError() if isinstance(exc, trio.Cancelled) else exc


def _forward(
    method: Callable[Concatenate[Engine, P], Awaitable[T]],
) -> Callable[Concatenate[AsyncioEngine, P], Coroutine[Any, Any, T]]:
    """``Engine.<method>`` as an asyncio coroutine method with the same signature and
    docstring: written once, so the two surfaces cannot drift."""
    name = method.__name__

    @functools.wraps(method)
    async def forward(self: AsyncioEngine, /, *args: P.args, **kwargs: P.kwargs) -> T:
        # Checked here too: the loop's guest run may have ended with the engine's block.
        self.engine._check_open(name)
        return await self._host.call(getattr(self.engine, name), *args, **kwargs)

    forward.__qualname__ = f"AsyncioEngine.{name}"  # tracebacks name the asyncio side
    return forward


def _in_guest(function: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """A stateless trio entry point as an asyncio coroutine function, same signature."""

    @functools.wraps(function)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        async with _guest() as host:
            return await host.call(function, *args, **kwargs)

    return run


class AsyncioEngine:
    """Every ``Engine`` operation, for asyncio: coroutines for the async ones (cancelling
    the awaitable cancels the trio work), the rest as they are (same thread).

    The coroutine methods are generated from ``Engine``'s: same names, same parameters, same
    docstrings (read "the caller's cancel scope" as "cancelling the awaitable").
    """

    def __init__(self, host: _GuestRun, engine: Engine) -> None:
        self._host = host
        #: The trio ``Engine`` behind this one.
        self.engine = engine

    @property
    def config(self) -> EngineConfig:
        """As ``Engine.config``."""
        return self.engine.config

    @property
    def catalog(self) -> Catalog:
        """As ``Engine.catalog``."""
        return self.engine.catalog

    @property
    def index(self) -> RecallIndex:
        """As ``Engine.index``."""
        return self.engine.index

    @property
    def dedup(self) -> DedupResult:
        """As ``Engine.dedup``."""
        return self.engine.dedup

    @property
    def tool_sets(self) -> tuple[ToolSet, ...]:
        """As ``Engine.tool_sets``."""
        return self.engine.tool_sets

    def statistics(self) -> EngineStatistics:
        """As ``Engine.statistics``."""
        return self.engine.statistics()

    @property
    def decider(self) -> Decider | None:
        """As ``Engine.decider``."""
        return self.engine.decider

    @functools.wraps(Engine.providers_of)
    def providers_of(self, tool_id: str) -> tuple[str, ...]:
        return self.engine.providers_of(tool_id)

    @functools.wraps(Engine.release_sets)
    def release_sets(self, session: str, names: Any) -> None:
        self.engine.release_sets(session, names)

    def subscribe(
        self, buffer: int | None = None, *, snapshot: bool = True
    ) -> AbstractAsyncContextManager[AsyncIterator[Delivery]]:
        """As ``Engine.subscribe``, from asyncio (the first delivery is the
        ``subscription.started`` snapshot unless ``snapshot=False``)::

            async with engine.subscribe(buffer=64) as deliveries:
                async for delivery in deliveries:
                    print(delivery.dropped, to_json(delivery.event))

        The subscriber's buffer and its drop count work as in trio: a slow asyncio consumer
        loses events (counted), it never slows the engine.
        """
        return self._subscription(buffer, snapshot)

    @contextlib.asynccontextmanager
    async def _subscription(
        self, buffer: int | None, snapshot: bool
    ) -> AsyncIterator[AsyncIterator[Delivery]]:
        self.engine._check_open("subscribe")
        self._host.check_loop()
        # A user of the guest run of its own: a consumer still draining keeps it alive.
        async with (
            _guest() as host,
            host.entered(lambda: self.engine.subscribe(buffer, snapshot=snapshot)) as channel,
        ):
            host.streams.add(channel)
            deliveries = Deliveries(
                functools.partial(host.call, channel.receive), lambda: host.streams_ended
            )
            try:
                yield deliveries
            finally:
                host.streams.discard(channel)
                deliveries.close()

    ready = _forward(Engine.ready)
    select = _forward(Engine.select)
    prepare_step = _forward(Engine.prepare_step)
    update = _forward(Engine.update)
    replace_catalog = _forward(Engine.replace_catalog)
    decide = _forward(Engine.decide)
    try_decide = _forward(Engine.try_decide)
    route_servers = _forward(Engine.route_servers)
    search_tools = _forward(Engine.search_tools)
    learn = _forward(Engine.learn)
    forget = _forward(Engine.forget)
    reload_learned = _forward(Engine.reload_learned)


#: ``toolroute.route_servers`` for asyncio (same arguments; a guest run for the call).
route_servers = _in_guest(trio_route_servers)
#: ``toolroute.decide`` for asyncio.
decide = _in_guest(trio_decide)
#: ``toolroute.try_decide`` for asyncio.
try_decide = _in_guest(trio_try_decide)


@contextlib.asynccontextmanager
async def open_engine(
    catalog: Catalog,
    *,
    config: EngineConfig | None = None,
    embedder: Embedder | None = _DEFAULT,
    run_cpu: RunCpu = run_in_thread,
    tool_sets: Sequence[ToolSet] = (),
    decider: Decider | None = _DEFAULT,
    generator: Generator | None = None,
    stores: Stores | None = None,
) -> AsyncIterator[AsyncioEngine]:
    """``toolroute.open_engine`` for a running asyncio loop; same arguments.

    Args:
        catalog, config, embedder, run_cpu, tool_sets, decider, generator, stores: as
            ``toolroute.open_engine``.

    Yields:
        An ``AsyncioEngine``.

    Raises:
        As ``toolroute.open_engine``, in the asyncio caller.

    **Cancellation:** cancelling the task in the block cancels it like any asyncio block.

    **Fail-open:** as ``toolroute.open_engine``.

    **Resource handling:** leaving the block closes the engine; the guest run stops with the
    last engine on its loop.
    """
    opening = functools.partial(
        open_trio_engine,
        catalog,
        config=config,
        embedder=embedder,
        run_cpu=run_cpu,
        tool_sets=tool_sets,
        decider=decider,
        generator=generator,
        stores=stores,
    )
    async with _guest() as host, host.entered(opening) as engine:
        yield AsyncioEngine(host, engine)


class AsyncioRedisStores:
    """``toolroute.redis.RedisStores`` for asyncio hosts (``open_redis_stores`` below): the
    same stores on the loop's guest run, ``attach`` and ``update`` awaited from asyncio."""

    def __init__(self, host: _GuestRun, shared: RedisStores) -> None:
        self._host = host
        #: The trio ``RedisStores`` underneath.
        self.shared = shared

    @property
    def stores(self) -> Stores:
        """The shared stores, for ``open_engine(..., stores=...)``."""
        return self.shared.stores

    def statistics(self) -> RedisStatistics:
        """What this node has counted (``RedisStores.statistics``)."""
        return self.shared.statistics()

    def attach(
        self, engine: AsyncioEngine, *, buffer: int = 4096
    ) -> AbstractAsyncContextManager[None]:
        """For the block: ``engine``'s events to the stream, the other nodes' catalogue
        changes into ``engine`` (``RedisStores.attach``)."""
        return self._host.entered(lambda: self.shared.attach(engine.engine, buffer=buffer))

    async def update(
        self,
        engine: AsyncioEngine,
        *,
        add: Sequence[Tool] = (),
        remove: Sequence[str] = (),
        replace: Sequence[Tool] = (),
    ) -> None:
        """``engine.update(...)`` here, then on every other attached node."""
        await self._host.call(
            self.shared.update, engine.engine, add=add, remove=remove, replace=replace
        )


@contextlib.asynccontextmanager
async def open_redis_stores(
    url: str,
    *,
    config: EngineConfig | None = None,
    namespace: str = "toolroute",
    node: str | None = None,
    deadline_s: float = 0.25,
    probe_interval_s: float = 0.5,
    lease_s: float = 5.0,
    lock_wait_s: float = 0.25,
    session_ttl_s: float | None = None,
    stream_maxlen: int = 100_000,
) -> AsyncIterator[AsyncioRedisStores]:
    """``toolroute.redis.open_redis_stores`` for a running asyncio loop; same arguments (the
    ``redis`` extra).

    ::

        async with tr.open_redis_stores("redis://127.0.0.1:6379") as shared:
            async with tr.open_engine(catalog, stores=shared.stores) as engine:
                async with shared.attach(engine):
                    ...

    Raises:
        ConfigError: as ``toolroute.redis.open_redis_stores``, in the asyncio caller.

    **Fail-open:** as ``toolroute.redis.open_redis_stores``.
    """
    from ._runtime.redis_stores import open_redis_stores as open_trio_stores

    opening = functools.partial(
        open_trio_stores,
        url,
        config=config,
        namespace=namespace,
        node=node,
        deadline_s=deadline_s,
        probe_interval_s=probe_interval_s,
        lease_s=lease_s,
        lock_wait_s=lock_wait_s,
        session_ttl_s=session_ttl_s,
        stream_maxlen=stream_maxlen,
    )
    async with _guest() as host, host.entered(opening) as shared:
        yield AsyncioRedisStores(host, shared)


_publish(__name__, globals())
