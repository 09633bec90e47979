"""Measure the tool-set similarity floors for the default embedder (MetaTool, dev split).

    python tests/bench/toolset_floors.py [--datasets ../shared/datasets]

Over every (request, tool) pair of MetaTool's dev queries, scored by the cosine of the
request with the tool's embedding text: for a cosine s, "precision" is the share of pairs
scoring >= s that are a request and its expected tool. Prints the lowest s reaching 80 %
(anchor floor) and 90 % (independent threshold), and the recall each keeps.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from toolroute import Catalog, ToolIndex
from toolroute.evaluate import load_queries
from toolroute.providers import default_embedder

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    root = Path(parser.parse_args().datasets) / "metatool"
    catalog = Catalog.from_file(root / "tools.json")
    queries = [q for q in load_queries(root / "queries.json") if q.split == "dev" and q.groups]
    embedder = default_embedder()
    index = ToolIndex(catalog, embedder=embedder)
    assert index.vectors is not None
    cosine = index.vectors.scores_many(embedder.embed([q.text for q in queries]))
    position = {tool_id: i for i, tool_id in enumerate(catalog.ids)}
    positive = np.zeros_like(cosine, dtype=bool)
    for row, query in enumerate(queries):
        for name in query.expected:
            positive[row, position[name]] = True
    scores, labels = cosine.ravel(), positive.ravel()
    order = np.argsort(-scores, kind="stable")
    hits = np.cumsum(labels[order])
    precision = hits / np.arange(1, len(order) + 1)
    print(f"{len(queries)} dev requests x {len(catalog)} tools; {int(labels.sum())} positive pairs")
    for target in (0.8, 0.9):
        reach = np.flatnonzero(precision >= target)
        last = int(reach.max())  # the lowest cosine whose pairs above keep the precision
        print(
            f"precision >= {target:.0%}: cosine >= {scores[order][last]:.3f} keeps "
            f"{hits[last] / labels.sum():.1%} of the positive pairs"
        )


if __name__ == "__main__":
    main()
