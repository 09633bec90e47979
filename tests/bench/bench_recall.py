"""Recall benchmark on the bundled datasets, plus the scale run.

    python tests/bench/bench_recall.py [--datasets ../shared/datasets] [--out bench-out]

For every dataset, on its test split and whole: top-1, hit@5, recall@5, MRR of keyword,
semantic and combined recall with the offline default embedder; p50/p95 selection latency
(one request at a time, query embedding included, on up to ``--latency-sample`` queries);
index build time; peak RSS. It then checks the "must not lose" rule of the fusion (on each
test split and on MetaTool's no-overlap set) and runs the scale benchmark (1k, 10k, 100k
tools). Everything is printed as Markdown and written to ``OUT/recall.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from toolroute import Catalog, ToolIndex
from toolroute._bench.datasets import peak_rss_mb, random_unit, synthetic_catalog
from toolroute._core.text import embedding_text, tokenize, tool_text
from toolroute.evaluate import evaluate, load_queries
from toolroute.providers import default_embedder
from toolroute.stores import EmbeddingCache

HERE = Path(__file__).resolve().parent
DATASETS = {
    "metatool": "queries.json",
    "bfcl": "queries.json",
    "livemcpbench": "queries.json",
    "toolpick-saas": "keyword_queries.json",
}
STRATEGIES = ("keyword", "semantic", "combined")


class MemoEmbedder:
    """Remembers query vectors so the semantic and combined passes embed each query once.

    Used for accuracy only; latency is measured with the plain embedder.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity, self.dim, self.max_batch = inner.identity, inner.dim, inner.max_batch
        self.memo: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if missing:
            self.memo.update(zip(missing, self.inner.embed(missing), strict=True))
        return np.stack([self.memo[t] for t in texts]) if texts else self.inner.embed([])


def run_dataset(root: Path, name: str, cache_dir: Path, latency_sample: int) -> dict[str, Any]:
    catalog = Catalog.from_file(root / name / "tools.json")
    queries = load_queries(root / name / DATASETS[name])
    embedder = default_embedder()
    started = time.perf_counter()
    index = ToolIndex(catalog, embedder=embedder, cache=EmbeddingCache(cache_dir))
    build_s = time.perf_counter() - started
    keyword_build = ToolIndex(catalog, embedder=None, cache=None).build_s
    subsets: dict[str, list[int]] = {
        "test": [i for i, q in enumerate(queries) if q.split == "test"],
        "all": list(range(len(queries))),
    }
    if name == "metatool":
        texts = {t.id: set(tokenize(tool_text(t))) for t in catalog}
        subsets["no-overlap"] = [
            i
            for i, q in enumerate(queries)
            if not set(tokenize(q.text)) & set().union(*(texts[e] for e in q.expected))
        ]
    rows: dict[str, Any] = {
        "tools": len(catalog),
        "queries": len(queries),
        "build_s": build_s,
        "keyword_build_s": keyword_build,
        "strategies": {},
    }
    # Accuracy: rank every query once per strategy (queries embedded in batches, once).
    memo = ToolIndex(catalog, embedder=MemoEmbedder(embedder), cache=EmbeddingCache(cache_dir))
    texts = [q.text for q in queries]
    rankings = {s: memo.search_many(texts, 10, strategy=s) for s in STRATEGIES}
    rng = random.Random(0)
    timed = rng.sample(range(len(queries)), min(latency_sample, len(queries)))
    for strategy in STRATEGIES:
        for i in timed[:20]:  # warm-up, excluded
            index.select(queries[i].text, strategy=strategy)
        latencies = [index.select(queries[i].text, strategy=strategy).latency_ms for i in timed]
        per_subset = {}
        for subset, members in subsets.items():
            report = evaluate(
                [queries[i] for i in members],
                [rankings[strategy][i].tool_ids for i in members],
                latencies,
            )
            report.pop("misses")
            per_subset[subset] = report
        rows["strategies"][strategy] = per_subset
    rows["peak_rss_mb"] = peak_rss_mb()
    return rows


