"""A small HTTP/1.1 server for one ASGI app, on trio and h11.

Why not a general ASGI server: the service's whole budget over an in-process ``select`` is a
millisecond, and a general server spent most of it on its own layers (measured side by side
in ``tests/bench/bench_serve.py --compare``). This one does what the service needs and no
more: keep-alive, ``Content-Length`` and chunked bodies both ways, a header size limit, an
idle timeout, a total time for a request to arrive, a cap on connections, and a graceful stop
that lets the requests in flight finish.

**Slow clients:** a request (its line, headers and body together) has ``request_timeout_s``
from its first byte to its last (a connection's first request, from the accept), and its
line and headers alone the shorter ``head_timeout_s``; one that has begun and not ended by
then is answered ``408`` and the connection closes. One that never began is closed without
an answer after ``head_timeout_s``: a client may open a connection before it has a request,
and an answer it did not ask for would be read as the answer to its next one. Silent
connections are so held briefly, past the cap too, where they would otherwise keep accepting
(and the probes) waiting. Between requests a keep-alive connection waits up to ``idle_s``.

**Connection cap:** at most ``max_connections`` connections are served at once. Past it a
connection is still accepted, its request head read, and answered at once with
``Connection: close``: a probe path (``/health``, ``/ready``) by the app (the scope's
``extensions`` carry ``toolroute.at_capacity``: ``/ready`` says it takes no traffic), any
other request ``503`` with ``Retry-After``. Answering beats not accepting: a client (or a
load balancer) learns at once to go elsewhere or retry, and a liveness probe still finds the
process alive. Those answers are bounded too: past ``overflow`` of them at once, accepting
waits until a connection closes (the kernel's backlog holds the rest).

**Graceful stop:** once ``stop`` is set the listeners close, idle connections close at once,
and a connection in the middle of a request answers it (with ``Connection: close``) and then
closes; after ``grace_s`` whatever is left is cancelled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from http import HTTPStatus
from typing import Any

import attrs
import h11
import trio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
App = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]

log = logging.getLogger("toolroute.serve")

#: Bytes read from the socket at a time.
READ_SIZE = 65536


#: After a refusal (``408``, ``503``) the connection reads what the client still sends for
#: this long before closing: closing with unread bytes resets it, and a reset can destroy
#: the answer before the client reads it.
LINGER_S = 2.0
#: The scope extension on a request past the connection cap (``app.AT_CAPACITY``).
AT_CAPACITY = "toolroute.at_capacity"
#: Retry-After, in seconds, on the ``503`` past the connection cap.
RETRY_AFTER_S = 1


@attrs.define
class Limits:
    """``max_header_bytes`` bounds a request's line and headers; ``idle_s`` closes a
    keep-alive connection that sends nothing; ``request_timeout_s`` bounds the time a request
    takes to arrive whole, ``head_timeout_s`` its line and headers (and a new connection's
    wait for them); ``max_connections`` bounds the connections served at once and
    ``overflow`` the ones past it being answered ``503`` (or a probe) at once; ``probes`` are
    the paths answered past the cap; ``grace_s`` is the graceful stop's budget."""

    max_header_bytes: int = 16 * 1024
    idle_s: float = 60.0
    request_timeout_s: float = 30.0
    head_timeout_s: float = 5.0
    max_connections: int = 1000
    overflow: int = 64
    probes: frozenset[str] = frozenset({"/health", "/ready"})
    grace_s: float = 10.0


@attrs.define(eq=False)
class _Connections:
    """The open connections, and which of them are between requests (safe to close);
    ``served`` and ``over`` count those served and those past the cap being answered."""

    idle: dict[trio.CancelScope, bool] = attrs.field(factory=dict)
    stopping: bool = False
    served: int = 0
    over: int = 0
    closed: trio.Event = attrs.field(factory=trio.Event)

    def close_one(self, over: bool) -> None:
        if over:
            self.over -= 1
        else:
            self.served -= 1
        self.closed.set()
        self.closed = trio.Event()

    def close_idle(self) -> None:
        self.stopping = True
        for scope, idle in self.idle.items():
            if idle:
                scope.cancel("server stopping")


