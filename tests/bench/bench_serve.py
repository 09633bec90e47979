"""What ``toolroute serve`` costs over an in-process ``select``, and how it holds under load.

    python tests/bench/bench_serve.py [--datasets ../shared/datasets] [--tools 1000]
        [--requests 2000] [--rounds 3] [--embedder hashing] [--compare]

The catalogue is the first ``--tools`` BFCL tools, the requests BFCL's queries. The server runs
in a process of its own (``toolroute serve``: its own HTTP/1.1 server on trio); this process is the
client: raw HTTP/1.1 keep-alive connections on asyncio, so the client's own cost stays small.
The in-process baseline is ``await engine.select`` on a trio engine over the same catalogue
and embedder, in a process of its own. Every target runs at once, and blocks of the same requests alternate
between them (``--rounds`` × 10 blocks) so all see the same machine load; the overhead is the
median HTTP latency at one connection minus the median in-process latency.

Then throughput and p50/p99 latency at 1, 10 and 100 concurrent connections. With
``--compare`` the same load also runs against the same app under Hypercorn's trio worker and
under uvicorn with the engine on the asyncio bridge (``toolroute.asyncio``, guest mode): the
alternatives the service was chosen against (they need ``hypercorn`` and ``uvicorn``).

Prints one JSON object per measurement, then a summary object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LEVELS = (1, 10, 100)
WARMUP = 100


def _catalog_file(datasets: Path, tools: int, folder: Path) -> Path:
    data = json.loads((datasets / "bfcl" / "tools.json").read_text("utf-8"))[:tools]
    path = folder / "tools.json"
    path.write_text(json.dumps(data), "utf-8")
    return path


def _queries(datasets: Path) -> list[str]:
    items = json.loads((datasets / "bfcl" / "queries.json").read_text("utf-8"))
    return [item["query"] for item in items if item["query"].strip()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _server(kind: str, catalog: Path, embedder: str, cache: Path) -> Iterator[int]:
    """A server process of ``kind`` (``trio`` or ``asyncio``) on a free port, until the end."""
    port = _free_port()
    if kind == "trio":
        command = [
            sys.executable, "-c", "import sys; from toolroute._cli.main import main; "
            "sys.exit(main())", "serve", "--catalog", str(catalog),
            "--embedder", embedder, "--port", str(port), "--cache-dir", str(cache),
        ]  # fmt: skip
    else:
        command = [
            sys.executable, __file__, f"--{kind}-server", str(catalog), "--embedder", embedder,
            "--port", str(port), "--cache-dir", str(cache),
        ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening" not in line:
            raise RuntimeError(f"{kind} server did not start: {line!r}")
        _wait_ready(port)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait_ready(port: int) -> None:
    for _ in range(600):
        with contextlib.suppress(OSError):
            status, _ = asyncio.run(_get(port, "/ready"))
            if status == 200:
                return
        time.sleep(0.1)
    raise RuntimeError("the server never became ready")


async def _get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    status, body = await _response(reader)
    writer.close()
    return status, body


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status, body, _ = await _response_closing(reader)
    return status, body


async def _response_closing(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """The status, the body, and whether the server closes the connection after it
    (Hypercorn does after 1,000 requests on one connection)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = [line.lower() for line in head.split(b"\r\n")]
    status = int(lines[0].split()[1])
    length = next(
        int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length:")
    )
    closing = b"connection: close" in lines
    return status, await reader.readexactly(length), closing


def _request(query: str) -> bytes:
    body = json.dumps({"query": query}).encode()
    head = (
        f"POST /v1/select HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _connection(
    port: int, requests: list[bytes], latencies: list[float], outside: list[float] | None = None
) -> None:
    """Send ``requests`` one after the other; ``outside`` gets, per request, the time the
    client saw minus the ``latency_ms`` the engine measured inside ``select``: what the HTTP
    path costs that request, the select's own variation taken out."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for request in requests:
            started = time.perf_counter()
            writer.write(request)
            status, body, closing = await _response_closing(reader)
            latency = (time.perf_counter() - started) * 1000.0
            if closing:
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            latencies.append(latency)
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
            if outside is not None:
                outside.append(latency - json.loads(body)["latency_ms"])
    finally:
        writer.close()


async def _latencies(port: int, queries: list[str], outside: list[float]) -> list[float]:
    latencies: list[float] = []
    await _connection(port, [_request(q) for q in queries], latencies, outside)
    return latencies


async def _load(port: int, queries: list[str], total: int, connections: int) -> dict[str, Any]:
    requests = [_request(queries[i % len(queries)]) for i in range(total)]
    share = [requests[c::connections] for c in range(connections)]
    latencies: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(*(_connection(port, part, latencies) for part in share))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "connections": connections,
        "requests": total,
        "rps": round(total / elapsed, 1),
        "p50_ms": round(statistics.median(latencies), 3),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 3),
    }


@contextlib.contextmanager
def _baseline(catalog: Path, embedder: str, cache: Path) -> Iterator[subprocess.Popen[str]]:
    """The in-process baseline: a process running ``await engine.select`` on request."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--in-process", str(catalog), "--embedder", embedder,
         "--cache-dir", str(cache)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the baseline process did not start")
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


def _baseline_block(process: subprocess.Popen[str], queries: list[str]) -> list[float]:
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(json.dumps(queries) + "\n")
    process.stdin.flush()
    latencies: list[float] = json.loads(process.stdout.readline())
    return latencies


def _embedder(name: str) -> Any:
    from toolroute.providers import HashingEmbedder, default_embedder

    return (
        {"hashing": HashingEmbedder, "minilm": default_embedder}[name]() if name != "none" else None
    )


