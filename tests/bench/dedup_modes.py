"""Which dedup mode finds what, on the bundled LiveMCPBench and BFCL catalogues.

    python tests/bench/dedup_modes.py [--datasets ../shared/datasets]

For each catalogue and mode/threshold: how many tools are removed, how long it takes, and a
few examples (removed tool -> kept tool, similarity). Embedding mode uses the offline default
embedder (cosine of the tools' embedding texts).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from toolroute import Catalog, dedupe_tools
from toolroute.providers import default_embedder

HERE = Path(__file__).resolve().parent
SETTINGS = [
    ("signature", 0.9),
    ("signature", 0.7),
    ("content", 0.9),
    ("content", 0.7),
    ("embedding", 0.95),
    ("embedding", 0.9),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    root = Path(parser.parse_args().datasets)
    embedder = default_embedder()
    for name in ("livemcpbench", "bfcl"):
        catalog = Catalog.from_file(root / name / "tools.json")
        print(f"\n### {name} ({len(catalog)} tools)\n")
        print("| mode | threshold | removed | seconds | examples (removed → kept, similarity) |")
        print("|---|---:|---:|---:|---|")
        for mode, threshold in SETTINGS:
            started = time.perf_counter()
            result = dedupe_tools(catalog, mode=mode, threshold=threshold, embedder=embedder)  # type: ignore[arg-type]
            seconds = time.perf_counter() - started
            examples = "; ".join(
                f"`{r.name}` → `{r.duplicate_of}` ({r.similarity:.2f})" for r in result.removed[:3]
            )
            print(
                f"| {mode} | {threshold} | {len(result.removed)} | {seconds:.2f} | {examples} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
