"""One replica: an engine over shared Redis stores in a process of its own, driven by JSON
lines on stdin (one reply line on stdout per request).

    python replica.py REDIS_URL CACHE_DIR NODE_NAME [--local]

``--local`` runs the same engine with local stores only (the single-process reference);
``REPLICA_DEADLINE_S`` and ``REPLICA_LOCK_WAIT_S`` in the environment set the Redis deadline
and lock wait (2 s each otherwise, for tests; the benchmark runs the engine's 0.25 s).
Requests: ``{"op": "steps", "items": [{"session", "messages", "force_sets",
"release_sets"} ...]}`` (run concurrently; replies in order), ``{"op": "search", "session",
"query"}``, ``{"op": "update", "add": [tool JSON], "remove": [ids]}``, ``{"op": "has",
"id"}``, ``{"op": "select", "query"}``, ``{"op": "stats"}``, ``{"op": "quit"}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from redisbox.nodes import CATALOG, SETS, node_config
from toolroute import Engine, Tool, open_engine
from toolroute.providers import HashingEmbedder
from toolroute.redis import RedisStores, open_redis_stores


async def serve(engine: Engine, shared: RedisStores | None) -> None:
    while True:
        line = await trio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            return
        request = json.loads(line)
        reply = await answer(engine, shared, request)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if request["op"] == "quit":
            return


async def answer(engine: Engine, shared: RedisStores | None, request: dict[str, Any]) -> Any:
    op = request["op"]
    if op == "steps":
        items = request["items"]
        results: list[Any] = [None] * len(items)

        async def step(i: int, item: dict[str, Any]) -> None:
            picked = await engine.prepare_step(
                item["messages"],
                session=item["session"],
                force_sets=item.get("force_sets", ()),
                release_sets=item.get("release_sets", ()),
            )
            results[i] = {
                "tool_ids": list(picked.tool_ids) if picked.tool_ids is not None else None,
                "active_sets": list(picked.active_sets),
                "outcome": picked.outcome.value,
                "latency_ms": picked.latency_ms,
            }

        async with trio.open_nursery() as nursery:
            for i, item in enumerate(items):
                nursery.start_soon(step, i, item)
        return results
    if op == "search":
        found = await engine.search_tools(
            {"query": request["query"]}, session=request["session"], k=1
        )
        return [t["name"] for t in found["tools"]]
    if op == "update":
        add = [Tool(**t) for t in request.get("add", ())]
        remove = request.get("remove", ())
        if shared is not None:
            await shared.update(engine, add=add, remove=remove)
        else:
            await engine.update(add=add, remove=remove)
        return "ok"
    if op == "has":
        return request["id"] in engine.catalog
    if op == "select":
        return list((await engine.select(request["query"])).tool_ids)
    if op == "stats":
        return attrs.asdict(shared.statistics()) if shared is not None else {}
    return "bye"


async def main(url: str, directory: str, node: str, local: bool) -> None:
    config = node_config(Path(directory))
    engine_options: dict[str, Any] = {
        "config": config,
        "embedder": HashingEmbedder(),
        "decider": None,
        "tool_sets": SETS,
    }
    if local:
        async with open_engine(CATALOG, **engine_options) as engine:
            print("ready", flush=True)
            await serve(engine, None)
        return
    async with (
        open_redis_stores(
            url,
            config=config,
            node=node,
            # 2 s unless set: a test that is not about a slow Redis must not see an outage
            # because the shared machine paused a process (the benchmark sets its own).
            deadline_s=float(os.environ.get("REPLICA_DEADLINE_S", 2.0)),
            lock_wait_s=float(os.environ.get("REPLICA_LOCK_WAIT_S", 2.0)),
        ) as shared,
        open_engine(CATALOG, stores=shared.stores, **engine_options) as engine,
        shared.attach(engine),
    ):
        print("ready", flush=True)
        await serve(engine, shared)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], "--local" in sys.argv[4:])
