"""The benchmark's report: scores, paired comparisons, the markdown tables and the plots."""

from __future__ import annotations

import multiprocessing
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .._core.evaluate import Query, evaluate
from .datasets import K

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
#: The system every peer is compared with.
REFERENCE = "toolroute combined"


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
        values: list[float] = []
        errors: list[list[float]] = [[], []]
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
