"""The shared Redis stores: a new replica's warm-up, steps hopping between replicas, and an
outage in the middle of a run. Starts its own ``redis-server`` on a free loopback port.

    python tests/bench/bench_redis.py [--datasets ../shared/datasets]
                                      [--sections warmup,hop,outage] [--sizes 0,10000]

``warmup``: per catalogue (0 is BFCL's 1,702 tools; other sizes are recombined from the
bundled tools), the seconds from ``open_engine`` to ready, and to the fast tier open, with
the default MiniLM model (loaded before the clock starts): cold (empty Redis, empty cache
directory) and a new replica (empty cache directory, the Redis a first replica filled), and
their ratios.
``hop``: three replica processes over one Redis and one process with local stores; 100
sessions stepped concurrently, step i of session s on replica (s + i) mod 3, with sets forced,
tools found by ``search_tools`` and sets released along the way; prints how many steps
differ from the single process (tools shown or active sets).
``outage``: two nodes over one Redis, 40 sessions stepping concurrently; Redis is stopped
mid-run and started again; prints failed requests, step latency per phase, and whether the
nodes share again after the restart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from redisbox.nodes import open_nodes  # noqa: E402
from redisbox.replicas import Replica  # noqa: E402
from redisbox.server import RedisServer  # noqa: E402

from toolroute import Catalog, EngineConfig, open_engine  # noqa: E402
from toolroute._bench.datasets import synthetic_catalog  # noqa: E402
from toolroute.providers import default_embedder  # noqa: E402
from toolroute.providers._embedders.fast_tier import files as _fast_tier_files  # noqa: E402
from toolroute.redis import open_redis_stores  # noqa: E402


async def flush(server: RedisServer) -> None:
    import coredis

    async with coredis.Redis.from_url(server.url) as client:
        await client.flushall()


@attrs.frozen
class Warmup:
    ready_s: float  # open_engine to ready (the catalogue's vectors)
    fast_tier_s: float  # open_engine to the fast tier open (it opens in the background)
    vectors_from_redis: int
    fast_tier_fetched: int
    fast_tier_bytes: int  # the fast tier's cache folder, as shared


async def timed_warmup(catalog: Catalog, url: str, directory: Path, embedder: Any) -> Warmup:
    config = EngineConfig.from_mapping({"cache_dir": str(directory), "warmup": {"wait": True}})
    # A replica is a new process: it reads the shipped distilled table again.
    _fast_tier_files._shipped.clear()
    async with open_redis_stores(url, config=config, deadline_s=1.0) as shared:
        started = time.perf_counter()
        async with open_engine(
            catalog, config=config, embedder=embedder, decider=None, stores=shared.stores
        ) as engine:
            ready_s = time.perf_counter() - started
            while not engine.statistics().recall.fast_tier_open:  # noqa: ASYNC110
                await trio.sleep(0.01)
            fast_tier_s = time.perf_counter() - started
        assert shared.statistics().failures == 0
    return Warmup(
        ready_s=ready_s,
        fast_tier_s=fast_tier_s,
        vectors_from_redis=shared.embeddings.from_redis,
        fast_tier_fetched=shared.fast_tier.fetched,
        fast_tier_bytes=sum(p.stat().st_size for p in (directory / "fast-tier").rglob("*.*")),
    )


async def warmup(server: RedisServer, root: Path, sizes: list[int]) -> None:
    embedder = await trio.to_thread.run_sync(default_embedder)
    embedder.embed(["load the model before the clock starts"])
    print("== warm-up: cold vs a new replica from the shared cache (MiniLM, seconds)")
    print("   ready: the catalogue's vectors; +fast tier: until the fast tier is open too")
    for size in sizes:
        catalog = (
            Catalog.from_file(root / "bfcl" / "tools.json")
            if size == 0
            else synthetic_catalog(root, size)
        )
        await flush(server)
        with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
            cold = await timed_warmup(catalog, server.url, Path(first), embedder)
            warm = await timed_warmup(catalog, server.url, Path(second), embedder)
        name = "BFCL" if size == 0 else f"{size:,} recombined"
        print(
            f"  {name:16s} {len(catalog):6d} tools  cold ready {cold.ready_s:7.2f} s"
            f" +fast tier {cold.fast_tier_s:7.2f} s | new replica ready {warm.ready_s:6.2f} s"
            f" +fast tier {warm.fast_tier_s:6.2f} s | ratio ready"
            f" {100 * warm.ready_s / cold.ready_s:5.1f} %, with the fast tier"
            f" {100 * warm.fast_tier_s / cold.fast_tier_s:5.1f} %"
        )
        print(
            f"  {'':16s} new replica: {warm.vectors_from_redis} vectors read from Redis,"
            f" fast tier fetched: {bool(warm.fast_tier_fetched)}"
            f" ({warm.fast_tier_bytes / 1e6:.1f} MB)"
        )


def hop_plan(sessions: int, steps: int) -> list[list[dict[str, Any]]]:
    """Per round, every session's step (what it asks and what it changes)."""
    texts = ["book a flight to rome", "send an email to the team", "refund the last payment"]
    rounds = []
    for i in range(steps):
        items = []
        for s in range(sessions):
            item: dict[str, Any] = {"session": f"s{s}", "messages": texts[(s + i) % 3]}
            if i == 1 and s % 2 == 0:
                item["force_sets"] = ["mail"]
            if i == 4 and s % 2 == 0:
                item["release_sets"] = ["mail"]
            items.append(item)
        rounds.append(items)
    return rounds


