"""A real ``redis-server`` on a free loopback port, for the shared-store tests: started,
stopped and restarted on the same port."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    """Whether something on ``port`` answers a Redis PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            # Up: it answers, or asks for the password it was started with.
            return conn.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process (no persistence) on ``port``, asking clients for
    ``password`` when one is given."""

    def __init__(self, directory: Path, port: int | None = None, password: str = "") -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed")
        self.directory = directory
        self.port = port or free_port()
        self.password = password
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self._process is None, "already running"
        assert REDIS_SERVER is not None
        self._process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                *(("--requirepass", self.password) if self.password else ()),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Loose bound: a loaded machine may take a while to start a process.
        give_up = time.monotonic() + 30
        while not answers(self.port):
            if self._process.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=30)
            self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()
