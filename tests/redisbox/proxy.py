"""A small TCP proxy between the tests' clients and ``redis-server`` that adds delay, drops
every connection, or swallows traffic (a server that accepts and never answers).

Threads and plain sockets, so it works the same under any event loop or clock.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class FaultProxy:
    """Listens on a free loopback port and forwards to ``127.0.0.1:target``.

    Attributes:
        delay_s: seconds added before each chunk is forwarded (both directions).
        swallow: forward nothing (connections stay open, answers never come).
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.delay_s = 0.0
        self.swallow = False
        self._refuse = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def drop(self, *, refuse: bool = True) -> None:
        """Close every connection; with ``refuse``, close new ones at once until ``heal``."""
        self._refuse = refuse
        with self._lock:
            for conn in self._open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._open.clear()

    def heal(self) -> None:
        self._refuse = False
        self.swallow = False
        self.delay_s = 0.0

    def close(self) -> None:
        self._closed = True
        self.drop()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refuse:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                if self.swallow:
                    continue
                if self.delay_s:
                    time.sleep(self.delay_s)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for conn in (source, sink):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