def _engine_config(cache: str) -> Any:
    from toolroute import EngineConfig

    return EngineConfig.from_mapping({"cache_dir": cache})


def _run_in_process(args: argparse.Namespace) -> None:
    import trio

    from toolroute import Catalog, open_engine

    catalog = Catalog.from_file(args.in_process)

    async def main() -> None:
        config = _engine_config(args.cache_dir)
        async with open_engine(catalog, embedder=_embedder(args.embedder), config=config) as engine:
            await engine.ready()
            print("ready", flush=True)
            while line := await trio.to_thread.run_sync(sys.stdin.readline):
                times = []
                for query in json.loads(line):
                    started = time.perf_counter()
                    await engine.select(query)
                    times.append((time.perf_counter() - started) * 1000.0)
                print(json.dumps(times), flush=True)

    trio.run(main)


def _run_asyncio_server(args: argparse.Namespace) -> None:
    import uvicorn

    from toolroute import Catalog
    from toolroute._serve.app import ServeApp
    from toolroute.asyncio import open_engine

    catalog = Catalog.from_file(args.asyncio_server)

    async def main() -> None:
        config = _engine_config(args.cache_dir)
        async with open_engine(catalog, embedder=_embedder(args.embedder), config=config) as engine:
            await engine.ready()
            app = ServeApp(engine)  # type: ignore[arg-type]  # the asyncio engine, same names
            app.mark_ready()
            server = uvicorn.Server(
                uvicorn.Config(
                    app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="off"
                )
            )
            print("toolroute bench: listening", flush=True)
            await server.serve()

    asyncio.run(main())


def _run_hypercorn_server(args: argparse.Namespace) -> None:
    import hypercorn.trio
    import trio
    from hypercorn.config import Config

    from toolroute import Catalog, open_engine
    from toolroute._serve.app import ServeApp

    catalog = Catalog.from_file(args.hypercorn_server)

    async def main() -> None:
        config = _engine_config(args.cache_dir)
        async with open_engine(catalog, embedder=_embedder(args.embedder), config=config) as engine:
            await engine.ready()
            app = ServeApp(engine)
            app.mark_ready()
            served = Config()
            served.bind = [f"127.0.0.1:{args.port}"]
            served.accesslog = served.errorlog = None
            print("toolroute bench: listening", flush=True)
            await hypercorn.trio.serve(app, served)  # type: ignore[arg-type]

    trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=2000, help="per load level and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--embedder", choices=("hashing", "minilm", "none"), default="hashing")
    parser.add_argument(
        "--compare", action="store_true", help="also Hypercorn, and uvicorn + the asyncio bridge"
    )
    parser.add_argument("--in-process", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--asyncio-server", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--hypercorn-server", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_process:
        return _run_in_process(args)
    if args.asyncio_server:
        return _run_asyncio_server(args)
    if args.hypercorn_server:
        return _run_hypercorn_server(args)

    datasets = Path(args.datasets)
    queries = _queries(datasets)
    kinds = ("trio", "hypercorn", "asyncio") if args.compare else ("trio",)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as running:
        folder = Path(tmp)
        catalog = _catalog_file(datasets, args.tools, folder)
        cache = folder / "cache"
        baseline = running.enter_context(_baseline(catalog, args.embedder, cache))
        ports = {
            kind: running.enter_context(_server(kind, catalog, args.embedder, cache))
            for kind in kinds
        }
        for port in ports.values():
            asyncio.run(_load(port, queries, WARMUP, 1))
        _baseline_block(baseline, queries[:WARMUP])
        # Overhead: blocks of the same requests, alternated, so every target sees the same load.
        block = max(50, args.requests // 10)
        in_process: list[float] = []
        single: dict[str, list[float]] = {kind: [] for kind in kinds}
        outside: dict[str, list[float]] = {kind: [] for kind in kinds}
        for round_ in range(args.rounds * 10):
            part = [queries[(round_ * block + i) % len(queries)] for i in range(block)]
            in_process += _baseline_block(baseline, part)
            # The order turns each block: no target always runs right after the baseline.
            for kind in kinds[round_ % len(kinds) :] + kinds[: round_ % len(kinds)]:
                single[kind] += asyncio.run(_latencies(ports[kind], part, outside[kind]))
        in_process_p50 = statistics.median(in_process)
        summary: dict[str, Any] = {
            "tools": args.tools,
            "embedder": args.embedder,
            "requests_per_target": len(in_process),
            "in_process_select_p50_ms": round(in_process_p50, 3),
        }
        for kind in kinds:
            http_p50 = statistics.median(single[kind])
            summary[kind] = {
                "http_select_p50_ms": round(http_p50, 3),
                "overhead_p50_ms": round(http_p50 - in_process_p50, 3),
                "outside_select_p50_ms": round(statistics.median(outside[kind]), 3),
            }
        # Load: each level against each target in turn, ``--rounds`` times.
        loads: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):
            for turn, level in enumerate(LEVELS):
                start = (round_ + turn) % len(kinds)
                for kind in kinds[start:] + kinds[:start]:
                    result = asyncio.run(_load(ports[kind], queries, args.requests, level))
                    result.update(server=kind, round=round_)
                    print(json.dumps(result), flush=True)
                    loads.setdefault((kind, level), []).append(result)
        for (kind, level), results in loads.items():
            summary[kind][f"{level}_connections"] = {
                key: round(statistics.median(r[key] for r in results), 3)
                for key in ("rps", "p50_ms", "p99_ms")
            }
        print(json.dumps({"summary": summary}, indent=1))


if __name__ == "__main__":
    main()