def must_not_lose(results: dict[str, Any]) -> list[str]:
    lines = []
    for name, data in results.items():
        for subset in ("test", "no-overlap"):
            if subset not in data["strategies"]["combined"]:
                continue
            row = {s: data["strategies"][s][subset] for s in STRATEGIES}
            best_hit = max(row["keyword"]["hit@5"], row["semantic"]["hit@5"])
            best_mrr = max(row["keyword"]["mrr"], row["semantic"]["mrr"])
            hit, mrr = row["combined"]["hit@5"], row["combined"]["mrr"]
            ok = hit >= best_hit - 0.01 and mrr >= best_mrr - 0.01
            lines.append(
                f"| {name} | {subset} | {hit:.3f} vs {best_hit:.3f} | {mrr:.3f} vs {best_mrr:.3f} "
                f"| {'yes' if ok else 'NO'} |"
            )
    return lines


def scale_run(root: Path, cache_dir: Path, sizes: list[int]) -> list[dict[str, Any]]:
    """Latency vs catalogue size. Tool vectors are random unit vectors (put in the cache so
    the index loads them as it would real ones); queries are embedded by the real model."""
    embedder = default_embedder()
    queries = [q.text for q in load_queries(root / "metatool" / "queries.json")[:200]]
    rows = []
    for size in sizes:
        catalog = synthetic_catalog(root, size)
        cache = EmbeddingCache(cache_dir / f"scale{size}")
        texts = [embedding_text(t) for t in catalog]
        cache.put_many(embedder.identity, texts, random_unit(size, embedder.dim, size))
        started = time.perf_counter()
        index = ToolIndex(
            catalog, embedder=embedder, cache=EmbeddingCache(cache_dir / f"scale{size}")
        )
        restart_s = time.perf_counter() - started
        assert index.vectors is not None
        qv = embedder.embed(queries[:32])
        timings: dict[str, list[float]] = {"keyword": [], "vector": [], "combined": []}
        for q in queries[:10]:
            index.select(q)  # warm-up
        for i, q in enumerate(queries):
            timings["keyword"].append(index.select(q, strategy="keyword").latency_ms)
            t = time.perf_counter()
            scores = index.vectors.scores(qv[i % 32])
            from toolroute._core.recall.vectors import top_k

            top_k(scores, 5)
            timings["vector"].append((time.perf_counter() - t) * 1000)
            timings["combined"].append(index.select(q).latency_ms)
        t = time.perf_counter()
        for _ in range(5):
            batch = index.vectors.scores_many(qv)
            for row in batch:
                top_k(row, 5)
        batch_ms = (time.perf_counter() - t) * 1000 / 5
        row = {
            "tools": size,
            "restart_s": restart_s,
            **{f"{k}_p50_ms": float(np.percentile(v, 50)) for k, v in timings.items()},
            **{f"{k}_p95_ms": float(np.percentile(v, 95)) for k, v in timings.items()},
            "batch32_ms": batch_ms,
            "batch32_over_one": batch_ms / float(np.percentile(timings["vector"], 50)),
        }
        rows.append(row)
        print(
            f"  scale {size}: {json.dumps({k: round(v, 3) for k, v in row.items()})}",
            file=sys.stderr,
        )
    return rows


def warmup_run(root: Path) -> dict[str, float]:
    """Cold warm-up speed on BFCL's tool text (no cache)."""
    catalog = Catalog.from_file(root / "bfcl" / "tools.json")
    embedder = default_embedder()
    embedder.embed(["warm the model up"])
    started = time.perf_counter()
    ToolIndex(catalog, embedder=embedder, cache=None)
    seconds = time.perf_counter() - started
    return {"tools": len(catalog), "seconds": seconds, "tools_per_s": len(catalog) / seconds}


def rss_run(root: Path, cache_dir: Path | None, size: int) -> float:
    """Peak RSS of a fresh process that builds a ``size``-tool index and selects: from the
    cache in ``cache_dir``, or embedding every tool when it is ``None``."""
    code = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from pathlib import Path
