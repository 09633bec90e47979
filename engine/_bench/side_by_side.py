"""Side by side: toolroute against toolpick, semantic-router and bm25s, in one run.

    toolroute bench [--datasets ../shared/datasets] [--out bench-out]

The peers are the ``bench`` extra (``pip install -e '.[bench]'``; toolpick also needs node and
npm); a peer that cannot run here is reported as unavailable, the rest still run.

Every system gets the same tool definitions, the same queries and the same k, and returns a
ranked top-k list; each runs in its own process (peak RSS is that process's). Queries:
MetaTool's test split (4,105 of its 20,544 single-tool queries, fixed by sha1); BFCL,
LiveMCPBench and the toolpick SaaS keyword set whole, reported on their test split and whole.
toolroute's defaults were chosen on the dev split, so the test split is the honest figure.

Writes ``OUT/results.md``, ``OUT/results.json``, ``OUT/accuracy.png`` and
``OUT/latency_scale.png``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .._core.catalog.catalog import Catalog
from .._core.evaluate import load_queries
from .._core.protocols import Embedder
from .._core.text import embedding_text
from .._runtime.tool_index import ToolIndex
from .._stores.embedding_cache import EmbeddingCache
from .datasets import DATASETS, WARMUP, K, load_dataset, peak_rss_mb, random_unit, synthetic_catalog
from .peer import PeerResult, PeerUnavailable
from .report import (
    REFERENCE,
    SCALE_SYSTEMS,
    SYSTEMS,
    markdown,
    paired_bootstrap,
    per_query,
    plots,
    score,
    versions,
)

#: Where ``--datasets`` points by default: the shared folder next to the checkout.
DEFAULT_DATASETS = Path("..") / "shared" / "datasets"


# -- running one system (in a worker process) ------------------------------------------------


def run_toolroute(
    strategy: str,
    tools: list[dict[str, Any]],
    queries: list[str],
    *,
    hashing: bool = False,
    cache: Path | None = None,
) -> PeerResult:
    from ..providers import HashingEmbedder, default_embedder

    embedder: Embedder | None = HashingEmbedder() if hashing else default_embedder()
    if strategy == "keyword":
        embedder = None
    catalog = Catalog.from_plain(tools)
    index = ToolIndex(catalog, embedder=embedder, cache=EmbeddingCache(cache) if cache else None)
    for query in queries[:WARMUP]:
        index.search(query, K, strategy=strategy)
    rankings, latencies = [], []
    for query in queries:
        started = time.perf_counter()
        ranking = index.search(query, K, strategy=strategy)
        latencies.append((time.perf_counter() - started) * 1000.0)
        rankings.append(list(ranking.tool_ids))
    model = (
        "no embedder"
        if embedder is None
        else ("hashing n-gram embedder" if hashing else "offline MiniLM int8")
    )
    how = f"ToolIndex.search(query, {K}, strategy={strategy!r}); {model}; build without cache"
    if cache:
        how = f"ToolIndex.search(query, {K}, strategy={strategy!r}); tool vectors from the cache"
    return PeerResult(rankings, latencies, index.build_s, metadata.version("toolroute"), how)


def run_system(
    system: str,
    tools: list[dict[str, Any]],
    queries: list[str],
    workdir: str,
    scale_vectors: str | None,
) -> dict[str, Any]:
    """Run one system over one catalogue; returns a JSON-ready dict (or ``unavailable``)."""
    try:
        result = _dispatch(system, tools, queries, Path(workdir), scale_vectors)
    except PeerUnavailable as exc:
        return {"unavailable": str(exc)}
    peak = result.peak_rss_mb if result.peak_rss_mb is not None else peak_rss_mb()
    return {
        "rankings": result.rankings,
        "latencies_ms": result.latencies_ms,
        "build_s": result.build_s,
        "version": result.version,
        "how": result.how,
        "peak_rss_mb": peak,
    }


def _dispatch(
    system: str,
    tools: list[dict[str, Any]],
    queries: list[str],
    workdir: Path,
    scale_vectors: str | None,
) -> PeerResult:
    if system.startswith("toolroute"):
        strategy = system.split()[1]
        return run_toolroute(
            strategy,
            tools,
            queries,
            hashing="hashing" in system,
            cache=Path(scale_vectors) if scale_vectors else None,
        )
    if system == "toolpick keyword":
        from . import toolpick

        return toolpick.run(tools, queries, K, workdir=workdir, warmup=WARMUP)
    if system == "semantic-router":
        from . import semantic_router_peer

        embedder = _LookupEmbedder(Path(scale_vectors)) if scale_vectors else None
        return semantic_router_peer.run(tools, queries, K, embedder=embedder)
    if system == "bm25s":
        from . import bm25s_peer

        return bm25s_peer.run(tools, queries, K)
    raise ValueError(f"unknown system {system!r}")


class _LookupEmbedder:
    """For the scale curve: tool texts get their random unit vectors from the toolroute cache
    directory's companion file; everything else (the queries) goes to the real embedder."""

    def __init__(self, cache_dir: Path) -> None:
        from ..providers import default_embedder

        self.inner = default_embedder()
        self.identity, self.dim, self.max_batch = (
            self.inner.identity,
            self.inner.dim,
            self.inner.max_batch,
        )
        data = np.load(cache_dir / "route_vectors.npz", allow_pickle=False)
        self.table = dict(zip(data["texts"].tolist(), data["vectors"], strict=True))

    def embed(self, texts: list[str]) -> np.ndarray:
        known = [self.table.get(t) for t in texts]
        if all(v is not None for v in known):
            return np.stack(known) if known else np.zeros((0, self.dim), np.float32)  # type: ignore[arg-type]
        return self.inner.embed(texts)


