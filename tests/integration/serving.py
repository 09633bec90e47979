"""Helpers for the service's tests: the demo catalogue as a file, a service on a free loopback
port inside the test's trio run, and ``toolroute serve`` as a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from toolroute import Catalog, EngineConfig, open_engine
from toolroute._serve.app import ServeApp
from toolroute._serve.http11 import Limits, serve_http
from toolroute.providers import HashingEmbedder

#: Loose: a loaded 2-core machine may take long to start a Python process and an engine.
START_S = 120.0


def demo_catalog_file(folder: Path) -> Path:
    """The bundled demo catalogue (50 tools on 8 servers) in the plain tool format."""
    tools = [
        {
            "name": tool.name,
            "description": tool.description,
            "parameters": dict(tool.parameters),
            "server": tool.server,
        }
        for tool in Catalog.demo().tools
    ]
    path = folder / "demo_tools.json"
    path.write_text(json.dumps(tools), "utf-8")
    return path


@attrs.frozen
class Served:
    url: str
    app: ServeApp
    engine: Any
    stop: trio.Event


@asynccontextmanager
async def served(
    cache: Path,
    *,
    token: str | None = None,
    max_body_bytes: int = 1 << 20,
    heartbeat_s: float = 15.0,
    idle_s: float = 60.0,
    request_timeout_s: float = 30.0,
    max_connections: int = 1000,
    **limits: Any,
) -> AsyncIterator[Served]:
    """The demo catalogue served on a free 127.0.0.1 port for the duration of the block."""
    config = EngineConfig.from_mapping({"cache_dir": str(cache)})
    async with open_engine(Catalog.demo(), embedder=HashingEmbedder(), config=config) as engine:
        await engine.ready()
        app = ServeApp(engine, token=token, max_body_bytes=max_body_bytes, heartbeat_s=heartbeat_s)
        app.mark_ready()
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            limits = Limits(
                idle_s=idle_s,
                request_timeout_s=request_timeout_s,
                max_connections=max_connections,
                grace_s=5.0,
                **limits,
            )
            await nursery.start(serve_http, app, listeners, stop, limits)
            yield Served(f"http://127.0.0.1:{port}", app, engine, stop)
            app.drain()
            stop.set()


@attrs.define
class ServeProcess:
    """``toolroute serve`` in a process of its own; ``lines`` collects what it prints."""

    process: subprocess.Popen[str]
    url: str
    lines: list[str]
    reader: threading.Thread

    def close(self) -> None:
        """Kill the process if it still runs, and release its pipe."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.reader.join()
        assert self.process.stdout is not None
        self.process.stdout.close()


def start_serve(args: Sequence[str], *, env: dict[str, str] | None = None) -> ServeProcess:
    """Start ``toolroute serve ARGS`` and wait (loosely) for its "listening on" line."""
    command = [
        sys.executable, "-c", "import sys; from toolroute._cli.main import main; sys.exit(main())",
        "serve", *args,
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if "listening on" in line:
                found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = ServeProcess(process, "", lines, reader)
    if not found.wait(START_S):
        started.close()
        raise AssertionError(f"toolroute serve did not start: {lines}")
    started.url = next(line for line in lines if "listening on" in line).rsplit(" ", 1)[1]
    return started
