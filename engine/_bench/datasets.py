"""The benchmark's datasets: the bundled query sets and synthetic catalogues for the scale curve."""

from __future__ import annotations

import json
import random
import resource
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._core.catalog.catalog import Catalog
from .._core.evaluate import Query, load_queries

#: Tools each system returns per query.
K = 5
#: Untimed queries before timing starts.
WARMUP = 20
#: Dataset folder -> (query file, split reported: "test", or "all" for test and whole).
DATASETS = {
    "metatool": ("queries.json", "test"),
    "bfcl": ("queries.json", "all"),
    "livemcpbench": ("queries.json", "all"),
    "toolpick-saas": ("keyword_queries.json", "all"),
}


def load_dataset(root: Path, name: str) -> tuple[list[dict[str, Any]], list[Query]]:
    tools = json.loads((root / name / "tools.json").read_text("utf-8"))
    query_file, scope = DATASETS[name]
    queries = [q for q in load_queries(root / name / query_file) if q.groups]
    if scope == "test":
        queries = [q for q in queries if q.split == "test"]
    return tools, queries


def synthetic_catalog(root: Path, size: int, seed: int = 0) -> Catalog:
    """A catalogue of ``size`` tools recombined from the bundled real tool definitions."""
    pool: list[dict[str, Any]] = []
    for name in ("bfcl", "livemcpbench", "metatool"):
        pool.extend(json.loads((root / name / "tools.json").read_text("utf-8")))
    rng = random.Random(seed)
    tools = []
    for i in range(size):
        base = rng.choice(pool)
        tools.append(
            {
                "name": f"{base['name']}_{i}",
                "description": base.get("description", ""),
                "parameters": base.get("parameters") or {},
                "server": f"server{i % max(1, size // 20)}",
            }
        )
    return Catalog.from_plain(tools)


def random_unit(n: int, dim: int, seed: int) -> npt.NDArray[np.float32]:
    """``n`` random unit rows of width ``dim`` (the scale curve's tool vectors)."""
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def peak_rss_mb() -> float:
    """Peak resident memory of this process (VmHWM: unlike ru_maxrss, not inherited over exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