# -- scale ------------------------------------------------------------------------------------


def prepare_scale(root: Path, size: int, workdir: Path) -> tuple[list[dict[str, Any]], Path]:
    """A synthetic catalogue of ``size`` tools and random unit tool vectors, stored both in a
    toolroute cache and as the semantic-router utterance table."""
    from ..providers import default_embedder
    from .semantic_router_peer import route_text

    catalog = synthetic_catalog(root, size)
    tools = [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
        for t in catalog
    ]
    folder = workdir / f"scale-{size}"
    folder.mkdir(parents=True, exist_ok=True)
    embedder = default_embedder()
    vectors = random_unit(size, embedder.dim, size)
    EmbeddingCache(folder).put_many(
        embedder.identity, [embedding_text(t) for t in catalog], vectors
    )
    np.savez(
        folder / "route_vectors.npz",
        texts=np.array([route_text(t) for t in tools]),
        vectors=vectors,
    )
    return tools, folder


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="toolroute bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--datasets",
        default=str(DEFAULT_DATASETS),
        help="folder of the bundled datasets (default: ../shared/datasets)",
    )
    parser.add_argument("--out", default="bench-out", help="where results and plots go")
    parser.add_argument(
        "--only", default=",".join(DATASETS), help="datasets to run (comma separated)"
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="systems to run")
    parser.add_argument(
        "--scale", default="100,1000,10000,100000", help="catalogue sizes ('' to skip)"
    )
    parser.add_argument("--scale-queries", type=int, default=50)
    args = parser.parse_args(argv)
    root = Path(args.datasets)
    if not root.is_dir():
        print(
            f"toolroute bench: error: no datasets at {root}; pass --datasets DIR", file=sys.stderr
        )
        return 2
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    systems = [s for s in args.systems.split(",") if s]
    report: dict[str, Any] = {"versions": versions(), "datasets": {}, "how": {}, "k": K}
    context = multiprocessing.get_context("spawn")

    def run(
        system: str, tools: list[dict[str, Any]], queries: list[str], vectors: Path | None = None
    ) -> dict[str, Any]:
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            return pool.submit(
                run_system, system, tools, queries, str(work), str(vectors) if vectors else None
            ).result()

    for name in [n for n in args.only.split(",") if n]:
        tools, queries = load_dataset(root, name)
        texts = [q.text for q in queries]
        subsets = {"test": [i for i, q in enumerate(queries) if q.split == "test"]}
        if DATASETS[name][1] == "all":
            subsets["all"] = list(range(len(queries)))
        data: dict[str, Any] = {
            "tools": len(tools),
            "subsets": {s: len(m) for s, m in subsets.items()},
            "systems": {},
            "comparisons": {},
        }
        per: dict[str, dict[str, np.ndarray]] = {}
        for system in systems:
            print(
                f"[{name}] {system}: {len(texts)} queries over {len(tools)} tools ...",
                file=sys.stderr,
                flush=True,
            )
            started = time.perf_counter()
            result = run(system, tools, texts)
            if "unavailable" in result:
                print(f"[{name}] {system}: unavailable: {result['unavailable']}", file=sys.stderr)
                data["systems"][system] = {"unavailable": result["unavailable"]}
                continue
            report["how"][system] = f"{result['version']}: {result['how']}"
            rows: dict[str, Any] = {
                "build_s": result["build_s"],
                "peak_rss_mb": result["peak_rss_mb"],
                "version": result["version"],
            }
            for subset, members in subsets.items():
                rows[subset] = score(
                    [queries[i] for i in members],
                    {
                        "rankings": [result["rankings"][i] for i in members],
                        "latencies_ms": [result["latencies_ms"][i] for i in members],
                    },
                )
            data["systems"][system] = rows
            per[system] = per_query(queries, result["rankings"])
            print(
                f"[{name}] {system}: done in {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        if REFERENCE in per:
            for subset, members in subsets.items():
                data["comparisons"][subset] = {
                    peer: {
                        m: paired_bootstrap(per[REFERENCE][m][members], values[m][members])
                        for m in ("top1", "hit@5", "rr")
                    }
                    for peer, values in per.items()
                    if peer != REFERENCE
                }
        report["datasets"][name] = data

    sizes = [int(s) for s in args.scale.split(",") if s]
    if sizes:
        report["scale"] = {}
        scale_queries = [
            q.text for q in load_queries(root / "metatool" / "queries.json") if q.split == "test"
        ]
        scale_queries = random.Random(0).sample(scale_queries, args.scale_queries + WARMUP)
        for size in sizes:
            tools, folder = prepare_scale(root, size, work)
            report["scale"][str(size)] = {}
            for system in [s for s in SCALE_SYSTEMS if s in systems or s == "toolroute combined"]:
                print(f"[scale {size}] {system} ...", file=sys.stderr, flush=True)
                vectors = folder if system in ("toolroute combined", "semantic-router") else None
                result = run(system, tools, scale_queries, vectors)
                if "unavailable" in result:
                    report["scale"][str(size)][system] = {"unavailable": result["unavailable"]}
                    continue
                lat = np.asarray(result["latencies_ms"][WARMUP:])
                report["scale"][str(size)][system] = {
                    "p50": float(np.percentile(lat, 50)),
                    "p95": float(np.percentile(lat, 95)),
                    "build_s": result["build_s"],
                    "peak_rss_mb": result["peak_rss_mb"],
                }
    (out / "results.json").write_text(json.dumps(report, indent=1))
    text = markdown(report)
    (out / "results.md").write_text(text + "\n")
    plots(report, out)
    print(text)
    print(
        f"\nwrote {out}/results.md, results.json, accuracy.png, latency_scale.png", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
