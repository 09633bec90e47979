"""Replica processes (``replica.py``) driven from a test or a benchmark."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("replica.py")


class Replica:
    """One replica process; ``ask`` sends a request and waits (bounded) for its reply."""

    def __init__(self, url: str, directory: Path, name: str, *, local: bool = False) -> None:
        self.name = name
        args = [sys.executable, str(SCRIPT), url, str(directory), name]
        self._process = subprocess.Popen(
            [*args, "--local"] if local else args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout_s: float = 120) -> None:
        assert self._line(timeout_s) == "ready"

    def send(self, request: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()

    def receive(self, timeout_s: float = 120) -> Any:
        return json.loads(self._line(timeout_s))

    def ask(self, request: dict[str, Any], timeout_s: float = 120) -> Any:
        self.send(request)
        return self.receive(timeout_s)

    def close(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(OSError, AssertionError, ValueError):
                self.ask({"op": "quit"}, timeout_s=30)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()

    def _line(self, timeout_s: float) -> str:
        out = self._process.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], timeout_s)
        assert ready, f"replica {self.name} did not answer within {timeout_s} s"
        line = out.readline()
        assert line, f"replica {self.name} exited (code {self._process.poll()})"
        return line.strip()
