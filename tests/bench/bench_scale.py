"""Large catalogues: int8 scoring against fp32, and the memory of a cold warm-up.

    python tests/bench/bench_scale.py [--datasets ../shared/datasets] [--sizes 10000,100000]
                                      [--queries 1000] [--skip-rss]

For each size: a synthetic catalogue recombined from the bundled tools (``bench_recall``), its
tool vectors random unit vectors put in an embedding cache (the index loads them as it would
real ones), requests MetaTool's queries embedded by the real model. Prints, for fp32 and for
the int8 index with exact re-scoring (what ``ToolIndex`` uses from ``INT8_FROM`` tools):
top-5 vector scoring p50, ranking p50 for semantic and combined recall (request vector given),
``select`` p50 (request embedding included; the embedding alone too), and how often the top 5 (ids and order) equal
fp32's. Then the peak RSS of fresh processes warming up 10k tools with no cache (every tool
through the model), with the int8 index and without it, by phase.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from toolroute import ToolIndex
from toolroute._core.text import embedding_text
from toolroute._core.vectors import INT8_FROM, int8_index, top_k
from toolroute.evaluate import load_queries
from toolroute.providers import default_embedder
from toolroute.providers._embedders.int8_product import onnx_int8_product
from toolroute.stores import EmbeddingCache

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_recall import random_unit, synthetic_catalog  # noqa: E402


def p50(values: list[float]) -> float:
    return float(np.percentile(values, 50))


def timed_ms(fn: Any, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn(*args)
    return (time.perf_counter() - started) * 1000, out


def scale_row(root: Path, cache_dir: Path, size: int, queries: list[str]) -> dict[str, Any]:
    embedder = default_embedder()
    catalog = synthetic_catalog(root, size)
    cache = EmbeddingCache(cache_dir / f"scale{size}")
    cache.put_many(
        embedder.identity, [embedding_text(t) for t in catalog], random_unit(size, 384, size)
    )
    started = time.perf_counter()
    index = ToolIndex(catalog, embedder=embedder, cache=cache, int8_from=0)
    build_s = time.perf_counter() - started
    assert index.vectors is not None
    assert index.int8 is not None
    int8_build_s, _ = timed_ms(int8_index, index.vectors, onnx_int8_product, 0)
    fp32 = copy.copy(index)
    fp32.int8 = None  # the same index scoring every row in fp32
    vectors = np.concatenate(
        [embedder.embed(queries[i : i + 32]) for i in range(0, len(queries), 32)]
    )
    times: dict[str, list[float]] = {}
    same: dict[str, int] = {"semantic": 0, "combined": 0}
    for name, fn in (("fp32", lambda v: top_k(fp32.vectors.scores(v), 5)),
                     ("int8", lambda v: index.int8.ranked(v, 5)[0])):  # fmt: skip
        for v in vectors[:20]:
            fn(v)
        times[f"vector_{name}"] = [timed_ms(fn, v)[0] for v in vectors]
    for strategy in ("semantic", "combined"):
        times[f"{strategy}_fp32"], times[f"{strategy}_int8"] = [], []
        for q, v in zip(queries, vectors, strict=True):
            t_fp32, want = timed_ms(lambda: fp32.rank(q, v, 5, strategy=strategy))  # noqa: B023
            t_int8, got = timed_ms(lambda: index.rank(q, v, 5, strategy=strategy))  # noqa: B023
            times[f"{strategy}_fp32"].append(t_fp32)
            times[f"{strategy}_int8"].append(t_int8)
            same[strategy] += got.tool_ids == want.tool_ids
    sample = queries[:200]
    times["embed"] = [timed_ms(embedder.embed, [q])[0] for q in sample]
    for name, used in (("fp32", fp32), ("int8", index)):
        for q in sample[:10]:
            used.select(q)
        times[f"select_{name}"] = [used.select(q).latency_ms for q in sample]
    row: dict[str, Any] = {
        "tools": size,
        "build_s": build_s,
        "int8_build_s": int8_build_s / 1000,
        **{f"{k}_p50_ms": p50(v) for k, v in times.items()},
        "top5_same_semantic": same["semantic"] / len(queries),
        "top5_same_combined": same["combined"] / len(queries),
        "queries": len(queries),
        "int8_failures": index.int8.failures,
    }
    print(f"  {json.dumps({k: round(v, 4) for k, v in row.items()})}", file=sys.stderr)
    return row


RSS_CODE = """
import sys, time
from pathlib import Path
sys.path.insert(0, {here!r})
from bench_recall import peak_rss_mb, synthetic_catalog
import toolroute
marks = {{"imported": peak_rss_mb()}}
from toolroute import ToolIndex
from toolroute.providers import default_embedder
catalog = synthetic_catalog(Path({root!r}), {size})
embedder = default_embedder()
embedder.embed(["load the model"])
marks["model loaded"] = peak_rss_mb()
started = time.perf_counter()
index = ToolIndex(catalog, embedder=embedder, cache=None, {int8})
marks["tools embedded"] = peak_rss_mb()
for q in ["send an email to the team", "weather in Paris", "create a github issue"]:
    index.select(q)
