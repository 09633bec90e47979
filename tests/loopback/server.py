"""The one way the loopback test servers run: a threaded HTTP server on 127.0.0.1:<free port>,
served from a background thread for a ``with`` block.

:mod:`loopback.scripted` (generators, embedder, provider loop), :mod:`loopback.chat_vendor`
(re-ranking and enrichment) and :mod:`loopback.decision_vendors` (the decision vendors) are
request handlers on this server; none of them starts or stops a server itself.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar


class LoopbackServer(ThreadingHTTPServer):
    """A threaded server on a free port of 127.0.0.1.

    Attributes:
        release: set when the server shuts down, so handlers holding a reply stop waiting.
    """

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.release = threading.Event()

    @property
    def root(self) -> str:
        """``http://127.0.0.1:<port>``, without a path."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up hangs up before or during the reply; that is the test working.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


Server = TypeVar("Server", bound=LoopbackServer)


@contextlib.contextmanager
def serving(server: Server, *, name: str | None = None, join_s: float = 5.0) -> Iterator[Server]:
    """Serve ``server`` from a background thread for the ``with`` block.

    Resource handling:
        On exit, waiting handlers are released, the accept loop stops, the listening
        socket closes and the thread is joined (at most ``join_s``).
    """
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name=name, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=join_s)
