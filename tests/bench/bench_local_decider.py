"""The local decider on the test splits: calibration, and offline routing on LiveMCPBench.

    python tests/bench/bench_local_decider.py [--out tests/bench/results]

1. **Calibration.** ``LocalDecider`` (the bundled model and calibration) answers every test
   question of ``local_decider_data`` (MetaTool awareness, BFCL relevance, LiveMCPBench
   servers); printed per dataset: ECE (15 equal-width bins), AUROC, Brier, the base rate,
   and the raw cosine's AUROC for comparison; 95 % intervals from 400 bootstrap draws of the
   test rows (LiveMCPBench rows are server pairs, so its interval is optimistic). Targets: ECE ≤ 0.05, AUROC ≥ 0.90.
   ``--out`` also gets ``local_decider_reliability.png`` (reliability diagram).
   ECE on a few hundred requests is not zero even for a perfectly calibrated model, so each
   row also prints the *noise floor*: the ECE of outcomes drawn from the model's own
   probabilities (mean and 95th percentile of 2,000 draws, and how often it is ≤ 0.05), and
   Spiegelhalter's calibration test (z and its two-sided p; a small p rejects calibration).
2. **Offline routing.** ``route_servers(task, 70 servers, decider=LocalDecider(...))`` for
   each LiveMCPBench test task, at routing's default gate (``min_drop_confidence=0.6``, drop
   at p ≤ 0.2) and stricter ones (the decider's own gate, 0.99 by default, set to 0 so that
   each applies as given): the share of tasks whose needed servers are all kept
   (target ≥ 98 %) and the mean share of servers dropped (target ≥ 40 %). Dev tasks are
   printed too (where a gate would be chosen). Then the same gates through an engine that
   first learned every dev task with its tools (``Engine.learn``), routing each test task
   with ``Engine.route_servers``: what similar learned requests used counts too.

Prints Markdown; ``--out DIR`` also writes it to ``DIR/local_decider.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from local_decider_data import (  # noqa: E402
    DATASETS,
    Rows,
    awareness_rows,
    bfcl_rows,
    livemcp_rows,
    livemcp_servers,
    livemcp_task_tools,
    livemcp_tasks,
)

from toolroute import (  # noqa: E402
    Catalog,
    EngineConfig,
    RoutingConfig,
    open_engine,
    route_servers,
)
from toolroute.evaluate import split_of  # noqa: E402
from toolroute.providers import LocalDecider  # noqa: E402
from toolroute.providers._deciders.local import _sigmoid  # noqa: E402
from toolroute.stores import MemoryLearningStore, Stores  # noqa: E402

GATES = (0.6, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995)
#: The gate the usage model was chosen at on dev (``fit_local_decider.py``).
ROUTING_GATE = 0.99


def ece(p: np.ndarray, y: np.ndarray, bins: int = 15) -> float:
    which = np.minimum((p * bins).astype(int), bins - 1)
    return float(
        sum(
            (which == b).mean() * abs(p[which == b].mean() - y[which == b].mean())
            for b in range(bins)
            if (which == b).any()
        )
    )


def auroc(score: np.ndarray, y: np.ndarray) -> float:
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    # Ties share their mean rank.
    for value in np.unique(score):
        tied = score == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    pos = y.sum()
    neg = len(y) - pos
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def interval(metric: Any, p: np.ndarray, y: np.ndarray, draws: int = 400) -> str:
    """The 95 % bootstrap interval of ``metric`` over requests drawn with replacement."""
    rng = np.random.default_rng(0)
    values = []
    for _ in range(draws):
        take = rng.integers(0, len(p), len(p))
        if 0 < y[take].sum() < len(take):
            values.append(metric(p[take], y[take]))
    low, high = np.percentile(values, [2.5, 97.5])
    return f"{low:.3f}–{high:.3f}"


def noise_floor(p: np.ndarray, draws: int = 2000) -> tuple[float, float, float]:
    """ECE when the outcomes are drawn from ``p`` itself (a perfectly calibrated model):
    mean, 95th percentile, and the share of draws at or under the 0.05 target."""
    rng = np.random.default_rng(0)
    values = np.array([ece(p, (rng.random(len(p)) < p).astype(float)) for _ in range(draws)])
    return float(values.mean()), float(np.quantile(values, 0.95)), float((values <= 0.05).mean())


def spiegelhalter(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Spiegelhalter's z for calibration and its two-sided p-value."""
    z = float(np.sum((y - p) * (1 - 2 * p)) / np.sqrt(np.sum((1 - 2 * p) ** 2 * p * (1 - p))))
    return z, math.erfc(abs(z) / math.sqrt(2))


def probabilities(decider: LocalDecider, rows: Rows) -> np.ndarray:
    model = decider.calibration.model(rows.kind)  # type: ignore[arg-type]
    return np.array([_sigmoid(model.logit(row)) for row in rows.features])


