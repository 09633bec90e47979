"""Side by side: toolroute against toolpick, semantic-router and bm25s, in one run.

    toolroute bench [--datasets ../shared/datasets] [--out bench-out]
    python tests/bench/peers_bench.py [same options]

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
import platform
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_recall import peak_rss_mb, random_unit, synthetic_catalog  # noqa: E402
from peers import PeerResult, PeerUnavailable  # noqa: E402

from toolroute import Catalog, EmbeddingCache, Query, ToolIndex, evaluate, load_queries  # noqa: E402

K = 5
WARMUP = 20
DATASETS = {
    "metatool": ("queries.json", "test"),
    "bfcl": ("queries.json", "all"),
    "livemcpbench": ("queries.json", "all"),
    "toolpick-saas": ("keyword_queries.json", "all"),
}
SYSTEMS = (
    "toolroute combined",
    "toolroute semantic",
    "toolroute keyword",
    "toolroute combined (hashing floor)",
    "toolpick keyword",
    "semantic-router",
    "bm25s",
)
SCALE_SYSTEMS = (
    "toolroute keyword",
    "toolroute combined",
    "toolpick keyword",
    "semantic-router",
    "bm25s",
)
REFERENCE = "toolroute combined"


# -- running one system (in a worker process) ------------------------------------------------


def run_toolroute(
    strategy: str,
    tools: list[dict],
    queries: list[str],
    *,
    hashing: bool = False,
    cache: Path | None = None,
) -> PeerResult:
    from toolroute.providers import HashingEmbedder, default_embedder

    embedder = HashingEmbedder() if hashing else default_embedder()
    if strategy == "keyword":
        embedder = None
    catalog = Catalog.from_plain(tools)
    index = ToolIndex(catalog, embedder=embedder, cache=EmbeddingCache(cache) if cache else None)
    for query in queries[:WARMUP]:
        index.search(query, K, strategy=strategy)  # type: ignore[arg-type]
    rankings, latencies = [], []
    for query in queries:
        started = time.perf_counter()
        ranking = index.search(query, K, strategy=strategy)  # type: ignore[arg-type]
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
    system: str, tools: list[dict], queries: list[str], workdir: str, scale_vectors: str | None
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
    system: str, tools: list[dict], queries: list[str], workdir: Path, scale_vectors: str | None
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
        from peers import toolpick

        return toolpick.run(tools, queries, K, workdir=workdir, warmup=WARMUP)
    if system == "semantic-router":
        from peers import semantic_router_peer

        embedder = _LookupEmbedder(Path(scale_vectors)) if scale_vectors else None
        return semantic_router_peer.run(tools, queries, K, embedder=embedder)
    if system == "bm25s":
        from peers import bm25s_peer

        return bm25s_peer.run(tools, queries, K)
    raise ValueError(f"unknown system {system!r}")


class _LookupEmbedder:
    """For the scale curve: tool texts get their random unit vectors from the toolroute cache
    directory's companion file; everything else (the queries) goes to the real embedder."""

    def __init__(self, cache_dir: Path) -> None:
        from toolroute.providers import default_embedder

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


# -- accuracy ---------------------------------------------------------------------------------