async def serve_http(
    app: App,
    listeners: Sequence[trio.SocketListener],
    stop: trio.Event,
    limits: Limits,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``listeners`` until ``stop`` is set and the requests in flight are done.

    **Cancellation:** cancelling the caller closes every connection at once.
    """
    connections = _Connections()
    async with trio.open_nursery() as handlers:
        async with trio.open_nursery() as accepting:
            for listener in listeners:
                accepting.start_soon(_accept, listener, app, limits, connections, handlers)
            task_status.started()
            await stop.wait()
            accepting.cancel_scope.cancel("server stopping")
        for listener in listeners:
            await listener.aclose()
        connections.close_idle()
        handlers.cancel_scope.deadline = trio.current_time() + limits.grace_s


async def _accept(
    listener: trio.SocketListener,
    app: App,
    limits: Limits,
    connections: _Connections,
    handlers: trio.Nursery,
) -> None:
    while True:
        while connections.served >= limits.max_connections and connections.over >= limits.overflow:
            await connections.closed.wait()
        try:
            stream = await listener.accept()
        except OSError:  # out of descriptors, a reset before accept: keep serving the others
            await trio.sleep(0.01)
            continue
        # Counted here, before any checkpoint: the next accept sees this one.
        over = connections.served >= limits.max_connections
        if over:
            connections.over += 1
        else:
            connections.served += 1
        handlers.start_soon(_connection, stream, app, limits, connections, over)


async def _connection(
    stream: trio.SocketStream,
    app: App,
    limits: Limits,
    connections: _Connections,
    over: bool,
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
    with trio.CancelScope() as scope:
        connections.idle[scope] = True
        try:
            async with stream:
                # The refusal is sent inside ``async with``: the stream is still open.
                try:
                    if over:
                        await _serve_over_cap(conn, stream, app, limits, connections)
                    else:
                        await _serve_connection(conn, stream, app, limits, connections, scope)
                except h11.RemoteProtocolError as exc:
                    why = f"expected an HTTP/1.1 request, got one that does not read: {exc}"
                    await _refuse(conn, stream, exc.error_status_hint, why)
                except _TimedOut as exc:
                    await _refuse_timed_out(conn, stream, limits, head=exc.head)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        except Exception:
            # A fault of ours on one connection (h11 refusing what the app sent, say) ends
            # that connection, never the server and every other connection with it.
            log.exception("toolroute serve: a connection failed")
        finally:
            del connections.idle[scope]
            connections.close_one(over)


class _TimedOut(Exception):
    """A request began and did not arrive whole within ``request_timeout_s`` (``head``: its
    line and headers within ``head_timeout_s``)."""

    def __init__(self, *, head: bool) -> None:
        super().__init__()
        self.head = head


async def _read_head(
    conn: h11.Connection, stream: trio.SocketStream, limits: Limits, first: bool
) -> tuple[Any, float]:
    """The next request head (``None`` when none began: idle too long, or closed) and the
    time by which its body must have arrived too.

    Raises:
        _TimedOut: it began and did not end within ``request_timeout_s`` (or its head
            within ``head_timeout_s``).
    """
    # A connection's first request is timed from the accept; a later one from its first
    # byte (the wait before it is keep-alive idle).
    deadline = trio.current_time() + limits.request_timeout_s
    head_by = trio.current_time() + limits.head_timeout_s
    event = conn.next_event()
    if event is not h11.NEED_DATA:
        return event, deadline  # pipelined: already here
    if not first and not conn.trailing_data[0]:
        with trio.move_on_after(limits.idle_s):
            conn.receive_data(await stream.receive_some(READ_SIZE))
            deadline = trio.current_time() + limits.request_timeout_s
            head_by = trio.current_time() + limits.head_timeout_s
        if conn.trailing_data == (b"", False):
            return None, deadline  # idle too long
    with trio.move_on_at(min(deadline, head_by)):
        return await _next_event(conn, stream), deadline
    if conn.trailing_data[0]:
        raise _TimedOut(head=head_by < deadline)
    return None, deadline  # a connection that never sent a byte


async def _serve_over_cap(
    conn: h11.Connection,
    stream: trio.SocketStream,
    app: App,
    limits: Limits,
    connections: _Connections,
) -> None:
    """Past the cap: answer one request at once (a probe by the app, anything else 503)."""
    event, deadline = await _read_head(conn, stream, limits, first=True)
    if not isinstance(event, h11.Request):
        return
    path = event.target.partition(b"?")[0].decode("latin-1")
    if path in limits.probes and not connections.stopping:
        await _exchange(conn, stream, event, app, connections, limits, deadline, at_capacity=True)
        return
    cap = limits.max_connections
    why = (
        f"expected at most {cap} connection{'s' if cap != 1 else ''} at once, got more; "
        f"retry in {RETRY_AFTER_S} s"
    )
    await _refuse(conn, stream, 503, why, kind="overloaded", retry_after=str(RETRY_AFTER_S))
    await _linger(stream)


async def _refuse_timed_out(
    conn: h11.Connection,
    stream: trio.SocketStream,
    limits: Limits,
    *,
    head: bool = False,
    linger: bool = True,
) -> None:
    if head:
        why = (
            f"expected the request line and headers within {limits.head_timeout_s:g} s, "
            "got only part of them in that time"
        )
    else:
        why = (
            f"expected the whole request within {limits.request_timeout_s:g} s, "
            "got only part of it in that time"
        )
    await _refuse(conn, stream, 408, why, kind="request_timeout")
    if linger:
        await _linger(stream)


async def _linger(stream: trio.SocketStream) -> None:
    """Close our side, then read (and drop) what still comes for ``LINGER_S``."""
    try:
        await stream.send_eof()
        with trio.move_on_after(LINGER_S):
            while await stream.receive_some(READ_SIZE):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _serve_connection(
    conn: h11.Connection,
    stream: trio.SocketStream,
    app: App,
    limits: Limits,
    connections: _Connections,
    scope: trio.CancelScope,
) -> None:
    first = True
    while not connections.stopping:
        # The body is due by the same deadline as the head it follows.
        event, deadline = await _read_head(conn, stream, limits, first)
        first = False
        if not isinstance(event, h11.Request):
            return  # idle too long, closed, or not a request
        if _head_size(event) > limits.max_header_bytes:
            # h11 bounds only a head still arriving; one read can bring it whole.
            await _refuse(conn, stream, 431, "request head too large")
            return
        connections.idle[scope] = False
        await _exchange(conn, stream, event, app, connections, limits, deadline)
        connections.idle[scope] = True
        _skip_buffered_body(conn)
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            return  # a body the app did not read, or a response cut short
        conn.start_next_cycle()


def _skip_buffered_body(conn: h11.Connection) -> None:
    """Read past the end of a body the app left unread, if it has already arrived (a GET's
    empty one always has); a body still on its way means the connection must close."""
    while conn.their_state is h11.SEND_BODY:
        if conn.next_event() is h11.NEED_DATA:
            return


def _head_size(request: h11.Request) -> int:
    return len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)


async def _refuse(
    conn: h11.Connection,
    stream: trio.SocketStream,
    status: int,
    why: str,
    *,
    kind: str | None = None,
    retry_after: str | None = None,
) -> None:
    """Answer a request we will not read (malformed, too large, too slow, past the cap)
    with the service's JSON error, then close."""
    if conn.our_state not in {h11.IDLE, h11.SEND_RESPONSE}:
        return  # a response has begun: closing is all that is left
    kind = kind or ("too_large" if status == 431 else "bad_request")
    body = json.dumps({"error": {"type": kind, "message": why, "field": None}}).encode()
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("connection", "close"),
    ]
    if retry_after is not None:
        headers.append(("retry-after", retry_after))
    try:
        head = conn.send(h11.Response(status_code=status, headers=headers, reason=_reason(status)))
        await stream.send_all((head or b"") + (conn.send(h11.Data(data=body)) or b""))
    except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client has gone: nothing to tell it


