"""Local cost of re-ranking per query, on the bundled dataset catalogues.

    python tests/bench/bench_rerank.py [--datasets ../shared/datasets] [--out bench-out]

Re-ranking costs one model call plus local work: building the prompt from the candidates,
reading the reply and mapping names back to tool ids. This measures the local work only, with
a generator that answers at once with a canned reply (five candidate names and one unknown
name, in a shuffled order), so the numbers are toolroute's overhead on top of the model's
latency.

For every dataset it times, per query, ``build_prompt``, ``rerank_from_reply`` and the whole
``rerank`` call (trio cancel scope and await included) for candidate pools of 15 and 50 tools,
and for the whole catalogue where it has at most 50 tools (toolpick's rule, as
``rerank_pool_size`` plans it). Candidates come from keyword recall (not timed), topped up in
catalogue order to the pool size. "Cold" builds the prompt with the per-tool line memo emptied
first (every tool's first appearance); the other columns are the steady state.

Prints a Markdown table; ``--out DIR`` also writes it to ``DIR/rerank.md``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import trio

from toolroute import Catalog, Tool, ToolIndex
from toolroute._judge.rerank import (
    RERANK_TOOL_LIMIT,
    build_prompt,
    candidate_line,
    rerank,
    rerank_from_reply,
    rerank_pool_size,
)
from toolroute.evaluate import load_queries

HERE = Path(__file__).resolve().parent
DATASETS = {
    "metatool": "queries.json",
    "bfcl": "queries.json",
    "livemcpbench": "queries.json",
    "toolpick-saas": "keyword_queries.json",
}
LIMIT = 5
POOLS = (15, 50)


class InstantGenerator:
    """Answers every prompt at once with ``reply`` (set before each call)."""

    identity = "bench:instant"

    def __init__(self) -> None:
        self.reply: object = {"tools": []}

    async def generate_json(self, prompt: str, schema: Mapping[str, Any]) -> object:
        return self.reply


def canned_reply(candidates: Sequence[Tool], rng: random.Random) -> dict[str, list[str]]:
    names = [tool.name for tool in candidates[: LIMIT + 2]]
    rng.shuffle(names)
    return {"tools": [*names[:LIMIT], "no_such_tool"]}


def pool_for(index: ToolIndex, query: str, size: int) -> list[Tool]:
    catalog = index.catalog
    ids = list(index.search(query, size, strategy="keyword").tool_ids)
    if len(ids) < size:
        taken = set(ids)
        ids += [i for i in catalog.ids if i not in taken][: size - len(ids)]
    return [catalog[i] for i in ids]


def percentiles(values_s: list[float]) -> tuple[float, float]:
    micro = np.asarray(values_s) * 1e6
    return float(np.percentile(micro, 50)), float(np.percentile(micro, 95))


async def time_pool(
    index: ToolIndex, queries: list[str], size: int, rng: random.Random, warmup: int
) -> dict[str, Any]:
    generator = InstantGenerator()
    cold: list[float] = []
    build: list[float] = []
    parse: list[float] = []
    total: list[float] = []
    chars: list[int] = []
    outcomes: dict[str, int] = {}
    for n, query in enumerate(queries):
        candidates = pool_for(index, query, size)
        reply = canned_reply(candidates, rng)
        generator.reply = reply
        candidate_line.cache_clear()
        tc = time.perf_counter()
        build_prompt(query, candidates, limit=LIMIT)  # cold: every candidate line computed
        t0 = time.perf_counter()
        prompt = build_prompt(query, candidates, limit=LIMIT)
        t1 = time.perf_counter()
        rerank_from_reply(reply, candidates, limit=LIMIT)
        t2 = time.perf_counter()
        result = await rerank(query, candidates, generator, limit=LIMIT, deadline_s=10.0)
        t3 = time.perf_counter()
        if n < warmup:
            continue
        cold.append(t0 - tc)
        build.append(t1 - t0)
        parse.append(t2 - t1)
        total.append(t3 - t2)
        chars.append(len(prompt))
        outcomes[result.outcome.value] = outcomes.get(result.outcome.value, 0) + 1
    return {
        "pool": size,
        "queries": len(total),
        "prompt_chars_p50": float(np.percentile(chars, 50)),
        "cold_us": percentiles(cold),
        "build_us": percentiles(build),
        "parse_us": percentiles(parse),
        "total_us": percentiles(total),
        "outcomes": outcomes,
    }


def run_dataset(root: Path, name: str, sample: int, warmup: int) -> list[dict[str, Any]]:
    catalog = Catalog.from_file(root / name / "tools.json")
    texts = [q.text for q in load_queries(root / name / DATASETS[name]) if q.text.strip()]
    rng = random.Random(0)
    picked = rng.sample(texts, min(sample, len(texts)))
    # Small query sets are cycled so every pool gets ``sample`` timed runs; the first
    # ``warmup`` runs are not counted.
    queries = [picked[i % len(picked)] for i in range(warmup + sample)]
    index = ToolIndex(catalog, embedder=None, cache=None)
    if len(catalog) <= RERANK_TOOL_LIMIT:
        sizes = [rerank_pool_size(LIMIT, len(catalog))]
    else:
        sizes = [min(size, len(catalog)) for size in POOLS]
    rows = []
    for size in sizes:
        row = trio.run(time_pool, index, queries, size, random.Random(size), warmup)
        row.update(dataset=name, tools=len(catalog), distinct=len(picked))
        rows.append(row)
        print(f"  {name} pool {size}: done", file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Local re-rank work per query (limit {LIMIT}; instant canned reply; microseconds).",
        "",
        "| dataset | tools | pool | timed runs (distinct queries) | prompt chars p50 "
        "| build prompt, cold p50 / p95 µs | build prompt p50 / p95 µs "
        "| parse + map p50 / p95 µs | rerank() p50 / p95 µs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        pool = f"{r['pool']} (all)" if r["tools"] <= RERANK_TOOL_LIMIT else str(r["pool"])
        lines.append(
            f"| {r['dataset']} | {r['tools']} | {pool} | {r['queries']} ({r['distinct']}) "
            f"| {r['prompt_chars_p50']:.0f} "
            f"| {r['cold_us'][0]:.1f} / {r['cold_us'][1]:.1f} "
            f"| {r['build_us'][0]:.1f} / {r['build_us'][1]:.1f} "
            f"| {r['parse_us'][0]:.1f} / {r['parse_us'][1]:.1f} "
            f"| {r['total_us'][0]:.1f} / {r['total_us'][1]:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--out", default=None, help="directory to write rerank.md to")
    parser.add_argument("--sample", type=int, default=2000, help="timed runs per pool")
    parser.add_argument("--warmup", type=int, default=50, help="untimed queries first")
    args = parser.parse_args()
    root = Path(args.datasets)
    if not root.is_dir():
        sys.exit(f"no datasets at {root}; pass --datasets DIR")
    rows: list[dict[str, Any]] = []
    for name in DATASETS:
        print(f"dataset {name} ...", file=sys.stderr, flush=True)
        rows.extend(run_dataset(root, name, args.sample, args.warmup))
    table = markdown(rows)
    print(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "rerank.md").write_text(table + "\n", encoding="utf-8")
        print(f"\nwrote {out / 'rerank.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
