"""Section 7 of bench_load.py: the recall service's load ladder with the real MiniLM.

For MetaTool and BFCL (test-split requests; the fast tier learns only dev-split requests):

- one engine, the same requests one at a time (full tier), then 200 at once: hit@5,
  the share of answers from the fast tier and keyword-only, p50/p99 latency;
- with the fast tier off (the old behaviour: wait for the deadline, then keyword-only) and
  with it fitted on 0 / 100 / 1k / 10k served dev requests (as many as the split has);
- throughput with 100 callers vs one caller, and their hit@5.

Engines run with ``load.learn`` off so that each row measures the fast tier as prepared (an
engine that learned from the test requests it is answering would flatter itself). Before a
burst the engine answers five requests alone: the batcher has then measured the model's
time per request (a server's traffic ramps up; a cold burst falls back at the deadline).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import trio

from toolroute import Catalog, EngineConfig, Outcome, ToolIndex
from toolroute._core.config import LoadConfig, WarmupConfig
from toolroute._runtime.engine import Engine, open_engine
from toolroute.evaluate import load_queries
from toolroute.providers._embedders.fast_tier.tier import FastTier
from toolroute.providers._embedders.minilm import MiniLMEmbedder
from toolroute.stores import EmbeddingCache

DATASETS = ("metatool", "bfcl")
SERVED = (0, 100, 1_000, 10_000)
BURST = 200
CALLERS = 100


def prepare_tiers(
    root: Path, name: str, embedder: MiniLMEmbedder, scratch: Path, served: Sequence[int]
) -> dict[int, tuple[Path, int]]:
    """A cache directory per amount of served dev requests, with the fast tier fitted on
    them (tool vectors cached too): ``{goal: (directory, learned)}``."""
    catalog = Catalog.from_file(root / name / "tools.json")
    base = scratch / f"{name}-base"
    distilled = next(scratch.glob("*-base/fast-tier"), None)
    if distilled is not None:
        # The distilled table is the model's, not the dataset's: reuse it, and drop a learned
        # file so that its (checksummed) statistics are refitted from this dataset's tools.
        shutil.copytree(distilled, base / "fast-tier")
        for keys in (base / "fast-tier").glob("*/keys.npy"):
            keys.unlink()
    index = ToolIndex(catalog, embedder=embedder, cache=EmbeddingCache(base))
    assert index.vectors is not None
    FastTier.open(
        embedder,
        cache_dir=base,
        tool_texts=index.embedding_texts(),
        tool_vectors=index.vectors.matrix,
    )
    dev = [q.text for q in load_queries(root / name / "queries.json") if q.split == "dev"]
    random.Random(0).shuffle(dev)
    dev = dev[: max(served)]
    vectors = embedder.embed(dev) if dev else np.zeros((0, embedder.dim), np.float32)
    tiers: dict[int, tuple[Path, int]] = {}
    for goal in served:
        directory = scratch / f"{name}-{goal}"
        shutil.copytree(base, directory)
        learned = min(goal, len(dev))
        if learned:
            tier = FastTier.open(embedder, cache_dir=directory)
            tier.learn(dev[:learned], vectors[:learned])
            tier.refit()
            tier.save()
        tiers[goal] = (directory, learned)
    return tiers


def hit(selection_ids: Sequence[str], query: Any) -> bool:
    found = set(selection_ids)
    return all(any(e in found for e in group) for group in query.groups)


async def one_select(engine: Engine, query: Any) -> tuple[bool, str, float]:
    """(hit, rung, seconds): rung is ``full``, ``fast`` or ``keyword``."""
    started = time.perf_counter()
    selection = await engine.select(query.text, max_tools=5, adaptive=False, threshold=None)
    elapsed = time.perf_counter() - started
    if selection.outcome is not Outcome.DEGRADED:
        rung = "full"
    elif selection.reason.startswith("fast tier"):
        rung = "fast"
    else:
        rung = "keyword"
    return hit(selection.tool_ids, query), rung, elapsed


async def burst(engine: Engine, queries: Sequence[Any]) -> list[tuple[bool, str, float]]:
    results: list[tuple[bool, str, float]] = []

    async def one(query: Any) -> None:
        results.append(await one_select(engine, query))

    async with trio.open_nursery() as nursery:
        for query in queries:
            nursery.start_soon(one, query)
    return results


async def callers(
    engine: Engine, queries: Sequence[Any], count: int
) -> tuple[float, list[tuple[bool, str, float]]]:
    """Requests per second and results with ``count`` callers sharing ``queries``."""
    todo = list(queries)
    results: list[tuple[bool, str, float]] = []

    async def caller() -> None:
        while todo:
            results.append(await one_select(engine, todo.pop()))

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(caller)
    return len(queries) / (time.perf_counter() - started), results


def summary(results: Sequence[tuple[bool, str, float]]) -> dict[str, float]:
    latencies = np.array([r[2] for r in results]) * 1000
    rungs = [r[1] for r in results]
    return {
        "hit5": float(np.mean([r[0] for r in results])),
        "fast": rungs.count("fast") / len(rungs),
        "keyword": rungs.count("keyword") / len(rungs),
        "p50": float(np.percentile(latencies, 50)),
        "p99": float(np.percentile(latencies, 99)),
    }


async def measure(
    catalog: Catalog,
    embedder: MiniLMEmbedder,
    cache_dir: Path,
    fast_tier: bool,
    test: Sequence[Any],
    throughput_queries: Sequence[Any] | None,
) -> dict[str, Any]:
    config = EngineConfig(
        cache_dir=str(cache_dir),
        warmup=WarmupConfig(wait=True),
        load=LoadConfig(fast_tier=fast_tier, learn=False, query_cache=0),
    )
    out: dict[str, Any] = {}
    async with open_engine(catalog, config=config, embedder=embedder, decider=None) as engine:
        with trio.fail_after(300):
            # The public statistics are all a host sees; poll them.
            while fast_tier and not engine.statistics().recall.fast_tier_open:  # noqa: ASYNC110
                await trio.sleep(0.05)
        for query in test[:5]:  # the batcher measures the model's time per request
            await one_select(engine, query)
        out["alone"] = summary([await one_select(engine, q) for q in test])
        out["burst"] = summary(await burst(engine, test))
        if throughput_queries is not None:
            one_rate, one = await callers(engine, throughput_queries, 1)
            many_rate, many = await callers(engine, throughput_queries, CALLERS)
            out["throughput"] = (one_rate, summary(one), many_rate, summary(many))
        out["ready"] = engine.statistics().recall.fast_tier_ready
    return out


def concurrency(root: Path, embedder: MiniLMEmbedder, scratch: Path, quick: bool) -> None:
    print(f"\n## 7. {BURST} concurrent selects vs one at a time (the load ladder)\n")
    served = (0, 100) if quick else SERVED
    print("| dataset | fast tier | one at a time hit@5 (p50 ms) | 200 at once hit@5 |"
          " fast tier | keyword-only | p50 ms | p99 ms |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    throughput_rows: list[str] = []
    for name in DATASETS:
        catalog = Catalog.from_file(root / name / "tools.json")
        queries = load_queries(root / name / "queries.json")
        test = [q for q in queries if q.split == "test"]
        random.Random(1).shuffle(test)
        burst_queries, throughput_queries = test[:BURST], test[: min(len(test), 1000)]
        tiers = prepare_tiers(root, name, embedder, scratch, served)
        runs: list[tuple[str, Path, bool, int]] = [("off", tiers[0][0], False, 0)]
        runs += [(f"+{n} served", d, True, n) for n, (d, learned) in tiers.items()]
        for position, (label, directory, fast_tier, goal) in enumerate(runs):
            learned = tiers[goal][1]
            if fast_tier and learned != goal:
                label = f"+{learned} served (all dev)"
            last = position == len(runs) - 1
            wanted = throughput_queries if not fast_tier or last else None
            result = trio.run(
                measure, catalog, embedder, directory, fast_tier, burst_queries, wanted
            )
            alone, crowd = result["alone"], result["burst"]
            print(f"| {name} | {label}{'' if result['ready'] or not fast_tier else ' (not used)'}"
                  f" | {alone['hit5']:.3f} ({alone['p50']:.1f}) | {crowd['hit5']:.3f}"
                  f" | {crowd['fast']:.1%} | {crowd['keyword']:.1%} | {crowd['p50']:.0f}"
                  f" | {crowd['p99']:.0f} |", flush=True)  # fmt: skip
            if "throughput" in result:
                one_rate, one, many_rate, many = result["throughput"]
                throughput_rows.append(
                    f"| {name} | {label} | {len(throughput_queries)} | {one_rate:.0f}"
                    f" ({one['hit5']:.3f}) | {many_rate:.0f} ({many['hit5']:.3f}) |"
                    f" {many_rate / one_rate:.1f}x | {many['fast']:.1%} | {many['keyword']:.1%} |"
                )
    print(f"\n{CALLERS} callers vs one caller (distinct test requests, requests/s and hit@5):\n")
    print("| dataset | fast tier | requests | 1 caller /s (hit@5) | 100 callers /s (hit@5) |"
          " ratio | fast tier | keyword-only |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in throughput_rows:
        print(row)