async def _next_event(conn: h11.Connection, stream: trio.SocketStream) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if conn.their_state is h11.DONE:
            return h11.PAUSED
        conn.receive_data(await stream.receive_some(READ_SIZE))


async def _exchange(
    conn: h11.Connection,
    stream: trio.SocketStream,
    request: h11.Request,
    app: App,
    connections: _Connections,
    limits: Limits,
    deadline: float,
    *,
    at_capacity: bool = False,
) -> None:
    """Serve one request; its body must have arrived by ``deadline`` (else ``408``).
    ``at_capacity``: a connection past the cap, told the app and closed after."""
    target = request.target.decode("latin-1")
    path, _, query = target.partition("?")
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.http_version.decode(),
        "method": request.method.decode(),
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.headers],
        "client": _address(stream, "getpeername"),
        "server": _address(stream, "getsockname"),
    }
    if at_capacity:
        scope["extensions"] = {AT_CAPACITY: {}}
    body_done = False
    head_only = request.method == b"HEAD"
    started: dict[str, Any] = {}
    # Once the client has gone, sends are dropped (ASGI: the app learns it from ``receive``).
    gone = trio.Event()
    timed_out = False

    async def receive() -> Message:
        nonlocal body_done, timed_out
        if not body_done:
            # A body that is cut off or is not HTTP (a broken chunk): the app answers that it
            # did not arrive whole, and the connection closes. One not whole by the deadline
            # is answered 408 here; the app hears that the client left.
            event = None
            try:
                if conn.they_are_waiting_for_100_continue:  # curl asks before a large body
                    go_on = h11.InformationalResponse(status_code=100, headers=[])
                    await stream.send_all(conn.send(go_on) or b"")
                with trio.move_on_at(deadline) as late:
                    event = await _next_event(conn, stream)
                if late.cancelled_caught and "sent" not in started:
                    timed_out = True
                    gone.set()  # what the app sends now is dropped
                    await _refuse_timed_out(conn, stream, limits, linger=False)
            except h11.RemoteProtocolError:
                pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                gone.set()  # the client went away mid-body
            if isinstance(event, h11.Data):
                return {"type": "http.request", "body": bytes(event.data), "more_body": True}
            body_done = True
            if isinstance(event, h11.EndOfMessage):
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}
        # After the body the only news is the client leaving (an event stream waits on it).
        while not gone.is_set():
            try:
                data = await stream.receive_some(READ_SIZE)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                gone.set()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
            return
        if message["type"] != "http.response.body" or timed_out:
            return  # after a 408, h11 has sent this request's one answer
        out = b""
        if "sent" not in started:
            started["sent"] = True
            headers = [(bytes(k), bytes(v)) for k, v in started.get("headers", [])]
            if connections.stopping or at_capacity:
                headers.append((b"connection", b"close"))
            status = started["status"]
            response = h11.Response(status_code=status, headers=headers, reason=_reason(status))
            out += conn.send(response) or b""
        # A HEAD answer is the GET answer's head alone (its length included).
        chunk = b"" if head_only else message.get("body", b"")
        if chunk:
            out += conn.send(h11.Data(data=chunk)) or b""
        if not message.get("more_body", False):
            out += conn.send(h11.EndOfMessage()) or b""
        if gone.is_set():
            return
        try:
            await stream.send_all(out)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            gone.set()

    await app(scope, receive, send)
    if timed_out:
        await _linger(stream)
        return
    if "sent" not in started:  # the app ended without answering: our fault
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _address(stream: trio.SocketStream, which: str) -> tuple[str, int] | None:
    try:
        address = getattr(stream.socket, which)()
    except OSError:
        return None
    return (str(address[0]), int(address[1]))