def hop(server: RedisServer, sessions: int = 100, steps: int = 6) -> None:
    print(f"== hop: {sessions} sessions x {steps} steps, 3 replica processes vs one process")
    with tempfile.TemporaryDirectory() as scratch:
        # The engine's defaults (the replicas' own default is lenient, for tests).
        os.environ.setdefault("REPLICA_DEADLINE_S", "0.25")
        os.environ.setdefault("REPLICA_LOCK_WAIT_S", "0.25")
        replicas = [Replica(server.url, Path(scratch) / f"r{i}", f"r{i}") for i in range(3)]
        single = Replica(server.url, Path(scratch) / "single", "single", local=True)
        try:
            for replica in (*replicas, single):
                replica.wait_ready()
            differing = total = 0
            latencies: list[float] = []
            for i, items in enumerate(hop_plan(sessions, steps)):
                if i == 3:  # a search on another replica; its tool is shown on the next step
                    for s in range(0, sessions, 3):
                        query = {"op": "search", "session": f"s{s}", "query": "cancel a flight"}
                        replicas[(s + i + 1) % 3].ask(query)
                        single.ask(query)
                batches: list[list[tuple[int, dict[str, Any]]]] = [[], [], []]
                for s, item in enumerate(items):
                    batches[(s + i) % 3].append((s, item))
                for r, batch in enumerate(batches):
                    replicas[r].send({"op": "steps", "items": [item for _, item in batch]})
                single.send({"op": "steps", "items": items})
                hopped: dict[int, Any] = {}
                for r, batch in enumerate(batches):
                    for (s, _), reply in zip(batch, replicas[r].receive(), strict=True):
                        hopped[s] = reply
                reference = single.receive()
                for s, expected in enumerate(reference):
                    got = hopped[s]
                    total += 1
                    latencies.append(got["latency_ms"])
                    same = (got["tool_ids"], got["active_sets"]) == (
                        expected["tool_ids"],
                        expected["active_sets"],
                    )
                    differing += not same
            stats = [r.ask({"op": "stats"}) for r in replicas]
        finally:
            for replica in (*replicas, single):
                replica.close()
    q = statistics.quantiles(latencies, n=100)
    print(f"  steps compared {total}, differing from one process: {differing}")
    print(f"  hopped step latency ms: p50 {q[49]:.2f}  p99 {q[98]:.2f}")
    print(
        "  replicas' Redis failures/timeouts/lock timeouts/tickets skipped/tickets late: "
        + ", ".join(
            f"{s['failures']}/{s['timeouts']}/{s['lock_timeouts']}"
            f"/{s['tickets_skipped']}/{s['tickets_late']}"
            for s in stats
        )
    )


async def outage(server: RedisServer, scratch: Path, sessions: int = 40) -> None:
    print(f"== outage: 2 nodes, {sessions} sessions stepping; Redis stopped, then started")
    phases: dict[str, list[float]] = {"before": [], "down": [], "after": []}
    failed = 0
    phase = "before"
    async with open_nodes(server.url, scratch, 2, deadline_s=0.25) as nodes:

        async def session(s: int) -> None:
            nonlocal failed
            i = 0
            while phase != "done":
                node = nodes[(s + i) % 2]
                i += 1
                started = time.perf_counter()
                try:
                    await node.engine.prepare_step("send an email", session=f"o{s}")
                except Exception:
                    failed += 1
                if phase in phases:
                    phases[phase].append(1000 * (time.perf_counter() - started))
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            for s in range(sessions):
                nursery.start_soon(session, s)
            await trio.sleep(3)
            phase = "down"
            server.stop()
            await trio.sleep(3)
            server.start()
            started = time.perf_counter()
            while not all(n.shared.statistics().up for n in nodes):  # noqa: ASYNC110
                await trio.sleep(0.01)
            recovered_s = time.perf_counter() - started
            phase = "after"
            await trio.sleep(3)
            phase = "done"
        await nodes[0].engine.prepare_step("book a flight", session="x", force_sets=["mail"])
        shared_again = (
            "mail" in (await nodes[1].engine.prepare_step("book a flight", session="x")).active_sets
        )
        stats = [n.shared.statistics() for n in nodes]
    print(f"  failed requests: {failed}")
    for name, values in phases.items():
        q = statistics.quantiles(values, n=100)
        print(f"  {name:7s} {len(values):6d} steps  p50 {q[49]:7.2f} ms  p99 {q[98]:7.2f} ms")
    print(
        f"  both nodes up again {recovered_s:.2f} s after the restart; sharing again: {shared_again}"
    )
    for n, s in zip(nodes, stats, strict=True):
        print(
            f"  {n.name}: outages {s.outages}, timeouts {s.timeouts}, failures {s.failures}, "
            f"skipped {s.skipped}, resynced {s.writes_resynced}, dropped writes "
            f"{s.writes_dropped}, events dropped {s.events_dropped}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=TESTS.parents[1] / "shared" / "datasets")
    parser.add_argument("--sections", default="warmup,hop,outage")
    parser.add_argument("--sizes", default="0,10000")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    with tempfile.TemporaryDirectory() as scratch:
        server = RedisServer(Path(scratch))
        server.start()
        try:
            if "warmup" in sections:
                await warmup(server, args.datasets, [int(s) for s in args.sizes.split(",")])
            if "hop" in sections:
                await trio.to_thread.run_sync(hop, server)
            if "outage" in sections:
                await outage(server, Path(scratch) / "outage")
        finally:
            server.stop()


if __name__ == "__main__":
    trio.run(main)