from bench_recall import peak_rss_mb, synthetic_catalog
from toolroute import ToolIndex
from toolroute.stores import EmbeddingCache
cache = {str(cache_dir / f"scale{size}") if cache_dir else None!r}
index = ToolIndex(synthetic_catalog(Path({str(root)!r}), {size}),
                  cache=EmbeddingCache(cache) if cache else None)
for q in ["send an email to the team", "weather in Paris", "create a github issue"]:
    index.select(q)
print(peak_rss_mb())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| dataset | split | strategy | n | top-1 | hit@5 | recall@5 | MRR | p50 ms | p95 ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, data in results.items():
        for subset in ("test", "all", "no-overlap"):
            for strategy in STRATEGIES:
                r = data["strategies"][strategy].get(subset)
                if r is None:
                    continue
                lat = r["latency_ms"]
                lines.append(
                    f"| {name} | {subset} | {strategy} | {r['n']} | {r['top1']:.3f} | "
                    f"{r['hit@5']:.3f} | {r['recall@5']:.3f} | {r['mrr']:.3f} | "
                    f"{lat['p50']:.2f} | {lat['p95']:.2f} |"
                )
    lines.append("")
    lines.append(
        "| dataset | tools | index build s (cold cache) | keyword-only build s | peak RSS MB |"
    )
    lines.append("|---|---:|---:|---:|---:|")
    for name, data in results.items():
        lines.append(
            f"| {name} | {data['tools']} | {data['build_s']:.2f} | {data['keyword_build_s']:.3f} "
            f"| {data['peak_rss_mb']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--latency-sample", type=int, default=500)
    parser.add_argument("--scale", default="1000,10000,100000")
    parser.add_argument("--skip-scale", action="store_true")
    args = parser.parse_args()
    root = Path(args.datasets)
    if not root.is_dir():
        sys.exit(f"no datasets at {root}; pass --datasets DIR")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache_dir = out / "cache"
    results: dict[str, Any] = {}
    for name in DATASETS:
        print(f"dataset {name} ...", file=sys.stderr, flush=True)
        results[name] = run_dataset(root, name, cache_dir, args.latency_sample)
    report: dict[str, Any] = {"datasets": results}
    print("## Recall\n")
    print(markdown(results))
    print(
        "\n## Combined must not lose (hit@5 and MRR: combined vs the better of keyword and semantic)\n"
    )
    print("| dataset | subset | hit@5 | MRR | holds |\n|---|---|---|---|---|")
    print("\n".join(must_not_lose(results)))
    print("\n## Warm-up\n")
    report["warmup"] = warmup_run(root)
    w = report["warmup"]
    print(
        f"Cold warm-up, BFCL tool text: {w['tools']} tools in {w['seconds']:.1f} s = {w['tools_per_s']:.0f} tools/s"
    )
    if not args.skip_scale:
        sizes = [int(s) for s in args.scale.split(",")]
        report["scale"] = scale_run(root, cache_dir, sizes)
        print("\n## Scale (synthetic catalogues; tool vectors are random unit vectors)\n")
        print(
            "| tools | restart from cache s | keyword p50 ms | vector scoring p50 ms | combined selection p50 / p95 ms | batch of 32 vs one |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for r in report["scale"]:
            print(
                f"| {r['tools']} | {r['restart_s']:.2f} | {r['keyword_p50_ms']:.3f} | {r['vector_p50_ms']:.2f} "
                f"| {r['combined_p50_ms']:.2f} / {r['combined_p95_ms']:.2f} | {r['batch32_over_one']:.1f}x |"
            )
        if 10000 in sizes:
            report["rss_10k_cached_mb"] = rss_run(root, cache_dir, 10000)
            started = time.perf_counter()
            report["rss_10k_cold_mb"] = rss_run(root, None, 10000)
            report["cold_10k_s"] = time.perf_counter() - started
            print(
                f"\nPeak RSS of a fresh process serving 10k tools: "
                f"{report['rss_10k_cached_mb']:.0f} MB from the cache, "
                f"{report['rss_10k_cold_mb']:.0f} MB embedding all 10k tools cold "
                f"({report['cold_10k_s']:.0f} s)"
            )
    (out / "recall.json").write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out / 'recall.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