marks["after selects"] = peak_rss_mb()
marks["seconds"] = time.perf_counter() - started
marks["int8"] = index.int8 is not None
print(marks)
"""


def rss_run(root: Path, size: int, int8: bool) -> dict[str, Any]:
    """Peak RSS of a fresh process warming up ``size`` tools with no cache, by phase."""
    code = RSS_CODE.format(
        here=str(HERE), root=str(root), size=size, int8="" if int8 else "int8_product=None"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    marks: dict[str, Any] = eval(out.stdout.strip().splitlines()[-1])  # our own dict literal
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--rss-size", type=int, default=10_000)
    parser.add_argument("--skip-rss", action="store_true")
    args = parser.parse_args()
    root = Path(args.datasets)
    if not (root / "metatool").exists():
        root = Path("/work/shared/datasets")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    queries = [q.text for q in load_queries(root / "metatool" / "queries.json")][: args.queries]
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]  # --sizes "": memory only
    rows = [scale_row(root, out / "cache", size, queries) for size in sizes]
    print(f"\n## Large catalogues (ToolIndex uses int8 from {INT8_FROM:,} tools)\n")
    print(
        "| tools | top-5 vector scoring p50 fp32 / int8 ms | semantic rank p50 fp32 / int8 ms "
        "| combined rank p50 fp32 / int8 ms | request embedding p50 ms "
        "| combined select p50 fp32 / int8 ms | top 5 = fp32 (semantic / combined) "
        "| int8 index build s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['tools']:,} | {r['vector_fp32_p50_ms']:.2f} / {r['vector_int8_p50_ms']:.2f} "
            f"| {r['semantic_fp32_p50_ms']:.2f} / {r['semantic_int8_p50_ms']:.2f} "
            f"| {r['combined_fp32_p50_ms']:.2f} / {r['combined_int8_p50_ms']:.2f} "
            f"| {r['embed_p50_ms']:.2f} "
            f"| {r['select_fp32_p50_ms']:.2f} / {r['select_int8_p50_ms']:.2f} "
            f"| {100 * r['top5_same_semantic']:.1f} % / {100 * r['top5_same_combined']:.1f} % "
            f"of {r['queries']} | {r['int8_build_s']:.2f} |"
        )
    report: dict[str, Any] = {"scale": rows}
    if not args.skip_rss:
        report["rss"] = {
            "int8": rss_run(root, args.rss_size, True),
            "fp32": rss_run(root, args.rss_size, False),
        }
        print(f"\n## Cold warm-up of {args.rss_size:,} tools (no cache), peak RSS MB by phase\n")
        print("| index | imported | model loaded | tools embedded | after selects | seconds |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, m in report["rss"].items():
            print(
                f"| {name} | {m['imported']:.0f} | {m['model loaded']:.0f} "
                f"| {m['tools embedded']:.0f} | {m['after selects']:.0f} | {m['seconds']:.1f} |"
            )
    (out / "scale.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
