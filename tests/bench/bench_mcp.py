"""Live MCP catalogues and the ``toolroute mcp`` gateway, against the fixture MCP server.

    python tests/bench/bench_mcp.py [--tools 1000] [--rounds 200] [--changes 20]
                                    [--embedder minilm|hashing]

Prints one JSON line per measurement:

- ``list_changed``: a tool added on a live server (stdio) until the engine that follows the
  live catalogue ranks it first for its own description; timed from the moment the server's
  ``add_tool`` reply arrives (the server sends ``list_changed`` before that reply, so the
  figure includes the whole path from the notification). Target: within 1 s.
- ``search_tools``: the gateway's ``search_tools`` over ``--tools`` upstream tools, called by
  the MCP SDK's client connected in-process to the gateway (the engine's ranking plus the
  MCP dispatch; distinct requests, so no query cache hit), once the engine's fast tier is
  fitted (as in a gateway up for a few seconds: the cascade answers part of the requests
  without the model). Target: p50 ≤ 10 ms at 1k tools.
- ``forwarded_call``: one ``echo`` call straight to the fixture server over stdio, and one
  through a ``toolroute mcp`` gateway process over stdio, alternated in one run; the
  difference of the p50s is what the gateway adds. Target: ≤ 2 ms.
- ``gateway_in_process``: the same upstream call made by the live catalogue and through the
  gateway's server (SDK client in-process), alternated: the gateway's own handling without
  the extra process hop.

The figures move with the machine's load; compare runs made side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from mcp import Client, StdioServerParameters

from toolroute import EngineConfig
from toolroute._gateway.run import open_gateway
from toolroute._runtime.engine import open_engine
from toolroute.config import WarmupConfig
from toolroute.events import CatalogUpdated
from toolroute.integrations.mcp import open_mcp_catalog

HERE = Path(__file__).resolve().parent
FIXTURE = str(HERE.parent / "fixtures" / "mcp" / "fixture_server.py")
TOPICS = ("lighthouse", "violin", "glacier", "orchard", "telescope", "volcano", "harbour")
NOUNS = ("keeper", "tuning", "survey", "harvest", "alignment", "eruption", "pilot")


def fixture(tools: int) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FIXTURE, "--tools", str(tools), "--page", "100"]}


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
        "max_ms": round(ordered[-1], 3),
        "n": len(ordered),
    }


def embedder_of(name: str) -> Any:
    if name == "hashing":
        from toolroute.providers import HashingEmbedder

        return HashingEmbedder()
    from toolroute.providers import default_embedder

    return default_embedder()


async def bench_list_changed(tools: int, changes: int, embedder: Any) -> dict[str, Any]:
    config = EngineConfig(cache=False, warmup=WarmupConfig(wait=True))
    samples: list[float] = []
    async with (
        open_mcp_catalog({"mcpServers": {"fx": fixture(tools)}}) as live,
        open_engine(live.catalog, config=config, embedder=embedder) as engine,
        engine.subscribe(buffer=64) as events,
    ):
        live.follow(engine)
        for i in range(changes):
            name = f"tool_new_{i}"
            description = f"Ring the {TOPICS[i % 7]} {NOUNS[(i // 7) % 7]} bell number {i}"
            await live.call_tool("add_tool", {"name": name, "description": description})
            started = time.perf_counter()
            async for delivery in events:
                event = delivery.event
                if isinstance(event, CatalogUpdated) and name in event.added:
                    break
            selection = await engine.select(description, max_tools=1)
            samples.append((time.perf_counter() - started) * 1000.0)
            assert selection.tool_ids == (name,), (name, selection.tool_ids)
    return {"bench": "list_changed", "tools": tools, **percentiles(samples)}


async def bench_search_tools(tools: int, rounds: int, embedder: Any) -> dict[str, Any]:
    config = EngineConfig(cache=False, warmup=WarmupConfig(wait=True))
    verbs = ("create", "list", "delete", "update", "archive", "export", "search", "summarise")
    topics = ("invoice", "calendar", "weather", "ticket", "payment", "shipment", "playlist")
    queries = [
        f"please {verbs[i % 8]} the {topics[(i // 8) % 7]} record {i} for me"
        for i in range(rounds + 20)
    ]
    samples: list[float] = []
    async with (
        open_gateway(
            {"mcpServers": {"fx": fixture(tools)}}, engine_config=config, embedder=embedder
        ) as gateway,
        Client(gateway.server, mode="legacy") as client,
    ):
        upstream = len(gateway.live.catalog)
        with trio.fail_after(120):  # a gateway up for a few seconds: its fast tier is fitted
            while not gateway.engine.statistics().recall.fast_tier_ready:  # noqa: ASYNC110
                await trio.sleep(0.05)
        for query in queries[:20]:  # warm the code paths
            await client.call_tool("search_tools", {"query": query})
        for query in queries[20:]:
            started = time.perf_counter()
            result = await client.call_tool("search_tools", {"query": query})
            samples.append((time.perf_counter() - started) * 1000.0)
            assert not result.is_error
    return {"bench": "search_tools", "upstream_tools": upstream, **percentiles(samples)}


async def bench_forwarded_call(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "servers.json"
        config.write_text(json.dumps({"mcpServers": {"fx": fixture(0)}}))
        toolroute = str(Path(sys.executable).parent / "toolroute")
        gateway = StdioServerParameters(
            command=toolroute, args=["mcp", "--config", str(config), "--embedder", "none"]
        )
        direct = StdioServerParameters(command=sys.executable, args=[FIXTURE])
        samples: dict[str, list[float]] = {"direct": [], "gateway": []}
        async with (
            Client(direct, mode="legacy") as straight,
            Client(gateway, mode="legacy") as routed,
        ):
            clients = {"direct": straight, "gateway": routed}
            # Both hosts know the tool's definition, as a host that listed it does.
            await straight.list_tools()
            await routed.call_tool("search_tools", {"query": "echo the text back"})
            await routed.list_tools()
            for _ in range(20):  # warm both paths
                for client in clients.values():
                    await client.call_tool("echo", {"text": "warm"})
            for i in range(rounds):
                order = ("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")
                for name in order:
                    started = time.perf_counter()
                    result = await clients[name].call_tool("echo", {"text": f"call {i}"})
                    samples[name].append((time.perf_counter() - started) * 1000.0)
                    assert not result.is_error
    direct_p50 = statistics.median(samples["direct"])
    gateway_p50 = statistics.median(samples["gateway"])
    return {
        "bench": "forwarded_call",
        "direct": percentiles(samples["direct"]),
        "gateway": percentiles(samples["gateway"]),
        "added_p50_ms": round(gateway_p50 - direct_p50, 3),
    }


async def bench_gateway_in_process(rounds: int) -> dict[str, Any]:
    """What the gateway's own handling adds, without the extra process hop: the same
    upstream call made by the live catalogue, and through the gateway's server by the SDK
    client connected in-process, alternated."""
    samples: dict[str, list[float]] = {"live_catalog": [], "through_gateway": []}
    async with (
        open_gateway(
            {"mcpServers": {"fx": fixture(0)}},
            engine_config=EngineConfig(cache=False),
            embedder=None,
        ) as gateway,
        Client(gateway.server, mode="legacy") as client,
    ):
        await client.call_tool("search_tools", {"query": "echo the text back"})
        await client.list_tools()
        calls = {
            "live_catalog": lambda: gateway.live.call_tool("echo", {"text": "x"}),
            "through_gateway": lambda: client.call_tool("echo", {"text": "x"}),
        }
        for i in range(rounds + 20):
            for name in sorted(calls, reverse=i % 2 == 1):
                started = time.perf_counter()
                await calls[name]()
                if i >= 20:
                    samples[name].append((time.perf_counter() - started) * 1000.0)
    added = statistics.median(samples["through_gateway"]) - statistics.median(
        samples["live_catalog"]
    )
    return {
        "bench": "gateway_in_process",
        "live_catalog": percentiles(samples["live_catalog"]),
        "through_gateway": percentiles(samples["through_gateway"]),
        "added_p50_ms": round(added, 3),
    }


async def main(args: argparse.Namespace) -> None:
    embedder = embedder_of(args.embedder)
    print(json.dumps(await bench_list_changed(args.list_tools, args.changes, embedder)))
    print(json.dumps(await bench_search_tools(args.tools, args.rounds, embedder)))
    print(json.dumps(await bench_forwarded_call(args.rounds)))
    print(json.dumps(await bench_gateway_in_process(args.rounds)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000, help="upstream tools for search")
    parser.add_argument("--list-tools", type=int, default=200, help="tools on the live server")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    trio.run(main, parser.parse_args())
