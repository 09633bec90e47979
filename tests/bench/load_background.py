"""Section 8 of bench_load.py: what background work costs a foreground request.

For a first engine on a machine (an empty fast-tier cache; tool vectors already cached, so
warm-up is quick and what follows ``ready()`` is the fast tier's work alone):

- CPU seconds of the whole process from ``ready()`` until the fast tier is open, and wall
  seconds, with the shipped table and without it (distilled as before);
- the first fit's solve with ``G`` as pairs (as before) and as bags, same statistics;
- how long leaving the engine takes when it is left at once, or during the fit / the
  distillation;
- a lone caller's ``select`` p50 on a warm engine, idle vs while a fit loops in the
  background as the engine runs it (the lowest priority, standing aside while a call is in
  flight) vs at the lowest priority alone (before) vs at normal priority, in alternating
  blocks, and how many lone requests were answered below the full tier.

    python tests/bench/bench_load.py --only 8 [--quick: the shipped table's rows only]
"""

from __future__ import annotations

import functools
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import trio

from toolroute import Catalog, EngineConfig, ToolIndex
from toolroute._core.config import LoadConfig, WarmupConfig
from toolroute._runtime.engine import Engine, open_engine
from toolroute._runtime.fast_tier_service import at_low_priority
from toolroute._runtime.foreground import FOREGROUND
from toolroute.evaluate import load_queries
from toolroute.providers._embedders.fast_tier import files as _fast_tier_files
from toolroute.providers._embedders.fast_tier import tier as _fast_tier
from toolroute.providers._embedders.fast_tier.ridge import solve
from toolroute.providers._embedders.fast_tier.table import MappedRows, TokenTable
from toolroute.providers._embedders.fast_tier.tier import FastTier, FastTierStopped
from toolroute.providers._embedders.minilm import MiniLMEmbedder
from toolroute.stores import EmbeddingCache

DATASETS = ("metatool", "bfcl")
BLOCKS = 6  # alternating idle / low / normal blocks of lone requests
PER_BLOCK = 40


@contextmanager
def without_shipped_table(enabled: bool) -> Iterator[None]:
    """The path of a model the package ships no table for (the behaviour before it)."""
    real = _fast_tier.shipped_table
    if enabled:
        _fast_tier.shipped_table = lambda _embedder, **_: None  # type: ignore[assignment]
    try:
        yield
    finally:
        _fast_tier.shipped_table = real  # type: ignore[assignment]


def fresh_cache(embeddings: Path, into: Path) -> Path:
    """A cache directory holding the tool vectors but no fast tier."""
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(embeddings, into, ignore=shutil.ignore_patterns("fast-tier"))
    return into


def config_for(cache_dir: Path) -> EngineConfig:
    return EngineConfig(
        cache_dir=str(cache_dir),
        warmup=WarmupConfig(wait=True),
        # No cascade: every lone request reads the model, so blocks of different requests
        # compare (with it, a block's share of sure answers moved its p50 several-fold).
        load=LoadConfig(query_cache=0, learn=False, cascade=False),
    )


async def first_engine(catalog: Catalog, embedder: MiniLMEmbedder, cache_dir: Path) -> tuple[float, float]:
    """(CPU s, wall s) from ``ready()`` until the fast tier is open (in a new process: the
    shipped table is read again)."""
    _fast_tier_files._shipped.clear()
    async with open_engine(catalog, config=config_for(cache_dir), embedder=embedder,
                           decider=None) as engine:  # fmt: skip
        cpu, wall = time.process_time(), time.perf_counter()
        with trio.fail_after(600):
            while not engine.statistics().recall.fast_tier_open:  # noqa: ASYNC110
                await trio.sleep(0.01)
        return time.process_time() - cpu, time.perf_counter() - wall


async def leave_after(catalog: Catalog, embedder: MiniLMEmbedder, cache_dir: Path,
                      delay: float) -> tuple[float, bool]:  # fmt: skip
    """Seconds leaving took when left ``delay`` s after ``ready()``, and whether the fast
    tier was still being built then."""
    async with open_engine(catalog, config=config_for(cache_dir), embedder=embedder,
                           decider=None) as engine:  # fmt: skip
        await trio.sleep(delay)
        building = not engine.statistics().recall.fast_tier_open
        started = time.perf_counter()
    return time.perf_counter() - started, building


