"""What explanations cost on the select path, side by side in one run.

    python tests/bench/bench_explain.py [--datasets ../shared/datasets] [--size 1000] [--rounds 3]

One ``ToolIndex`` over a synthetic catalogue of ``--size`` tools (recombined real definitions;
tool vectors are random unit rows put in a temporary embedding cache), queried with MetaTool's
test requests. Every request is selected with explanations off and on, alternating which goes
first, so both see the same machine load. Prints the p50 of each and the overhead, for:

- ``minilm``: the default offline model embeds every request (what a host runs);
- ``hashing``: the hashing embedder, whose query embedding is almost free, so the overhead is
  measured against selection itself (the strict figure).

``explain=True`` explains every shown tool; ``explain=ids`` adds five hidden tools per request.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from toolroute import ToolIndex  # noqa: E402
from toolroute._bench.datasets import random_unit, synthetic_catalog  # noqa: E402
from toolroute._core.text import embedding_text  # noqa: E402
from toolroute.evaluate import load_queries  # noqa: E402
from toolroute.providers import HashingEmbedder, default_embedder  # noqa: E402
from toolroute.stores import EmbeddingCache  # noqa: E402


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000.0


def side_by_side(
    index: ToolIndex, queries: Sequence[str], hidden: Sequence[str], rounds: int
) -> dict[str, list[float]]:
    """Per-request latency (ms) of select with explanations off, on, and on with asked ids."""
    runs: dict[str, list[float]] = {"off": [], "on": [], "asked": []}
    modes: list[tuple[str, bool | Sequence[str]]] = [
        ("off", False),
        ("on", True),
        ("asked", hidden),
    ]
    for query in queries[:5]:  # warm the query path (model session, caches) before timing
        index.select(query, explain=True)
    for round_ in range(rounds):
        for i, query in enumerate(queries):
            shift = (i + round_) % len(modes)  # each mode goes first as often as the others
            for name, explain in modes[shift:] + modes[:shift]:
                runs[name].append(timed(lambda q=query, e=explain: index.select(q, explain=e)))
    return runs


def report(label: str, runs: dict[str, list[float]]) -> None:
    p50 = {name: float(np.percentile(values, 50)) for name, values in runs.items()}
    base = p50["off"]
    print(f"{label}: {len(runs['off'])} selects per mode")
    for name, text in (("off", "explain off"), ("on", "explain=True"), ("asked", "explain=ids")):
        extra = "" if name == "off" else f"  ({(p50[name] - base) / base * 100:+.1f} %)"
        print(f"  {text:14s} p50 {p50[name]:7.3f} ms{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    root = Path(args.datasets)
    queries = [
        q.text for q in load_queries(root / "metatool" / "queries.json") if q.split == "test"
    ][: args.queries]
    catalog = synthetic_catalog(root, args.size)
    hidden = list(catalog.ids[-5:])
    with tempfile.TemporaryDirectory() as directory:
        minilm = default_embedder()
        texts = [embedding_text(t) for t in catalog]
        vectors = random_unit(len(texts), minilm.dim, len(texts))
        EmbeddingCache(directory).put_many(minilm.identity, texts, vectors)
        index = ToolIndex(catalog, embedder=minilm, cache=directory)
        report(f"minilm, {len(catalog)} tools", side_by_side(index, queries, hidden, args.rounds))
    hashing = ToolIndex(catalog, embedder=HashingEmbedder(), cache=None)
    report(f"hashing, {len(catalog)} tools", side_by_side(hashing, queries, hidden, args.rounds))


if __name__ == "__main__":
    main()
