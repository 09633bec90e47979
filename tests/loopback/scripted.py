"""A scripted JSON server on 127.0.0.1 (:mod:`loopback.server`): the generator, embedder and
provider-loop tests.

Each request takes the next :class:`Scripted` reply (or the server's default) and is recorded
as :class:`Seen`; a reply can carry any status, body and headers, hang, or drop the connection.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .server import LoopbackServer, serving


@dataclass
class Scripted:
    """One scripted reply."""

    status: int = 200
    #: JSON-able, raw bytes, a function of the request (see ``serve_scripted``), or ``None``
    #: for the server's default body.
    body: object = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Hold the response this long (released early when the server shuts down).
    hang_s: float = 0.0
    #: Close the connection without any response.
    drop: bool = False


class Headers(dict[str, str]):
    """Request headers under lower-case names, looked up whatever the case asked."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


@dataclass
class Seen:
    """One request as the server received it."""

    at: float
    path: str
    headers: Headers
    payload: Any


class ScriptedServer(LoopbackServer):
    """Answers POSTs from a script; build it with :func:`serve_scripted`."""

    def __init__(
        self,
        default: Callable[[str, Any], object],
        *,
        prefix: str = "",
        argument: Callable[[Any], Any] = lambda payload: payload,
    ) -> None:
        super().__init__(_Handler)
        self.default = default
        self.prefix = prefix
        self.argument = argument
        self.script: deque[Scripted] = deque()
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return self.root + self.prefix

    def then(self, *replies: Scripted) -> None:
        with self.lock:
            self.script.extend(replies)


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        payload = json.loads(raw)
        headers = Headers({k.lower(): v for k, v in self.headers.items()})
        with self.server.lock:
            self.server.seen.append(Seen(time.monotonic(), self.path, headers, payload))
            reply = self.server.script.popleft() if self.server.script else Scripted()
        if reply.hang_s:
            self.server.release.wait(reply.hang_s)
        if reply.drop:
            return
        body = reply.body
        if body is None:
            body = self.server.default(self.path, payload)
        elif callable(body):
            body = body(self.server.argument(payload))
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serve_scripted(
    default: Callable[[str, Any], object],
    *,
    prefix: str = "",
    argument: Callable[[Any], Any] = lambda payload: payload,
) -> Iterator[ScriptedServer]:
    """Serve a script for the ``with`` block.

    Args:
        default: the body of an unscripted reply, from the path and the request's JSON.
        prefix: the path after the port in ``base_url`` (``"/v1"`` for the embedder).
        argument: what a callable scripted body is called with, from the request's JSON.

    Resource handling:
        As :func:`loopback.server.serving`: hanging replies are released on exit.
    """
    with serving(ScriptedServer(default, prefix=prefix, argument=argument)) as server:
        yield server
