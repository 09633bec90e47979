"""A lone caller's ``Engine.select`` with the cascade on (the default) and off, side by side.

    python tests/bench/bench_cascade.py [--datasets ../shared/datasets] [--sample 400]
        [--rounds 2] [--cache bench-out/cascade-cache]

Two engines over one catalogue in one process (the same tool vectors, the query cache off so
repeats cannot hide the model), each with its fast tier open; every request of a sample of
the test split goes to both, one after the other in a shuffled order, one at a time, over
``--rounds`` passes. Printed per dataset: p50 / p99 latency, hit@5, and the share of requests
the fast tier answered alone (``RecallStatistics.fast_tier_sure``).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

DATASETS = ("bfcl", "metatool")


def hit(tool_ids: tuple[str, ...], query: Any) -> bool:
    found = set(tool_ids)
    return all(any(e in found for e in group) for group in query.groups)


async def compare(root: Path, name: str, cache: Path, sample: int, rounds: int) -> None:
    from toolroute import Catalog, EngineConfig, open_engine
    from toolroute.config import LoadConfig, WarmupConfig
    from toolroute.evaluate import load_queries

    catalog = Catalog.from_file(root / name / "tools.json")
    test = [q for q in load_queries(root / name / "queries.json") if q.split == "test"]
    random.Random(3).shuffle(test)
    chosen = test[:sample]
    engines: dict[str, Any] = {}
    latencies: dict[str, list[float]] = {"off": [], "on": []}
    hits: dict[str, list[bool]] = {"off": [], "on": []}
    async with open_engine(
        catalog,
        config=EngineConfig(
            cache_dir=str(cache),
            warmup=WarmupConfig(wait=True),
            load=LoadConfig(query_cache=0, cascade=False),
        ),
        decider=None,
    ) as engines["off"], open_engine(
        catalog,
        config=EngineConfig(
            cache_dir=str(cache), warmup=WarmupConfig(wait=True), load=LoadConfig(query_cache=0)
        ),
        decider=None,
    ) as engines["on"]:
        with trio.fail_after(600):
            while not all(e.statistics().recall.fast_tier_ready for e in engines.values()):  # noqa: ASYNC110
                await trio.sleep(0.05)
        order = random.Random(4)
        for round_ in range(rounds):
            for query in chosen:
                labels = ["off", "on"]
                order.shuffle(labels)
                for label in labels:
                    started = time.perf_counter()
                    selection = await engines[label].select(
                        query.text, max_tools=5, adaptive=False, threshold=None
                    )
                    latencies[label].append((time.perf_counter() - started) * 1000)
                    if round_ == 0:
                        hits[label].append(hit(selection.tool_ids, query))
        sure = engines["on"].statistics().recall.fast_tier_sure / (rounds * len(chosen))
    for label in ("off", "on"):
        times = np.array(latencies[label])
        answered = f"{sure:.0%}" if label == "on" else "0%"
        print(
            f"| {name} | {label} | {len(chosen)} | {np.mean(hits[label]):.3f} | "
            f"{np.percentile(times, 50):.2f} | {np.percentile(times, 99):.2f} | {answered} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    parser.add_argument("--cache", type=Path, default=Path("bench-out/cascade-cache"))
    parser.add_argument("--sample", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="", help="one dataset")
    args = parser.parse_args()
    root = args.datasets.resolve()
    print("| dataset | cascade | requests | hit@5 | p50 ms | p99 ms | answered by the fast tier |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in [args.only] if args.only else DATASETS:
        trio.run(compare, root, name, args.cache, args.sample, args.rounds)


if __name__ == "__main__":
    main()