def load_dataset(root: Path, name: str) -> tuple[list[dict], list[Query]]:
    tools = json.loads((root / name / "tools.json").read_text("utf-8"))
    query_file, scope = DATASETS[name]
    queries = [q for q in load_queries(root / name / query_file) if q.groups]
    if scope == "test":
        queries = [q for q in queries if q.split == "test"]
    return tools, queries


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, *, rounds: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean difference a - b over paired per-query values, with a 95 % bootstrap interval."""
    rng = np.random.default_rng(seed)
    diff = a - b
    idx = rng.integers(0, len(diff), size=(rounds, len(diff)))
    means = diff[idx].mean(axis=1)
    return float(diff.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def per_query(queries: list[Query], rankings: list[list[str]]) -> dict[str, np.ndarray]:
    """Per-query hit@5, top-1 and reciprocal rank (for paired comparisons)."""
    hit, top1, rr = [], [], []
    for q, r in zip(queries, rankings, strict=True):
        ranks = [min((r.index(e) for e in g if e in r), default=10**9) for g in q.groups]
        first = min(ranks)
        hit.append(first < K)
        top1.append(first == 0)
        rr.append(1.0 / (first + 1) if first < 10**9 else 0.0)
    return {"hit@5": np.array(hit, float), "top1": np.array(top1, float), "rr": np.array(rr)}


def score(queries: list[Query], run: dict[str, Any]) -> dict[str, Any]:
    report = evaluate(queries, run["rankings"], run["latencies_ms"])
    report.pop("misses")
    return report


# -- scale ------------------------------------------------------------------------------------


def prepare_scale(root: Path, size: int, workdir: Path) -> tuple[list[dict], Path]:
    """A synthetic catalogue of ``size`` tools and random unit tool vectors, stored both in a
    toolroute cache and as the semantic-router utterance table."""
    from bench_recall import embedding_text  # the text toolroute embeds
    from peers.semantic_router_peer import route_text

    from toolroute.providers import default_embedder

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


# -- report -----------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    out = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {multiprocessing.cpu_count()} cores",
    }
    for dist in (
        "toolroute",
        "numpy",
        "onnxruntime",
        "tokenizers",
        "semantic-router",
        "bm25s",
        "matplotlib",
    ):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [f"Versions: {', '.join(f'{k} {v}' for k, v in report['versions'].items())}.", ""]
    for name, data in report["datasets"].items():
        lines.append(f"### {name} ({data['tools']} tools)")
        lines.append("")
        for subset in data["subsets"]:
            n = data["subsets"][subset]
            lines.append(f"**{subset}** ({n} queries)")
            lines.append("")
            lines.append(
                "| system | top-1 | hit@5 [95 % CI] | recall@5 | MRR | p50 / p95 ms | build s "
                "| peak RSS MB | p50: toolroute combined ÷ system | p50: toolroute keyword ÷ system |"
            )
            lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            ref = data["systems"].get(REFERENCE, {}).get(subset)
            ref_keyword = data["systems"].get("toolroute keyword", {}).get(subset)
            for system, rows in data["systems"].items():
                row = rows.get(subset)
                if row is None:
                    lines.append(
                        f"| {system} | unavailable: {rows.get('unavailable', '?')} ||||||||"
                    )
                    continue
                lat = row["latency_ms"]
                ci = row["ci"]["hit@5"]
                ratios = [
                    f"{other['latency_ms']['p50'] / lat['p50']:.2f}"
                    if other is not None and other is not row and lat["p50"] > 0
                    else ""
                    for other in (ref, ref_keyword)
                ]
                lines.append(
                    f"| {system} | {row['top1']:.3f} | {row['hit@5']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | "
                    f"{row['recall@5']:.3f} | {row['mrr']:.3f} | {lat['p50']:.2f} / {lat['p95']:.2f} | "
                    f"{rows['build_s']:.2f} | {rows['peak_rss_mb']:.0f} | {ratios[0]} | {ratios[1]} |"
                )
            lines.append("")
            comparisons = data["comparisons"].get(subset, {})
            if comparisons:
                lines.append(
                    "toolroute combined minus peer (paired bootstrap 95 % CI; *more accurate* only where the interval excludes 0):"
                )
                lines.append("")
                lines.append("| peer | Δ top-1 | Δ hit@5 | Δ MRR | verdict on hit@5 |")
                lines.append("|---|---:|---:|---:|---|")
                for peer, c in comparisons.items():
                    cells = [
                        f"{c[m][0]:+.3f} [{c[m][1]:+.3f}, {c[m][2]:+.3f}]"
                        for m in ("top1", "hit@5", "rr")
                    ]
                    lo, hi = c["hit@5"][1], c["hit@5"][2]
                    verdict = (
                        "more accurate"
                        if lo > 0
                        else ("less accurate" if hi < 0 else "within noise")
                    )
                    lines.append(f"| {peer} | {' | '.join(cells)} | {verdict} |")
                lines.append("")
    if report.get("scale"):
        lines.append(
            "### Latency vs catalogue size (p50 ms per query; synthetic catalogues of real tool definitions; tool vectors are random unit vectors, queries embedded by the real model)"
        )
        lines.append("")
        systems = list(next(iter(report["scale"].values())).keys())
        lines.append("| tools | " + " | ".join(systems) + " |")
        lines.append("|---:|" + "---:|" * len(systems))
        for size, rows in report["scale"].items():
            cells = [f"{r['p50']:.3f}" if "p50" in r else "n/a" for r in rows.values()]
            lines.append(f"| {size} | " + " | ".join(cells) + " |")
        lines.append("")
        for size, rows in report["scale"].items():
            for system, r in rows.items():
                if "unavailable" in r:
                    lines.append(f"- {system} at {size} tools: {r['unavailable']}")
    lines.append("")
    lines.append("How each peer was run:")
    lines.append("")
    for system, how in report["how"].items():
        lines.append(f"- **{system}**: {how}")
    return "\n".join(lines)


def plots(report: dict[str, Any], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "matplotlib is not installed (pip install -e '.[bench]'); skipping plots",
            file=sys.stderr,
        )
        return
    datasets = list(report["datasets"])
    systems = [s for s in SYSTEMS if any(s in d["systems"] for d in report["datasets"].values())]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        values, errors = [], [[], []]
        for name in datasets:
            data = report["datasets"][name]
            subset = "test"
            row = data["systems"].get(system, {}).get(subset)
            v = row["hit@5"] if row else 0.0
            lo, hi = row["ci"]["hit@5"] if row else (0.0, 0.0)
            values.append(v)
            errors[0].append(v - lo)
            errors[1].append(hi - v)
        x = np.arange(len(datasets)) + i * width
        ax.bar(x, values, width, yerr=errors, capsize=2, label=system)
    ax.set_xticks(np.arange(len(datasets)) + width * (len(systems) - 1) / 2)
    ax.set_xticklabels(
        [f"{n}\n(test, n={report['datasets'][n]['subsets']['test']})" for n in datasets]
    )
    ax.set_ylabel("hit@5 (95 % Wilson interval)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Accuracy by dataset, test split")
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=110)
    plt.close(fig)
    if report.get("scale"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        sizes = [int(s) for s in report["scale"]]
        for system in SCALE_SYSTEMS:
            ys = [report["scale"][str(s)].get(system, {}).get("p50") for s in sizes]
            pts = [(s, y) for s, y in zip(sizes, ys, strict=True) if y is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=system)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tools in the catalogue")
        ax.set_ylabel("p50 latency per query (ms)")
        ax.set_title("Latency vs catalogue size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "latency_scale.png", dpi=110)
        plt.close(fig)


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="toolroute bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    default_root = HERE.parents[2] / "shared" / "datasets"
    parser.add_argument(
        "--datasets", default=str(default_root), help="folder of the bundled datasets"
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
        system: str, tools: list[dict], queries: list[str], vectors: Path | None = None
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
