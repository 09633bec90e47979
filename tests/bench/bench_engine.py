"""Runtime benchmark: the trio engine against the synchronous ToolIndex, in one run.

    python tests/bench/bench_engine.py [--datasets ../shared/datasets] [--skip-cold]

Catalogues are synthetic (recombined real tool definitions, see bench_recall.py); their tool
vectors are random unit vectors put in the embedding cache, while every request is embedded
by the real offline model. Prints:

- throughput and p50/p99 latency of ``engine.select`` with 1, 10, 100 and 1,000 concurrent
  callers on 1k tools, next to the synchronous ``ToolIndex.select`` p50;
- engine overhead: keyword-only ``engine.select`` p50 minus ``ToolIndex.select`` p50;
- event-loop lag p99 while requests are scored against 100k tools;
- warm-up of 10k tools: time to the first (degraded) answer, and to ready from the cache and
  (unless ``--skip-cold``) cold.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_recall import random_unit, synthetic_catalog  # noqa: E402

from toolroute import Catalog, EngineConfig, ToolIndex, open_engine  # noqa: E402
from toolroute._core.config import WarmupConfig  # noqa: E402
from toolroute._core.text import embedding_text  # noqa: E402
from toolroute.evaluate import load_queries  # noqa: E402
from toolroute.providers import default_embedder  # noqa: E402
from toolroute.stores import EmbeddingCache  # noqa: E402


def prefill(catalog: Catalog, directory: Path) -> None:
    embedder = default_embedder()
    texts = [embedding_text(t) for t in catalog]
    EmbeddingCache(directory).put_many(
        embedder.identity, texts, random_unit(len(texts), embedder.dim, len(texts))
    )


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


async def callers_run(
    engine: object, queries: list[str], callers: int, total: int
) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    outcomes: list[str] = []
    per_caller = max(1, total // callers)

    async def caller(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(per_caller):
            started = time.perf_counter()
            selection = await engine.select(rng.choice(queries))  # type: ignore[attr-defined]
            latencies.append((time.perf_counter() - started) * 1000.0)
            outcomes.append(selection.outcome)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for seed in range(callers):
            nursery.start_soon(caller, seed)
    elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies, outcomes.count("degraded")


async def loop_lag(engine: object, queries: list[str], rounds: int) -> list[float]:
    lags: list[float] = []
    done = trio.Event()

    async def ticker() -> None:
        while not done.is_set():
            started = trio.current_time()
            await trio.sleep(0.001)
            lags.append((trio.current_time() - started - 0.001) * 1000.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        for query in queries[:rounds]:
            await engine.select(query)  # type: ignore[attr-defined]
        done.set()
    return lags


async def main_async(args: argparse.Namespace) -> None:
    root = Path(args.datasets)
    queries = [
        q.text for q in load_queries(root / "metatool" / "queries.json") if q.split == "test"
    ]
    queries = random.Random(0).sample(queries, 400)
    work = Path(tempfile.mkdtemp(prefix="toolroute-bench-engine-"))
    embedder = default_embedder()
    embedder.embed(["warm up"])

    catalog = synthetic_catalog(root, 1000)
    prefill(catalog, work / "c1k")
    index = ToolIndex(catalog, cache=EmbeddingCache(work / "c1k"))
    keyword_index = ToolIndex(catalog, embedder=None, cache=None)
    for q in queries[:20]:
        index.select(q)
    sync_p50 = percentile([index.select(q).latency_ms for q in queries], 50)
    sync_keyword_p50 = percentile([keyword_index.select(q).latency_ms for q in queries], 50)
    print("## Engine vs ToolIndex, 1k tools, default embedder\n")
    print(f"ToolIndex.select p50 (one caller, synchronous): {sync_p50:.2f} ms\n")
    print(
        "| concurrent callers | requests | throughput /s | × single caller | p50 ms | p99 ms "
        "| answered keyword-only (embedding past its deadline) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    config = EngineConfig(cache_dir=work / "c1k", warmup=WarmupConfig(wait=True))
    async with open_engine(catalog, config=config, embedder=embedder) as engine:
        for q in queries[:20]:
            await engine.select(q)
        single = None
        for callers in (1, 10, 100, 1000):
            throughput, lat, degraded = await callers_run(
                engine, queries, callers, max(400, callers * 2)
            )
            single = single or throughput
            print(
                f"| {callers} | {len(lat)} | {throughput:.0f} | {throughput / single:.2f} | "
                f"{percentile(lat, 50):.2f} | {percentile(lat, 99):.2f} | "
                f"{degraded / len(lat):.0%} |",
                flush=True,
            )
    async with open_engine(catalog, config=EngineConfig(cache=False), embedder=None) as engine:
        for q in queries[:20]:
            await engine.select(q)
        engine_keyword = [(await engine.select(q)).latency_ms for q in queries]
    overhead = percentile(engine_keyword, 50) - sync_keyword_p50
    print(
        f"\nKeyword-only p50: engine {percentile(engine_keyword, 50):.3f} ms, ToolIndex "
        f"{sync_keyword_p50:.3f} ms: overhead {overhead:.3f} ms"
    )

    big = synthetic_catalog(root, 100_000)
    prefill(big, work / "c100k")
    config = EngineConfig(cache_dir=work / "c100k", warmup=WarmupConfig(wait=True))
    async with open_engine(big, config=config, embedder=embedder) as engine:
        lags = await loop_lag(engine, queries, 100)
    print(
        f"\nEvent-loop lag while scoring 100k tools: p50 {percentile(lags, 50):.2f} ms, p99 {percentile(lags, 99):.2f} ms"
    )

    mid = synthetic_catalog(root, 10_000)
    prefill(mid, work / "c10k")
    for label, config in (
        ("from the cache", EngineConfig(cache_dir=work / "c10k")),
        ("cold", EngineConfig(cache=False)),
    ):
        if label == "cold" and args.skip_cold:
            continue
        started = time.perf_counter()
        async with open_engine(mid, config=config, embedder=embedder) as engine:
            first = await engine.select(queries[0])
            first_s = time.perf_counter() - started
            await engine.ready()
            ready_s = time.perf_counter() - started
        print(
            f"Warm-up of 10k tools {label}: first answer after {first_s:.3f} s ({first.outcome}), "
            f"ready after {ready_s:.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--skip-cold", action="store_true")
    trio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
