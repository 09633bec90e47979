"""Running the service: one engine, the trio HTTP server, and a graceful stop on signals.

Why trio and not the asyncio bridge: the engine is trio-native, and on the same machine the
trio server answered ``select`` with less overhead than uvicorn with the guest-mode bridge,
and than Hypercorn's trio worker (``tests/bench/bench_serve.py --compare``; the figures are
in ``docs/service.md``).
"""

from __future__ import annotations

import ipaddress
import signal
from collections.abc import Callable
from typing import Any

import trio

from .._core.catalog.catalog import Catalog
from .._core.errors import ConfigError
from .._runtime.engine import Engine, open_engine
from .app import ServeApp
from .http11 import Limits, serve_http


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine (``localhost``, 127/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve to anything
        return False


def check_token_rule(host: str, token: str | None, token_env: str) -> None:
    """Refuse to listen beyond loopback without a bearer token.

    Raises:
        ConfigError: ``host`` is not loopback and ``token`` is empty.
    """
    if not token and not is_loopback(host):
        raise ConfigError(
            f"expected a bearer token in ${token_env} to listen on {host!r} (beyond "
            f"loopback), got none; set it, or listen on 127.0.0.1"
        )


async def serve_engine(
    engine: Engine,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    max_body_bytes: int = 1 << 20,
    max_connections: int = 1000,
    request_timeout_s: float = 30.0,
    head_timeout_s: float = 5.0,
    grace_s: float = 10.0,
    announce: Callable[[str], None] = print,
    listeners: list[trio.SocketListener] | None = None,
) -> None:
    """Serve ``engine`` until SIGINT or SIGTERM, then finish the requests in flight.

    The first signal drains: ``/ready`` answers 503, event streams send what was published
    and end, the listener closes, and requests in flight get ``grace_s`` seconds to finish.
    A second signal stops at once.

    At most ``max_connections`` connections are served at once (past it, a request is
    answered ``503``, the probes still answer), and a request has ``request_timeout_s`` to
    arrive whole and ``head_timeout_s`` for its line and headers (else ``408``; a connection
    that sends nothing is closed after ``head_timeout_s``).

    Raises:
        ConfigError: the bind address is beyond loopback and there is no token, or the
            address cannot be listened on.
    """
    check_token_rule(host, token, "the token variable")
    app = ServeApp(engine, token=token or None, max_body_bytes=max_body_bytes)
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        if listeners is None:
            listeners = await listen(host, port)
        async with trio.open_nursery() as nursery:

            async def on_signals() -> None:
                async for _ in signals:
                    if stop.is_set():
                        nursery.cancel_scope.cancel("second signal: stop now")
                        return
                    app.drain()
                    stop.set()

            async def when_ready() -> None:
                await engine.ready()
                app.mark_ready()

            async def run_http(*, task_status: trio.TaskStatus[None]) -> None:
                await serve_http(app, listeners, stop, limits, task_status=task_status)
                # Every request in flight has finished (or the grace ran out): done.
                nursery.cancel_scope.cancel("served")

            limits = Limits(
                max_connections=max_connections,
                request_timeout_s=request_timeout_s,
                head_timeout_s=head_timeout_s,
                grace_s=grace_s,
            )
            nursery.start_soon(on_signals)
            nursery.start_soon(when_ready)
            await nursery.start(run_http)
            announce(f"toolroute serve: listening on {_url(listeners[0])}")


def _url(listener: trio.SocketListener) -> str:
    host, port = listener.socket.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def listen(host: str, port: int) -> list[trio.SocketListener]:
    """Listeners on ``host:port``.

    Raises:
        ConfigError: the port is in use, the address is not this machine's, or the like.
    """
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def serve_catalog(catalog: Catalog, engine_options: dict[str, Any], **options: Any) -> None:
    """Open an engine over ``catalog`` and serve it (``serve_engine``'s options); the port
    is taken first, so a port in use is said before a model loads."""
    listeners = await listen(options.get("host", "127.0.0.1"), options.get("port", 8765))
    async with open_engine(catalog, **engine_options) as engine:
        await serve_engine(engine, listeners=listeners, **options)
