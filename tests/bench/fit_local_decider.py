"""Refit the local decider's calibration on the dev splits and write it into the package.

    python tests/bench/fit_local_decider.py [--out providers/_deciders/local_calibration.json]

Features come from ``LocalDecider.features`` over the requests of ``local_decider_data``
(MetaTool awareness and BFCL relevance for questions about *any* of a list, LiveMCPBench
servers for questions about *one* subject), dev splits only. For each kind, every subset of
the features that keeps the cosine is fitted as an L2-regularised logistic model
(Newton's method); the subset is chosen by its held-out Brier score in two folds of dev
(by a second hash of the request, averaged over the kind's datasets), then refitted on all
of dev. Features left out get weight 0. Prints the table it chose from.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from local_decider_data import (  # noqa: E402
    Rows,
    awareness_rows,
    bfcl_rows,
    livemcp_rows,
    livemcp_servers,
    livemcp_shifts,
)

from toolroute._core.routing.usage import SIMILAR_REQUESTS  # noqa: E402
from toolroute.providers import Calibration, LocalDecider, default_embedder  # noqa: E402
from toolroute.providers._deciders.local import CalibrationModel, UsageModel  # noqa: E402
from toolroute.providers._deciders.local_features import FEATURES  # noqa: E402

OUT = HERE.parents[1] / "providers/_deciders/local_calibration.json"
L2 = 1e-3
#: Ridge penalties tried for the request vector's weights (``any`` questions only).
PRIORS = (0.3, 1.0, 3.0)
#: Similar learned requests counted, and the shrinkage toward the average server, tried for
#: the usage model (LiveMCPBench dev has 75 tasks: 200 counts every other one).
LIMITS = (10, 20, 40, 200)
PSEUDO = (2.0, 5.0, 10.0, 20.0)
#: Routing gates (``min_drop_confidence``) the usage model is judged at.
GATES = (0.9, 0.95, 0.98, 0.99, 0.995)


def fit_logistic(
    x: np.ndarray,
    y: np.ndarray,
    penalty: np.ndarray,
    iterations: int = 60,
    offset: np.ndarray | float = 0.0,
    intercept: bool = True,
) -> np.ndarray:
    """``[bias, *weights]`` maximising the log-likelihood less ``sum(penalty * w**2) / 2``
    (the bias unpenalised; held at 0 without ``intercept``), each row's logit starting at
    ``offset``."""
    x1 = np.c_[np.ones(len(x)), x] if intercept else x
    w = np.zeros(x1.shape[1])
    ridge = np.diag(np.r_[0.0, penalty] if intercept else penalty)
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(offset + x1 @ w)))
        grad = x1.T @ (p - y) + ridge @ w
        hess = x1.T @ (x1 * (p * (1 - p))[:, None]) + ridge + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w if intercept else np.r_[0.0, w]


def predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(w[0] + x @ w[1:])))


def fold_of(group: int, name: str) -> int:
    return hashlib.sha1(f"{name}:{group}".encode()).digest()[1] % 2


def columns(rows: Rows, cols: tuple[int, ...], prior: float | None, named: int) -> np.ndarray:
    """The chosen named features, then the request vector when a prior is fitted."""
    x = rows.features[:, cols]
    return np.c_[x, rows.features[:, named:]] if prior is not None else x


def penalties(cols: tuple[int, ...], prior: float | None, dim: int) -> np.ndarray:
    return np.r_[np.full(len(cols), L2), np.full(dim if prior is not None else 0, prior or 0.0)]


def choose(kind: str, datasets: list[Rows]) -> tuple[str, np.ndarray, np.ndarray, list[str]]:
    """The candidate with the best 2-fold dev Brier, refitted on all of dev:
    ``(label, [bias, *named weights], request weights, table)``."""
    names = FEATURES[kind]  # type: ignore[index]
    named = len(names)
    dim = datasets[0].features.shape[1] - named
    priors: tuple[float | None, ...] = (None, *PRIORS) if dim else (None,)
    table = []
    best: tuple[float, tuple[int, ...], float | None] | None = None
    for size in range(1, named + 1):
        for cols in itertools.combinations(range(named), size):
            if 0 not in cols:
                continue
            for prior in priors:
                briers = []
                for held in (0, 1):
                    train_x, train_y, tests = [], [], []
                    for r in datasets:
                        folds = np.array([fold_of(g, r.name) for g in r.groups])
                        dev = r.splits == "dev"
                        x = columns(r, cols, prior, named)
                        train_x.append(x[dev & (folds != held)])
                        train_y.append(r.labels[dev & (folds != held)])
                        tests.append((x[dev & (folds == held)], r.labels[dev & (folds == held)]))
                    w = fit_logistic(
                        np.concatenate(train_x),
                        np.concatenate(train_y),
                        penalties(cols, prior, dim),
                    )
                    briers.append(np.mean([np.mean((predict(w, x) - y) ** 2) for x, y in tests]))
                score = float(np.mean(briers))
                label = ", ".join(names[c] for c in cols)
                if prior is not None:
                    label += f" + request vector (L2 {prior:g})"
                table.append(f"| {kind} | {label} | {score:.4f} |")
                if best is None or score < best[0]:
                    best = (score, cols, prior)
    assert best is not None
    _score, cols, prior = best
    x = np.concatenate([columns(r, cols, prior, named)[r.splits == "dev"] for r in datasets])
    y = np.concatenate([r.labels[r.splits == "dev"] for r in datasets])
    w = fit_logistic(x, y, penalties(cols, prior, dim))
    full = np.zeros(named + 1)
    full[0] = w[0]
    for i, c in enumerate(cols):
        full[c + 1] = w[i + 1]
    request = w[1 + len(cols) :]
    label = ", ".join(names[c] for c in cols) + (
        f" + request vector (L2 {prior:g})" if prior else ""
    )
    return label, full, request, table


def routed(p: np.ndarray, labels: np.ndarray, servers: int) -> list[tuple[float, float, float]]:
    """``(gate, share of tasks with every needed server kept, share dropped)`` per gate, for
    rows of ``servers`` per task (a server drops at ``p <= (1 - gate) / 2``)."""
    p, needed = p.reshape(-1, servers), labels.reshape(-1, servers).astype(bool)
    out = []
    for gate in GATES:
        keep = p > (1 - gate) / 2
        out.append((gate, float((needed <= keep).all(axis=1).mean()), float(1 - keep.mean())))
    return out


def fit_usage(embedder: Any, one: CalibrationModel, rows: Rows) -> UsageModel:
    """The usage model: for each shrinkage and neighbourhood, ``weight * shift`` fitted on
    the dev rows (leave-one-out counts) on top of the ``one`` model's logit, with no
    intercept (an engine that learned too little to tell keeps the text's probability);
    chosen by
    routing on dev: the most servers dropped at a gate that keeps every needed server for
    ≥ 98 % of dev tasks (Brier breaks ties). Prints the table it chose from."""
    dev = rows.splits == "dev"
    servers = len(livemcp_servers()[0])
    base = np.array([one.logit(r) for r in rows.features])
    print("\n| similar requests | pseudo | dev Brier | dev kept / dropped at 0.98, 0.99, 0.995 |")
    print("|---|---|---|---|")
    best: tuple[tuple[float, float], UsageModel, int] | None = None
    for limit in LIMITS:
        for pseudo in PSEUDO:
            blank = UsageModel(weight=0.0, pseudo=pseudo)
            calibration = Calibration(
                embedder=embedder.identity, one=one, any=blank_model("any"), usage=blank
            )
            decider = LocalDecider(embedder=embedder, calibration=calibration, cache_size=100_000)
            shift = np.nan_to_num(livemcp_shifts(decider, embedder, limit).astype(float))
            w = fit_logistic(
                shift[dev, None], rows.labels[dev], np.array([L2]), offset=base[dev], intercept=False
            )
            p = 1.0 / (1.0 + np.exp(-(base + w[1] * shift)))
            brier = float(np.mean((p[dev] - rows.labels[dev]) ** 2))
            routes = routed(p[dev], rows.labels[dev], servers)
            shown = ", ".join(f"{k:.1%} / {d:.1%}" for g, k, d in routes if g >= 0.98)
            print(f"| {limit} | {pseudo:g} | {brier:.4f} | {shown} |")
            dropped = max((d for _, k, d in routes if k >= 0.98), default=0.0)
            model = UsageModel(weight=round(w[1], 6), pseudo=pseudo)
            if best is None or (dropped, -brier) > best[0]:
                best = ((dropped, -brier), model, limit)
    assert best is not None
    print(f"chosen: {best[2]} similar requests, {best[1]}")
    if best[2] != SIMILAR_REQUESTS:
        print(f"note: the engine counts {SIMILAR_REQUESTS} similar requests (SIMILAR_REQUESTS)")
    return best[1]


def blank_model(kind: str) -> CalibrationModel:
    """A model of ``kind`` with every weight 0 (features are read, not weighed)."""
    features = FEATURES[kind]  # type: ignore[index]
    return CalibrationModel(features=features, weights=[0.0] * len(features), bias=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    embedder = default_embedder()
    blank = Calibration(
        embedder=embedder.identity,
        one=blank_model("one"),
        any=blank_model("any"),
    )
    decider = LocalDecider(embedder=embedder, calibration=blank, cache_size=100_000)
    print("reading features…", file=sys.stderr)
    any_rows = [awareness_rows(decider), bfcl_rows(decider)]
    one_rows = [livemcp_rows(decider)]
    print("| kind | features | 2-fold dev Brier |\n|---|---|---|")
    models = {}
    for kind, rows in (("any", any_rows), ("one", one_rows)):
        label, w, request, table = choose(kind, rows)
        print("\n".join(table))
        print(f"chosen for {kind}: {label}")
        models[kind] = CalibrationModel(
            features=FEATURES[kind],  # type: ignore[index]
            weights=[round(v, 6) for v in w[1:]],
            bias=round(w[0], 6),
            request_weights=[round(v, 6) for v in request],
        )
    usage = fit_usage(embedder, models["one"], one_rows[0])
    calibration = Calibration(
        embedder=embedder.identity,
        one=models["one"],
        any=models["any"],
        usage=usage,
        note=(
            "L2 logistic per question kind, inputs chosen by 2-fold dev Brier; any: MetaTool"
            " awareness + BFCL relevance dev, one: LiveMCPBench servers dev; usage: logistic"
            " weight (no intercept) on the one model's logit, LiveMCPBench dev tasks learned leave-one-out,"
            " shrinkage chosen by dev routing; python tests/bench/fit_local_decider.py"
        ),
    )
    args.out.write_text(json.dumps(calibration.to_mapping(), indent=2) + "\n", "utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
