"""Choose the fast tier's fusion weights on dev splits only.

A fast-tier vector is a mean of static token rows: rougher than the model's, so keyword
evidence may deserve more weight next to its cosine. Each dataset's dev split is cut in two
(seeded, as ``fast_tier_threshold.py``): the tier learns from the first half (0 / 200 / 1,000
served requests) and rankings of the second half are scored (completeness@5) with
``cosine + a * coverage**2 + b * name_coverage**2`` over a grid of ``(a, b)``. The model's
weights are ``(0.4, 0.1)``. The test splits are never read.

    python tests/bench/fast_tier_fusion.py [--datasets ../shared/datasets]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import numpy as np

from toolroute import Catalog, ToolIndex
from toolroute._core.recall.vectors import top_k
from toolroute._core.text import tokenize
from toolroute.evaluate import load_queries
from toolroute.providers import default_embedder
from toolroute.providers._embedders.fast_tier.tier import FastTier

COVERAGE = (0.4, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0)
NAME = (0.1, 0.33, 0.66, 1.0)
SERVED = (0, 200, 1000)


Evidence = list[tuple[np.ndarray, np.ndarray, list[list[int]]]]


def wanted(query: Any, position: dict[str, int]) -> list[list[int]]:
    """The request's expected tool groups, as catalogue rows."""
    return [[position[e] for e in group] for group in query.groups]


def score(cosines: list[np.ndarray], evidence: Evidence, a: float, b: float) -> float:
    """Completeness@5 of ``cosine + a * coverage**2 + b * name_coverage**2``."""
    hits = []
    for cosine, (coverage, names, groups) in zip(cosines, evidence, strict=True):
        top = set(top_k(cosine + a * coverage * coverage + b * names * names, 5).tolist())
        hits.append(all(any(row in top for row in group) for group in groups))
    return float(np.mean(hits))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    args = parser.parse_args()
    embedder = default_embedder()
    print("| dataset | served | keyword | model's weights (0.4, 0.1) | (4, 0.33) | best (a, b) |")
    print("|---|---:|---:|---:|---:|---|")
    for name in ("metatool", "bfcl"):
        catalog = Catalog.from_file(args.datasets / name / "tools.json")
        index = ToolIndex(catalog, embedder=embedder, cache=None)
        assert index.vectors is not None
        dev = [q for q in load_queries(args.datasets / name / "queries.json") if q.split == "dev"]
        random.Random(0).shuffle(dev)
        learn, held = dev[: len(dev) // 2], dev[len(dev) // 2 :][:1000]
        matrix, keyword = index.vectors.matrix, index.keyword
        position = {tool_id: i for i, tool_id in enumerate(catalog.ids)}
        terms = [tokenize(q.text) for q in held]
        coverage = [keyword.coverage(t) for t in terms]
        names = [keyword.name_coverage(t) for t in terms]

        evidence = list(zip(coverage, names, [wanted(q, position) for q in held], strict=True))
        words = score([np.zeros(len(catalog), np.float32)] * len(held), evidence, 0.4, 0.1)
        tier = FastTier.open(
            embedder,
            cache_dir=None,
            tool_texts=index.embedding_texts(),
            tool_vectors=index.vectors.matrix,
        )
        learned = 0
        for goal in SERVED:
            batch = [q.text for q in learn[learned:goal]]
            if batch:
                tier.learn(batch, embedder.embed(batch))
                tier.refit()
                learned = goal
            cosines = [matrix @ v for v in tier.embed([q.text for q in held])]
            grid = {(a, b): score(cosines, evidence, a, b) for a in COVERAGE for b in NAME}
            best = max(grid, key=lambda ab: grid[ab])
            print(
                f"| {name} | {learned} | {words:.3f} | {grid[(0.4, 0.1)]:.3f}"
                f" | {grid[(4.0, 0.33)]:.3f} | {best} {grid[best]:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
