"""How the default fusion was chosen: candidates scored on the DEV split only.

    python tests/bench/fusion_sweep.py [--datasets ../shared/datasets]

Prints top-1 / hit@5 / MRR on each dataset's dev split and on MetaTool's no-overlap dev
queries (requests sharing no content token with their expected tool's indexed text), for
keyword-only, cosine-only and each fusion candidate. The rule: combined must not lose to the
better of keyword and cosine by more than 1 point hit@5 or 0.01 MRR anywhere; among the
candidates that keep it, take the best overall.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from toolroute import Catalog, ToolIndex
from toolroute._core.text import tokenize, tool_text
from toolroute.evaluate import load_queries
from toolroute.providers import default_embedder

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_recall import DATASETS  # noqa: E402  the same query files everywhere

Matrix = np.ndarray


def zscore(x: Matrix) -> Matrix:
    mean = x.mean(axis=1, keepdims=True)
    std = x.std(axis=1, keepdims=True)
    return (x - mean) / np.maximum(std, 1e-9)


def maxnorm(x: Matrix) -> Matrix:
    top = x.max(axis=1, keepdims=True)
    return np.where(top > 0, x / np.maximum(top, 1e-9), 0.0)


CANDIDATES: dict[str, Callable[[Matrix, Matrix, Matrix, Matrix], Matrix]] = {
    "keyword (BM25)": lambda cos, bm25, cov, name: bm25,
    "cosine": lambda cos, bm25, cov, name: cos,
    "0.3 maxnorm BM25 + 0.7 cos (toolpick)": lambda cos, bm25, cov, name: (
        0.3 * maxnorm(bm25) + 0.7 * cos
    ),
    "0.1 maxnorm BM25 + 0.9 cos": lambda cos, bm25, cov, name: 0.1 * maxnorm(bm25) + 0.9 * cos,
    "z 0.2/0.8": lambda cos, bm25, cov, name: 0.2 * zscore(bm25) + 0.8 * zscore(cos),
    "z 0.1/0.9": lambda cos, bm25, cov, name: 0.1 * zscore(bm25) + 0.9 * zscore(cos),
    "cos + 0.4 coverage (linear)": lambda cos, bm25, cov, name: cos + 0.4 * cov,
    "cos + 0.4 coverage^2": lambda cos, bm25, cov, name: cos + 0.4 * cov**2,
    "cos + 0.4 coverage^2 + 0.1 name^2 (default)": lambda cos, bm25, cov, name: (
        cos + 0.4 * cov**2 + 0.1 * name**2
    ),
    "cos + 0.4 coverage^2 + 0.2 name^2": lambda cos, bm25, cov, name: (
        cos + 0.4 * cov**2 + 0.2 * name**2
    ),
    "cos + 0.4 coverage^2 + 0.2 name": lambda cos, bm25, cov, name: cos + 0.4 * cov**2 + 0.2 * name,
}


def metrics(
    scores: Matrix, groups: list[tuple[tuple[str, ...], ...]], ids: tuple[str, ...]
) -> tuple[float, float, float]:
    k = min(10, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(
        part, np.argsort(-np.take_along_axis(scores, part, 1), axis=1, kind="stable"), 1
    )
    top1 = hit5 = mrr = 0.0
    for query_groups, row in zip(groups, order, strict=True):
        ranking = [ids[j] for j in row]
        first = min(
            min((ranking.index(e) for e in g if e in ranking), default=99) for g in query_groups
        )
        top1 += first == 0
        hit5 += first < 5
        mrr += 1 / (first + 1) if first < 99 else 0
    n = len(groups)
    return top1 / n, hit5 / n, mrr / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    root = Path(parser.parse_args().datasets)
    embedder = default_embedder()
    for name, query_file in DATASETS.items():
        catalog = Catalog.from_file(root / name / "tools.json")
        queries = [
            q for q in load_queries(root / name / query_file) if q.split == "dev" and q.groups
        ]
        index = ToolIndex(catalog, embedder=embedder)
        assert index.vectors is not None
        cos = index.vectors.scores_many(embedder.embed([q.text for q in queries]))
        tokens = [tokenize(q.text) for q in queries]
        bm25 = np.stack([index.keyword.bm25(t) for t in tokens])
        cov = np.stack([index.keyword.coverage(t) for t in tokens])
        name_cov = np.stack([index.keyword.name_coverage(t) for t in tokens])
        subsets = {"dev": np.arange(len(queries))}
        if name == "metatool":
            texts = {t.id: set(tokenize(tool_text(t))) for t in catalog}
            subsets["no-overlap dev"] = np.array(
                [
                    i
                    for i, q in enumerate(queries)
                    if not set(tokens[i]) & set().union(*(texts[e] for e in q.expected))
                ]
            )
        print(
            f"\n### {name}: {len(catalog)} tools, "
            + ", ".join(f"{len(v)} {k}" for k, v in subsets.items())
        )
        print("| candidate | " + " | ".join(f"{s} top-1 / hit@5 / MRR" for s in subsets) + " |")
        print("|---|" + "---|" * len(subsets))
        for label, combine in CANDIDATES.items():
            scores = combine(cos, bm25, cov, name_cov)
            cells = []
            for members in subsets.values():
                t1, h5, mrr = metrics(
                    scores[members], [queries[i].groups for i in members], catalog.ids
                )
                cells.append(f"{t1:.3f} / {h5:.3f} / {mrr:.3f}")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