def solve_forms(
    catalog: Catalog, embedder: MiniLMEmbedder, cache: Path, dev: list[Any]
) -> tuple[float, float, float, float, float]:
    """The first fit's solve with ``G`` as pairs (as before) and as bags: seconds of each,
    the largest difference between their rows, and dev-split hit@5 of each table."""
    index = ToolIndex(catalog, embedder=embedder, cache=EmbeddingCache(cache))
    assert index.vectors is not None
    tier = FastTier.open(embedder, cache_dir=None)
    tier.learn_tools(index.embedding_texts(), index.vectors.matrix)
    start = MappedRows(tier._distilled, tier._space.mapping(_fast_tier.MAP_RIDGE))
    vocab = int(tier._distilled.shape[0])
    timings, rows, hits = [], [], []
    for stats in (tier._stats.snapshot(), tier._stats.system()):
        began = time.perf_counter()
        tokens, fitted = solve(stats, start, vocab_size=vocab, ridge=tier.ridge, iterations=20)
        timings.append(time.perf_counter() - began)
        rows.append(fitted)
        tier._table = TokenTable(start, tokens, fitted)
        vectors = tier.embed([q.text for q in dev])
        hits.append(np.mean([hit(index.rank(q.text, v, 5).tool_ids, q) for q, v in zip(dev, vectors, strict=True)]))
    return timings[0], timings[1], float(np.abs(rows[0] - rows[1]).max()), float(hits[0]), float(hits[1])


def stand_aside(fn: Callable[..., Any], *args: Any) -> Any:
    """How the engine runs background work: the lowest priority, and its steps stand aside
    while a public call is in flight (``FOREGROUND``)."""
    return at_low_priority(fn, *args)


def hit(tool_ids: Sequence[str], query: Any) -> bool:
    found = set(tool_ids)
    return all(any(e in found for e in group) for group in query.groups)


class Refitting:
    """A fit looping in the background (``run`` is how it runs: low priority or not)."""

    def __init__(self, tier: FastTier, run: Callable[..., Any] | None) -> None:
        self._tier, self._run = tier, run
        self._stop = threading.Event()
        self.fits = 0
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        stop = self._stop.is_set
        if self._run is stand_aside:  # as the engine runs it: aside while a call is in flight
            stop = functools.partial(FOREGROUND.stand_aside, self._stop.is_set)
        refit = functools.partial(self._tier.refit, should_stop=stop)
        while not self._stop.is_set():
            try:
                refit() if self._run is None else self._run(refit)
            except FastTierStopped:
                return  # the block is over
            self.fits += 1

    def __enter__(self) -> Refitting:
        self._thread.start()
        time.sleep(0.2)  # the fit is under way before the first request
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def lone_requests(engine: Engine, queries: list[Any]) -> tuple[list[float], int]:
    latencies, below = [], 0
    for query in queries:
        started = time.perf_counter()
        selection = await engine.select(query.text, max_tools=5, adaptive=False, threshold=None)
        latencies.append((time.perf_counter() - started) * 1000)
        below += selection.reason != ""
    return latencies, below


