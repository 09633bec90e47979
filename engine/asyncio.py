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
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import outcome
import trio

from ._core.catalog import Catalog, Tool
from ._core.decision import DecisionRequest, DecisionResult
from ._core.public import publish as _publish
from ._core.selection import Selection
from ._routing.pipeline import RoutingOutcome
from ._runtime.engine import Engine, StepSelection
from ._runtime.engine import open_engine as open_trio_engine

__all__ = ["AsyncioEngine", "open_engine"]

T = TypeVar("T")

_hosts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _GuestRun] = (
    weakref.WeakKeyDictionary()
)


class _GuestRun:
    """One trio guest run on one asyncio loop, and the nursery its jobs run in."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.users = 0
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._started: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._stop: trio.Event | None = None

    def start(self) -> Awaitable[None]:
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            done_callback=self._finished,
            host_uses_signal_set_wakeup_fd=True,
        )
        return self._started

    async def _main(self) -> None:
        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._started.set_result(None)
            await self._stop.wait()
            nursery.cancel_scope.cancel("asyncio host closed the last engine")

    def _finished(self, result: outcome.Outcome[None]) -> None:
        if self._done.done():
            return
        if isinstance(result, outcome.Error):
            self._done.set_exception(result.error)
        else:
            self._done.set_result(None)

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in trio and await it from asyncio; cancelling this cancels that."""
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

    async def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            self._token.run_sync_soon(self._stop.set)
        await self._done


def _asyncio_error(exc: BaseException) -> BaseException:
    return asyncio.CancelledError() if isinstance(exc, trio.Cancelled) else exc


class AsyncioEngine:
    """The ``Engine`` operations as asyncio awaitables."""

    def __init__(self, host: _GuestRun, engine: Engine) -> None:
        self._host = host
        self.engine = engine

    @property
    def catalog(self) -> Catalog:
        return self.engine.catalog

    async def ready(self) -> None:
        await self._host.call(self.engine.ready)

    async def select(self, query: str, **options: Any) -> Selection:
        return await self._host.call(self.engine.select, query, **options)

    async def prepare_step(
        self, messages: Sequence[Mapping[str, Any]], *, session: str | None = None, **sets: Any
    ) -> StepSelection:
        """As ``Engine.prepare_step``; ``sets`` are ``force_sets`` and ``release_sets``."""
        return await self._host.call(self.engine.prepare_step, messages, session=session, **sets)

    def release_sets(self, session: str, names: Iterable[str]) -> None:
        self.engine.release_sets(session, names)

    async def decide(self, request: DecisionRequest, **options: Any) -> DecisionResult:
        return await self._host.call(self.engine.decide, request, **options)

    async def try_decide(self, request: DecisionRequest, **options: Any) -> DecisionResult | None:
        return await self._host.call(self.engine.try_decide, request, **options)

    async def route_servers(
        self, query: str | Sequence[Mapping[str, Any]], **options: Any
    ) -> RoutingOutcome:
        return await self._host.call(self.engine.route_servers, query, **options)

    async def search_tools(
        self, arguments: object, *, session: str | None = None
    ) -> dict[str, Any]:
        return await self._host.call(self.engine.search_tools, arguments, session=session)

    async def update(
        self, *, add: Sequence[Tool] = (), remove: Sequence[str] = (), replace: Sequence[Tool] = ()
    ) -> None:
        await self._host.call(self.engine.update, add=add, remove=remove, replace=replace)


@contextlib.asynccontextmanager
async def open_engine(catalog: Catalog, **options: Any) -> AsyncIterator[AsyncioEngine]:
    """``toolroute.open_engine`` for a running asyncio loop; same arguments.

    **Resource handling:** leaving the block closes the engine; the guest run stops with the
    last engine on its loop.
    """
    loop = asyncio.get_running_loop()
    host = _hosts.get(loop)
    if host is None:
        host = _hosts[loop] = _GuestRun(loop)
        await host.start()
    host.users += 1
    opened: asyncio.Future[Engine] = loop.create_future()
    close = trio.Event()

    async def keep_open() -> None:
        async with open_trio_engine(catalog, **options) as engine:
            opened.set_result(engine)
            await close.wait()

    serving = asyncio.ensure_future(host.call(keep_open))
    try:
        waiting: set[asyncio.Future[Any]] = {opened, serving}
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if serving in done:
            serving.result()  # opening failed: raise its error here
        yield AsyncioEngine(host, opened.result())
    finally:
        if host._token is not None:
            host._token.run_sync_soon(close.set)
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        host.users -= 1
        if host.users == 0:
            del _hosts[loop]
            await host.stop()


_publish(__name__, globals())
