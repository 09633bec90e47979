"""Choose ``LoadConfig.min_served`` on dev splits only.

How many served requests must the fast tier have learned from before it beats keyword-only?
Each dataset's dev split is cut in two (seeded): the tier learns from the first half in
growing steps and both are scored on the second half (completeness@5, as ``bench_load``).
The test splits are never read.

    python tests/bench/fast_tier_threshold.py [--datasets ../shared/datasets]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from bench_load import fast, hit_at_5

from toolroute import Catalog, ToolIndex
from toolroute.evaluate import load_queries
from toolroute.providers import default_embedder
from toolroute.providers._embedders.fast_tier.tier import FastTier

STEPS = (0, 25, 50, 100, 200, 400, 800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    args = parser.parse_args()
    embedder = default_embedder()
    print(
        "| dataset | dev held out | keyword | full tier | "
        + " | ".join(f"+{n}" for n in STEPS)
        + " |"
    )
    print("|---|---:|---:|---:|" + "---:|" * len(STEPS))
    for name in ("metatool", "bfcl"):
        catalog = Catalog.from_file(args.datasets / name / "tools.json")
        index = ToolIndex(catalog, embedder=embedder, cache=None)
        assert index.vectors is not None
        dev = [q for q in load_queries(args.datasets / name / "queries.json") if q.split == "dev"]
        random.Random(0).shuffle(dev)
        learn, held = dev[: len(dev) // 2], dev[len(dev) // 2 :][:1000]
        texts = [q.text for q in held]
        row = [
            f"{hit_at_5(index, held, [None] * len(held)):.3f}",
            f"{hit_at_5(index, held, list(embedder.embed(texts))):.3f}",
        ]
        tier = FastTier.open(
            embedder,
            cache_dir=None,
            tool_texts=index.embedding_texts(),
            tool_vectors=index.vectors.matrix,
        )
        learned = 0
        for goal in STEPS:
            batch = [q.text for q in learn[learned:goal]]
            if batch:
                tier.learn(batch, embedder.embed(batch))
                tier.refit()
                learned = goal
            row.append(f"{hit_at_5(index, held, fast(tier.embed(texts))):.3f}")
        print(f"| {name} | {len(held)} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
