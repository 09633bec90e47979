"""What one synchronous ``ToolIndex.select`` costs beyond scoring: keyword-only and with the
hashing embedder (no model time), over MetaTool requests, timed outside the call.

    python tests/bench/bench_select_overhead.py [--datasets ../shared/datasets] [--queries 1500]

Prints the p50 in milliseconds per index as one JSON line. To compare two versions, run it
in both checkouts alternately on the same machine (the figures move with the load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from toolroute import Catalog, ToolIndex
from toolroute.evaluate import load_queries
from toolroute.providers import HashingEmbedder

HERE = Path(__file__).resolve().parent
WARMUP = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--queries", type=int, default=1500)
    args = parser.parse_args()
    root = Path(args.datasets) / "metatool"
    catalog = Catalog.from_file(root / "tools.json")
    queries = [q.text for q in load_queries(root / "queries.json")][: args.queries]
    indexes = {
        "keyword": ToolIndex(catalog, embedder=None, cache=None),
        "combined_hashing": ToolIndex(catalog, embedder=HashingEmbedder(), cache=None),
    }
    p50: dict[str, float] = {}
    for name, index in indexes.items():
        for query in queries[:WARMUP]:
            index.select(query)
        times = []
        for query in queries:
            started = time.perf_counter()
            index.select(query)
            times.append((time.perf_counter() - started) * 1000.0)
        p50[f"{name}_p50_ms"] = round(statistics.median(times), 4)
    print(json.dumps({"tools": len(catalog), "queries": len(queries), **p50}))


if __name__ == "__main__":
    main()
