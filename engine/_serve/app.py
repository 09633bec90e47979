"""The ASGI application: authentication, body limits, JSON errors, the routes, and events.

It runs under any ASGI server and either event loop: its only concurrency is anyio's, and
the engine it is given is the trio ``Engine`` (under the service's own trio server, the
default) or the asyncio one (``toolroute.asyncio``, under uvicorn, say), whose operations
have the same names.

Errors are ``{"error": {"type", "message", "field"}}``: 400 for a body that is not JSON or
does not fit its schema, 422 for a value the engine refused (``ConfigError``,
``CatalogError``), 401 without the bearer token, 413 past the size limit, 404/405 for a
path or method the table does not have. Fail-open results are 200s: the engine says
``degraded`` or ``failed_open`` in the body.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any
from urllib.parse import parse_qs

import anyio

from .. import __version__
from .._core.errors import CatalogError, ConfigError
from .._core.events import to_json
from .._runtime.engine import Engine
from .openapi import openapi_document
from .routes import Route, routes_for
from .schema import BodyError, check, got

log = logging.getLogger("toolroute.serve")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: Paths answered without the token: a load balancer's probes carry none, and say nothing.
OPEN_PATHS = frozenset({"/health", "/ready"})
EVENTS_PATH = "/v1/events"
#: The scope extension the service's server sets on a request past its connection cap.
AT_CAPACITY = "toolroute.at_capacity"
#: Once draining, an event stream ends when no event has come for this long (the ones
#: published before the stop are already buffered: they come at once).
FLUSH_S = 0.1
_JSON = [(b"content-type", b"application/json")]


class ServeError(Exception):
    """An error answered as JSON; ``kind`` is its ``error.type``."""

    def __init__(
        self, status: int, kind: str, message: str, field: str | None = None, **headers: str
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.field = status, kind, message, field
        self.headers = headers


class ServeApp:
    """One engine as an HTTP service (ASGI 3).

    Args:
        engine: the engine to serve (trio ``Engine`` or ``toolroute.asyncio``'s).
        token: the bearer token every request but the probes must carry; ``None`` for none.
        max_body_bytes: the largest request body accepted (413 past it).
        heartbeat_s: seconds between comment lines on an idle event stream, so proxies and
            clients see it alive.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        token: str | None = None,
        max_body_bytes: int = 1 << 20,
        heartbeat_s: float = 15.0,
    ) -> None:
        self.engine = engine
        self.routes: Mapping[str, Route] = routes_for(engine)
        self.openapi = json.dumps(openapi_document(self.routes.values())).encode()
        self._token = None if token is None else token.encode()
        self.max_body_bytes = max_body_bytes
        self.heartbeat_s = heartbeat_s
        self.warmed = False
        self.draining = False
        #: The event streams' waits for their next event; ``drain`` cuts them short.
        self._waits: set[anyio.CancelScope] = set()

    def mark_ready(self) -> None:
        """Warm-up has finished: ``/ready`` answers 200 from now on (until draining)."""
        self.warmed = True

    def drain(self) -> None:
        """Shutdown has begun: ``/ready`` answers 503 and event streams end once they have
        sent the events already published; requests in flight (and any still arriving
        before the listener closes) are served."""
        self.draining = True
        for wait in self._waits:
            wait.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            await self._dispatch(scope, receive, send)
        except ServeError as exc:
            await _send_error(send, exc)
        except Exception:
            # Our fault, not the caller's: said once in the log, answered as JSON.
            log.exception("toolroute serve: %s %s failed", scope["method"], scope["path"])
            await _send_error(send, ServeError(500, "internal", "the service failed; see its log"))

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if path not in OPEN_PATHS:
            self._authenticate(scope)
        # The probes and the document answer HEAD too (monitors probe with it); the
        # transport sends a HEAD answer's head only.
        if path == "/health":
            _allow(method, "GET", "HEAD")
            await send_json(send, 200, {"status": "ok", "version": __version__})
        elif path == "/ready":
            _allow(method, "GET", "HEAD")
            await self._ready(scope, send)
        elif path == "/openapi.json":
            _allow(method, "GET", "HEAD")
            await _send(send, 200, self.openapi, _JSON)
        elif path == EVENTS_PATH:
            _allow(method, "GET")
            await self._events(scope, receive, send)
        elif path in self.routes:
            _allow(method, "POST")
            await self._json_route(self.routes[path], scope, receive, send)
        else:
            raise ServeError(404, "not_found", f"no route {path!r}; see /openapi.json")

    def _authenticate(self, scope: Scope) -> None:
        if self._token is None:
            return
        given = _header(scope, b"authorization")
        scheme, _, credential = given.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(credential, self._token):
            what = "no Authorization header" if not given else "a different credential"
            raise ServeError(
                401,
                "unauthorized",
                f"expected 'Authorization: Bearer <token>', got {what}",
                "Authorization",
                **{"www-authenticate": "Bearer"},
            )

    async def _ready(self, scope: Scope, send: Send) -> None:
        index = self.engine.index
        # The service's own server marks a connection past its cap: no traffic now.
        full = AT_CAPACITY in (scope.get("extensions") or {})
        ready = self.warmed and not self.draining and not full
        reason = ""
        if self.draining:
            reason = "shutting down"
        elif not self.warmed:
            reason = "warming up"
        elif full:
            reason = "at the connection limit"
        body = {
            "ready": ready,
            "reason": reason,
            "tools": len(index.catalog),
            "embeddings": index.vectors is not None,
            "degraded_reason": index.degraded_reason,
        }
        await send_json(send, 200 if ready else 503, body)

    async def _json_route(self, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._read_json(scope, receive)
        try:
            check(body, route.request)
            result = await route.handle(self.engine, body)
        except BodyError as exc:
            raise ServeError(400, "invalid_body", exc.message, exc.field) from None
        except (ConfigError, CatalogError) as exc:
            kind = "invalid_catalog" if isinstance(exc, CatalogError) else "invalid_value"
            raise ServeError(422, kind, str(exc), _field_named(str(exc), body)) from None
        await send_json(send, 200, result)

    async def _read_json(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        kind = _header(scope, b"content-type").split(b";")[0].strip().lower()
        if kind and kind != b"application/json":
            raise ServeError(
                415, "unsupported_media_type", f"expected application/json, got {kind.decode()!r}"
            )
        declared = _header(scope, b"content-length")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise self._too_large(int(declared))
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ServeError(
                    400, "incomplete_body", "the body did not arrive whole (stalled or cut off)"
                )
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large(size)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        if not raw.strip():
            raise ServeError(400, "invalid_body", "expected a JSON object, got an empty body")
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ServeError(400, "invalid_json", f"expected a JSON body: {exc}") from None
        except RecursionError:  # the parser recurses per level: a caller's body, not our fault
            raise ServeError(
                400, "invalid_json", "expected a JSON body, got one nested too deeply to read"
            ) from None
        if not isinstance(body, dict):
            raise ServeError(400, "invalid_body", f"expected a JSON object, got {got(body)}")
        return body

    def _too_large(self, size: int) -> ServeError:
        return ServeError(
            413,
            "too_large",
            f"expected a body of at most {self.max_body_bytes} bytes, got {size} or more",
        )

    async def _events(self, scope: Scope, receive: Receive, send: Send) -> None:
        buffer = _buffer(scope)
        gone = False
        async with (
            self.engine.subscribe(buffer) as deliveries,
            anyio.create_task_group() as streams,
        ):

            async def until_gone() -> None:
                nonlocal gone
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                streams.cancel_scope.cancel()

            streams.start_soon(until_gone)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            # The first line says the subscription is in place: events from now on arrive.
            await _chunk(send, b": subscribed\n\n")
            await self._stream(deliveries, send)
            streams.cancel_scope.cancel()
        if not gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream(self, deliveries: Any, send: Send) -> None:
        """Send each delivery as it comes; once draining, send what is already buffered and
        return (never cut short mid-frame: only the wait for the next event is)."""
        number = 0
        while True:
            draining = self.draining
            with anyio.move_on_after(FLUSH_S if draining else self.heartbeat_s) as idle:
                self._waits.add(idle)
                try:
                    delivery = await deliveries.__anext__()
                except StopAsyncIteration:
                    return
                finally:
                    self._waits.discard(idle)
            if idle.cancelled_caught:
                if draining:
                    return  # nothing more came: every event published before is out
                if not self.draining:
                    await _chunk(send, b": keep-alive\n\n")
                continue
            if delivery.dropped:
                lost = json.dumps({"dropped": delivery.dropped})
                await _chunk(send, f"event: dropped\ndata: {lost}\n\n".encode())
            number += 1
            data = to_json(delivery.event)
            frame = f"id: {number}\nevent: {delivery.event.type}\ndata: {data}\n\n"
            await _chunk(send, frame.encode())


def _buffer(scope: Scope) -> int | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("buffer")
    if not values:
        return None
    # ASCII digits only: ``isdigit`` also takes "²", which ``int`` refuses.
    if not (values[-1].isascii() and values[-1].isdigit()) or int(values[-1]) < 1:
        raise ServeError(
            400,
            "invalid_value",
            f"buffer: expected an integer of at least 1, got {values[-1]!r}",
            "buffer",
        )
    return int(values[-1])


def _field_named(message: str, body: Mapping[str, Any]) -> str | None:
    """The body field an engine error names (its messages name the argument they refuse)."""
    for name in body:
        if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", message):
            return name
    return next(iter(body), None) if len(body) == 1 else None


def _allow(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise ServeError(
            405,
            "method_not_allowed",
            f"expected {' or '.join(allowed)}, got {method}",
            allow=", ".join(allowed),
        )


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return b""


async def _lifespan(receive: Receive, send: Send) -> None:
    # The engine's lifetime belongs to whoever built the app (it outlives the server).
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, data: object) -> None:
    try:
        body = json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # A lone surrogate (JSON can spell one; a request or a catalogue may hold it) has no
        # UTF-8 form: answer in ASCII, where it is the same \u escape the caller sent.
        body = json.dumps(data).encode()
    await _send(send, status, body, _JSON)


async def _send_error(send: Send, exc: ServeError) -> None:
    body = {"error": {"type": exc.kind, "message": exc.message, "field": exc.field}}
    headers = [(k.encode(), v.encode()) for k, v in exc.headers.items()]
    await _send(send, exc.status, json.dumps(body).encode(), [*_JSON, *headers])