def reliability(curves: list[tuple[str, np.ndarray, np.ndarray]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect")
    edges = np.linspace(0, 1, 16)
    for name, p, y in curves:
        which = np.minimum((p * 15).astype(int), 14)
        xs, ys, ns = [], [], []
        for b in range(15):
            m = which == b
            if m.any():
                xs.append(p[m].mean())
                ys.append(y[m].mean())
                ns.append(m.sum())
        ax.plot(xs, ys, marker="o", label=f"{name} (n={len(p)})")
    ax.set_xticks(edges[::3])
    ax.set_xlabel("predicted probability (15 bins)")
    ax.set_ylabel("observed frequency")
    ax.set_title("LocalDecider reliability, test splits")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


async def routing(split: str) -> list[str]:
    servers, _owner = livemcp_servers()
    decider = LocalDecider(min_drop_confidence=0.0)  # the gates below apply as given
    tasks = [(q, needed) for q, needed in livemcp_tasks() if split_of(q) == split]
    lines = []
    for gate in GATES:
        config = RoutingConfig(min_drop_confidence=gate, generative=False)
        outcomes = [
            (needed, await route_servers(query, servers, decider=decider, config=config))
            for query, needed in tasks
        ]
        lines.append(routing_line(f"{split}, text only", gate, outcomes, len(servers)))
    return lines


async def routing_learned() -> list[str]:
    """Test tasks routed by an engine that learned every dev task with its tools; and, at
    the default gate, what a routing call costs through the engine before and after."""
    catalog = Catalog.from_file(DATASETS / "livemcpbench/tools.json")
    by_name = {tool.name: tool.id for tool in catalog}
    tasks = list(livemcp_task_tools())
    test = [
        (q, {catalog[by_name[t]].server for t in tools})
        for q, tools in tasks
        if split_of(q) == "test"
    ]
    lines, costs = [], []
    for gate in GATES:
        config = EngineConfig(routing=RoutingConfig(min_drop_confidence=gate, generative=False))
        async with open_engine(
            catalog,
            config=config,
            decider=LocalDecider(min_drop_confidence=0.0),  # the gate applies as given
            stores=Stores(learning=MemoryLearningStore()),
        ) as engine:
            await engine.ready()
            if gate == ROUTING_GATE:
                costs.append(("text only", await routing_times(engine, test)))
            for query, tools in tasks:
                if split_of(query) == "dev":
                    assert await engine.learn(query, [by_name[t] for t in tools])
            outcomes = [(needed, await engine.route_servers(query)) for query, needed in test]
            if gate == ROUTING_GATE:
                costs.append(("dev tasks learned", await routing_times(engine, test)))
        lines.append(routing_line("test, dev tasks learned", gate, outcomes, len(catalog.servers)))
    lines += ["", f"Engine.route_servers at {ROUTING_GATE:g}, 70 servers, one call at a time:", ""]
    lines += [f"- {label}: p50 {p50:.1f} ms, p90 {p90:.1f} ms" for label, (p50, p90) in costs]
    return lines


async def routing_times(
    engine: Any, tasks: list[tuple[str, Any]], rounds: int = 5
) -> tuple[float, float]:
    """p50 and p90 milliseconds of ``route_servers`` over the tasks (after one warm round)."""
    times = []
    for round_ in range(rounds + 1):
        for query, _needed in tasks:
            started = time.perf_counter()
            await engine.route_servers(query)
            if round_:
                times.append((time.perf_counter() - started) * 1000.0)
    p50, p90 = np.percentile(times, [50, 90])
    return float(p50), float(p90)


def routing_line(label: str, gate: float, outcomes: list[tuple[Any, Any]], servers: int) -> str:
    kept_all = np.mean([needed <= set(outcome.selected) for needed, outcome in outcomes])
    dropped = np.mean([len(outcome.excluded) / servers for _, outcome in outcomes])
    p = (1 - gate) / 2
    return (
        f"| {label} | {gate:g} (drop at p ≤ {p:.3g}) | {len(outcomes)} |"
        f" {kept_all:.1%} | {dropped:.1%} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    decider = LocalDecider()
    out: list[str] = ["## Calibration (test splits)", ""]
    out.append(
        "| dataset | n | base rate | ECE (15 bins) | ECE 95 % | AUROC | AUROC 95 % | Brier"
        " | raw cosine AUROC | ECE if calibrated: mean, 95th, ≤ 0.05 | Spiegelhalter z (p) |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    curves = []
    for read in (awareness_rows, bfcl_rows, livemcp_rows):
        rows = read(decider)
        test = rows.splits == "test"
        p, y = probabilities(decider, rows)[test], rows.labels[test]
        curves.append((rows.name, p, y))
        out.append(
            f"| {rows.name} | {test.sum()} | {y.mean():.3f} | {ece(p, y):.3f} |"
            f" {interval(ece, p, y)} | {auroc(p, y):.3f} | {interval(auroc, p, y)} |"
            f" {np.mean((p - y) ** 2):.3f} |"
            f" {auroc(rows.features[test][:, 0], y):.3f} |"
            " {:.3f}, {:.3f}, {:.0%} |".format(*noise_floor(p))
            + " {:+.2f} ({:.2f}) |".format(*spiegelhalter(p, y))
        )
    out += ["", "## Offline routing, LiveMCPBench (70 servers)", ""]
    out.append("| tasks | min_drop_confidence | tasks | all needed kept | servers dropped |")
    out.append("|---|---|---|---|---|")
    for split in ("dev", "test"):
        out += trio.run(routing, split)
    out += trio.run(routing_learned)
    text = "\n".join(out)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "local_decider.md").write_text(text + "\n", "utf-8")
        reliability(curves, args.out / "local_decider_reliability.png")
        print(
            f"\nwrote {args.out / 'local_decider.md'} and the reliability diagram", file=sys.stderr
        )


if __name__ == "__main__":
    main()