async def foreground(catalog: Catalog, embedder: MiniLMEmbedder, cache_dir: Path,
                     queries: list[Any]) -> dict[str, tuple[list[float], int, int]]:  # fmt: skip
    """Lone-request latencies (ms), how many were answered below the full tier, and fits
    completed meanwhile, per background mode, in alternating blocks."""
    tier = FastTier.open(embedder, cache_dir=None, tool_texts=ToolIndex(
        catalog, embedder=embedder, cache=EmbeddingCache(cache_dir)).embedding_texts())  # fmt: skip
    modes: dict[str, Callable[..., Any] | str | None] = {
        "idle": "idle",
        "background fit, lowest priority, standing aside (the engine's)": stand_aside,
        "background fit, lowest priority (before)": at_low_priority,
        "background fit, normal priority": None,
    }  # fmt: skip
    out: dict[str, tuple[list[float], int, int]] = {m: ([], 0, 0) for m in modes}
    async with open_engine(catalog, config=config_for(cache_dir), embedder=embedder,
                           decider=None) as engine:  # fmt: skip
        await lone_requests(engine, queries[:10])  # the batcher measures the model
        cursor = 10
        for _ in range(BLOCKS):
            for mode, run in modes.items():
                block = queries[cursor : cursor + PER_BLOCK]
                cursor = (cursor + PER_BLOCK) % (len(queries) - PER_BLOCK)
                if run == "idle":
                    latencies, below = await lone_requests(engine, block)
                    fits = 0
                else:
                    with Refitting(tier, run) as refitting:  # type: ignore[arg-type]
                        latencies, below = await lone_requests(engine, block)
                    fits = refitting.fits
                seen = out[mode]
                out[mode] = (seen[0] + latencies, seen[1] + below, seen[2] + fits)
    return out


def background(root: Path, embedder: MiniLMEmbedder, scratch: Path, quick: bool = False) -> None:
    """Section 8; ``quick`` measures only the shipped table's first engine."""
    print("\n## 8. Background work (first engine on a machine, leaving, lone callers)\n")
    print("| dataset | table | CPU s after ready() | wall s | leave at once | "
          "leave during the build | solve, G as pairs | as bags | max row diff | "
          "dev hit@5, pairs / bags |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in DATASETS:
        catalog = Catalog.from_file(root / name / "tools.json")
        embeddings = scratch / f"bg-{name}-embeddings"
        ToolIndex(catalog, embedder=embedder, cache=EmbeddingCache(embeddings))
        dev = [q for q in load_queries(root / name / "queries.json") if q.split == "dev"]
        pairs_s, bags_s, diff, pairs_hit, bags_hit = solve_forms(
            catalog, embedder, embeddings, dev[:1000]
        )
        for distil in (False,) if quick else (False, True):
            with without_shipped_table(distil):
                cpu, wall = trio.run(first_engine, catalog, embedder,
                                     fresh_cache(embeddings, scratch / "bg-first"))  # fmt: skip
                at_once, _ = trio.run(leave_after, catalog, embedder,
                                      fresh_cache(embeddings, scratch / "bg-leave"), 0.0)  # fmt: skip
                during, building = trio.run(leave_after, catalog, embedder,
                                            fresh_cache(embeddings, scratch / "bg-leave"),
                                            min(wall / 2, 3.0))  # fmt: skip
            label = "distilled here (before)" if distil else "shipped"
            print(f"| {name} | {label} | {cpu:.2f} | {wall:.2f} | {at_once:.2f} s | "
                  f"{during:.2f} s{'' if building else ' (already built)'} | "
                  f"{pairs_s:.2f} s | {bags_s:.2f} s | {diff:.1e} | "
                  f"{pairs_hit:.3f} / {bags_hit:.3f} |", flush=True)  # fmt: skip
    if quick:
        return
    print("\n| dataset | background | lone requests | p50 ms | vs idle | p90 ms | "
          "below the full tier | fits done meanwhile |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in DATASETS:
        catalog = Catalog.from_file(root / name / "tools.json")
        embeddings = scratch / f"bg-{name}-embeddings"
        queries = [q for q in load_queries(root / name / "queries.json") if q.split == "test"]
        warm = fresh_cache(embeddings, scratch / "bg-warm")
        trio.run(first_engine, catalog, embedder, warm)  # the fast tier's cache is ready
        results = trio.run(foreground, catalog, embedder, warm, queries)
        idle = float(np.percentile(results["idle"][0], 50))
        for mode, (latencies, below, fits) in results.items():
            median = float(np.percentile(latencies, 50))
            print(f"| {name} | {mode} | {len(latencies)} | {median:.2f} | "
                  f"{(median / idle - 1) * 100:+.0f} % | {np.percentile(latencies, 90):.2f} | "
                  f"{below} | {fits} |", flush=True)  # fmt: skip
