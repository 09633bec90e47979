"""A burst of 200 concurrent selects against one engine, cold and warm, side by side.

    python tests/bench/bench_burst.py [--python OLD_PYTHON] [--rounds 2] [--datasets DIR]

Each scenario runs in a fresh interpreter (one per round and tree, alternated), with the query
cache off so that repeats cannot hide the load:

- *cold*: a new engine (tool vectors cached, nothing else: no request served, the fast tier
  from the shipped table and the catalogue's text only, once it has opened) meets 200 test
  requests at once;
- *warm*: 600 dev requests served first, then 400 test requests one at a time, then the burst.

Printed per dataset and tree: hit@5 of the burst's 200 requests one at a time (full tier) and
at once, where the burst's answers came from, p50 / p99 / max latency against the embed
deadline (``deadlines.embed_s``, 250 ms). ``--python`` runs the same scenarios with another
interpreter (another checkout's virtualenv) for a before/after table in one run.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

DATASETS = ("metatool", "bfcl")
BURST = 200


def hit(tool_ids: tuple[str, ...], query: Any) -> bool:
    found = set(tool_ids)
    return all(any(e in found for e in group) for group in query.groups)


async def scenario(root: Path, name: str, warm: bool, cache: Path) -> dict[str, Any]:
    from toolroute import Catalog, EngineConfig, Outcome, open_engine
    from toolroute.config import LoadConfig, WarmupConfig
    from toolroute.evaluate import load_queries

    catalog = Catalog.from_file(root / name / "tools.json")
    queries = load_queries(root / name / "queries.json")
    test = [q for q in queries if q.split == "test"]
    dev = [q for q in queries if q.split == "dev"]
    random.Random(1).shuffle(test)
    random.Random(2).shuffle(dev)
    chosen, others = test[:BURST], test[BURST : BURST + 400]
    config = EngineConfig(
        cache_dir=str(cache),
        warmup=WarmupConfig(wait=True),
        load=LoadConfig(query_cache=0),
    )

    async def one(engine: Any, query: Any) -> tuple[bool, str, float]:
        started = time.perf_counter()
        selection = await engine.select(query.text, max_tools=5, adaptive=False, threshold=None)
        elapsed = (time.perf_counter() - started) * 1000
        rung = "full"
        if selection.outcome is Outcome.DEGRADED:
            rung = "fast" if selection.reason.startswith("fast tier") else "keyword"
        return hit(selection.tool_ids, query), rung, elapsed

    out: dict[str, Any] = {}
    async with open_engine(catalog, config=config, decider=None) as engine:
        with trio.fail_after(600):
            # The fast tier opens in the background after ready() (a fit on the catalogue's
            # text: ~0.2 s of CPU for MetaTool, ~2 s for BFCL); the public statistics tell.
            while not engine.statistics().recall.fast_tier_open:  # noqa: ASYNC110
                await trio.sleep(0.05)
        if warm:
            for query in dev[:600]:
                await engine.select(query.text)
            for query in others:
                await engine.select(query.text)
        results: list[tuple[bool, str, float]] = []

        async def caller(query: Any) -> None:
            results.append(await one(engine, query))

        async with trio.open_nursery() as nursery:
            for query in chosen:
                nursery.start_soon(caller, query)
        alone = [await one(engine, q) for q in chosen]
        stats = engine.statistics().recall
    latencies = np.array([r[2] for r in results])
    rungs = [r[1] for r in results]
    out.update(
        alone=float(np.mean([r[0] for r in alone])),
        burst=float(np.mean([r[0] for r in results])),
        fast=rungs.count("fast") / len(rungs),
        keyword=rungs.count("keyword") / len(rungs),
        p50=float(np.percentile(latencies, 50)),
        p99=float(np.percentile(latencies, 99)),
        max=float(latencies.max()),
        fast_tier_served=stats.fast_tier_served,
    )
    return out


def child(root: Path, name: str, warm: bool, embeddings: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch) / "cache"
        shutil.copytree(embeddings, cache)
        print(json.dumps(trio.run(scenario, root, name, warm, cache)))


def embeddings_only(root: Path, name: str, into: Path) -> Path:
    """A cache directory holding the catalogue's tool vectors only (embedded once)."""
    from toolroute import Catalog, ToolIndex
    from toolroute.providers import default_embedder
    from toolroute.stores import EmbeddingCache

    directory = into / name
    if not directory.exists():
        catalog = Catalog.from_file(root / name / "tools.json")
        ToolIndex(catalog, embedder=default_embedder(), cache=EmbeddingCache(directory))
        for extra in directory.iterdir():
            if extra.is_dir():
                shutil.rmtree(extra)  # a fast tier or anything else: the engine starts cold
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    parser.add_argument("--python", help="another interpreter to compare with (run first)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default="", help="one dataset")
    parser.add_argument("--child", nargs=3, metavar=("DATASET", "MODE", "EMBEDDINGS"))
    args = parser.parse_args()
    root = args.datasets.resolve()
    if args.child:
        name, mode, embeddings = args.child
        child(root, name, mode == "warm", Path(embeddings))
        return
    trees = ([("old", args.python)] if args.python else []) + [("new", sys.executable)]
    names = [args.only] if args.only else list(DATASETS)
    print("| dataset | burst | tree | alone hit@5 | burst hit@5 | fast tier | keyword-only"
          " | p50 ms | p99 ms | max ms |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            embeddings = embeddings_only(root, name, Path(scratch))
            for mode in ("cold", "warm"):
                for round_ in range(args.rounds):
                    for label, python in trees if round_ % 2 == 0 else trees[::-1]:
                        command = [python, __file__, "--datasets", str(root), "--child",
                                   name, mode, str(embeddings)]  # fmt: skip
                        line = subprocess.run(
                            command, check=True, capture_output=True, text=True
                        ).stdout.strip().splitlines()[-1]
                        r = json.loads(line)
                        print(f"| {name} | {mode} | {label} | {r['alone']:.3f} | {r['burst']:.3f}"
                              f" | {r['fast']:.0%} | {r['keyword']:.0%} | {r['p50']:.0f}"
                              f" | {r['p99']:.0f} | {r['max']:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
