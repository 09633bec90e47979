"""Load benchmark (issue #11): bounded text, the fast tier, both cores, int8 scoring, the ladder.

    python tests/bench/bench_load.py [--datasets ../shared/datasets] [--quick]

Prints, side by side in one run (Markdown):

1. bounds: the most characters any dataset text needs to fill MiniLM's 128 word pieces, and
   how many texts the character bounds change (must be 0);
2. accuracy on every dataset's test split: keyword-only, full tier (MiniLM + keyword) and
   fast tier (learned token rows + keyword), the fast tier first fitted on tool texts only,
   then after learning from 100 / 1k / 10k served dev-split requests (as many as there are);
3. latency at 1k tools: fast-tier p50, full-tier p50 by request length in word pieces;
4. a 2 MB request: ``select`` time and event-loop lag on a running engine; a 5 MB
   description: index cost next to a normal tool, and RSS;
5. 100k tools: fp32 vs int8 (+ exact re-scoring) scoring ms per query, top-5 agreement;
6. MiniLM on both cores: one session with 2 intra-op threads vs two 1-thread sessions,
   single-caller p50 and throughput with 1, 2 and 4 caller threads.

7. the load ladder (``load_ladder.py``): 200 concurrent selects vs one at a time, with the
   fast tier off and fitted on 0 / 100 / 1k / 10k served dev requests; 100 callers vs one.
8. background work (``load_background.py``): a first engine's CPU after ``ready()`` with the
   shipped table and without, the fit's solve as pairs vs bags, leaving an engine during the
   build, a lone caller's p50 idle vs during a background fit (lowest vs normal priority).
Defaults were chosen on dev splits; every accuracy figure here is a test split.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import trio

from toolroute import Catalog, EngineConfig, ToolIndex, open_engine
from toolroute._core.config import WarmupConfig
from toolroute._core.recall.vectors import Int8Index, VectorIndex, top_k
from toolroute._core.select.plan import RequestVector
from toolroute._core.text import KEYWORD_TEXT_CHARS, MODEL_TEXT_CHARS, bounded, embedding_text
from toolroute.evaluate import load_queries
from toolroute.providers import default_embedder
from toolroute.providers._embedders.fast_tier.tier import FastTier
from toolroute.providers._embedders.int8_product import onnx_int8_product
from toolroute.providers._embedders.minilm import MiniLMEmbedder
from toolroute.stores import EmbeddingCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_background import background
from load_ladder import concurrency

QUERY_FILES = {
    "metatool": "queries.json",
    "bfcl": "queries.json",
    "livemcpbench": "queries.json",
    "toolpick-saas": "keyword_queries.json",
}
LEARNED = (100, 1_000, 10_000)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def p50(values: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(values), 50))


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1e3)
    return out


# -- 1. bounds ------------------------------------------------------------------------------------


def bounds(root: Path, embedder: MiniLMEmbedder) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(embedder.tokenizer_path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(128)
    print("\n## 1. Bounded text\n")
    print(
        "| dataset | texts | longest (chars) | chars the model reads, max | changed by the bounds |"
    )
    print("|---|---:|---:|---:|---:|")
    for name in QUERY_FILES:
        folder = root / name
        texts = [embedding_text(t) for t in Catalog.from_file(folder / "tools.json")]
        for file in sorted(folder.glob("*queries*.json")):
            texts += [item["query"] for item in json.loads(file.read_text("utf-8"))]
        read = 0
        changed = 0
        for text, whole, cut in zip(
            texts,
            tokenizer.encode_batch(texts),
            tokenizer.encode_batch([bounded(t, MODEL_TEXT_CHARS) for t in texts]),
            strict=True,
        ):
            ends = [
                end
                for (_, end), s in zip(whole.offsets, whole.special_tokens_mask, strict=True)
                if not s
            ]
            read = max(read, ends[-1] if ends else 0)
            changed += whole.ids != cut.ids or bounded(text, KEYWORD_TEXT_CHARS) != text
        longest = max(len(t) for t in texts)
        print(f"| {name} | {len(texts)} | {longest} | {read} | {changed} |")
    print(f"\nBounds: model {MODEL_TEXT_CHARS} chars, keyword {KEYWORD_TEXT_CHARS} chars.")


# -- 2. accuracy ----------------------------------------------------------------------------------


def fast(vectors: Sequence[np.ndarray]) -> list[RequestVector]:
    """Fast-tier vectors as recall ranks them: a step down, fused with the tier's weights."""
    return [RequestVector.stepped_down(v, "fast tier") for v in vectors]


def hit_at_5(
    index: ToolIndex, queries: list[Any], vectors: Sequence[np.ndarray | RequestVector | None]
) -> float:
    hits = 0
    for query, vector in zip(queries, vectors, strict=True):
        found = set(index.rank(query.text, vector, 5).tool_ids)
        hits += all(any(e in found for e in group) for group in query.groups)
    return hits / max(1, len(queries))


def accuracy(root: Path, embedder: MiniLMEmbedder, cache: Path, quick: bool) -> None:
    print("\n## 2. hit@5 on each test split (fast tier fused with keyword like the full tier)\n")
    header = "| dataset | test queries | keyword | full tier | fast: tools only |"
    header += "".join(f" fast: +{n} served |" for n in LEARNED)
    print(header + " fit s (last) |")
    print("|---|---:|---:|---:|---:|" + "---:|" * len(LEARNED) + "---:|")
    for name, file in QUERY_FILES.items():
        catalog = Catalog.from_file(root / name / "tools.json")
        index = ToolIndex(catalog, embedder=embedder, cache=EmbeddingCache(cache))
        assert index.vectors is not None
        queries = load_queries(root / name / file)
        test = [q for q in queries if q.split == "test"]
        dev = [q.text for q in queries if q.split == "dev"]
        random.Random(0).shuffle(dev)
        texts = [q.text for q in test]
        full = embedder.embed(texts)
        row = [
            f"{hit_at_5(index, test, [None] * len(test)):.3f}",
            f"{hit_at_5(index, test, list(full)):.3f}",
        ]
        tier = FastTier.open(
            embedder,
            cache_dir=None,  # in memory: each dataset is its own deployment
            tool_texts=index.embedding_texts(),
            tool_vectors=index.vectors.matrix,
        )
        row.append(f"{hit_at_5(index, test, fast(tier.embed(texts))):.3f}")
        learned, fit_s = 0, 0.0
        for goal in LEARNED:
            if quick or learned >= len(dev):
                row.append("–")
                continue
            batch = dev[learned:goal]
            tier.learn(batch, embedder.embed(batch))
            learned += len(batch)
            started = time.perf_counter()
            tier.refit()
            fit_s = time.perf_counter() - started
            label = "" if learned == goal else f" ({learned})"
            row.append(f"{hit_at_5(index, test, fast(tier.embed(texts))):.3f}{label}")
        print(f"| {name} | {len(test)} | " + " | ".join(row) + f" | {fit_s:.1f} |", flush=True)


# -- 3. latency at 1k tools -----------------------------------------------------------------------


def latency(root: Path, embedder: MiniLMEmbedder, cache: Path) -> None:
    catalog = Catalog(list(Catalog.from_file(root / "bfcl" / "tools.json"))[:1000])
    index = ToolIndex(catalog, embedder=embedder, cache=EmbeddingCache(cache))
    tier = FastTier.open(embedder, cache_dir=cache, tool_texts=index.embedding_texts())
    queries = [q.text for q in load_queries(root / "bfcl" / "queries.json") if q.split == "test"]
    queries += [q.text for q in load_queries(root / "metatool" / "queries.json")][:300]
    print("\n## 3. Latency at 1k tools (embed + fused ranking, one request at a time)\n")
    fast = []
    for q in queries[:500]:
        started = time.perf_counter()
        index.rank(q, tier.embed([q])[0], 5)
        fast.append((time.perf_counter() - started) * 1e3)
    fast_embed = [timed(lambda q=q: tier.embed([q]), 1)[0] for q in queries[:500]]
    print(f"fast tier: p50 {p50(fast):.3f} ms (embedding alone {p50(fast_embed):.3f} ms)\n")
    by_length: dict[str, list[float]] = {"≤32": [], "33–64": [], "65–128": [], ">128": []}
    ids = tier.token_ids(queries)
    long_texts = [" ".join(queries[i : i + 12]) for i in range(0, 240, 12)]
    for q, n in [*zip(queries[:400], map(len, ids), strict=False), *((t, 200) for t in long_texts)]:
        bucket = "≤32" if n <= 32 else "33–64" if n <= 64 else "65–128" if n <= 128 else ">128"
        started = time.perf_counter()
        index.rank(q, embedder.embed([q])[0], 5)
        by_length[bucket].append((time.perf_counter() - started) * 1e3)
    print("| request length (word pieces) | requests | full tier p50 ms |")
    print("|---|---:|---:|")
    for bucket, values in by_length.items():
        if values:
            print(f"| {bucket} | {len(values)} | {p50(values):.2f} |")


# -- 4. huge texts --------------------------------------------------------------------------------


def huge_texts(root: Path, embedder: MiniLMEmbedder, cache: Path) -> None:
    print("\n## 4. A 2 MB request and a 5 MB description\n")
    catalog = Catalog.from_file(root / "metatool" / "tools.json")
    request = "Please read this whole contract and find me the tool to sign it. " * 32_000
    assert len(request) >= 2_000_000

    async def lag_while(engine: Any, text: str) -> tuple[float, float]:
        """(select ms, worst event-loop lag ms) while ``engine.select(text)`` runs."""
        lag = 0.0
        done = trio.Event()

        async def watch() -> None:
            nonlocal lag
            while not done.is_set():
                started = trio.current_time()
                await trio.sleep(0.001)
                lag = max(lag, trio.current_time() - started - 0.001)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await trio.sleep(0.01)
            started = time.perf_counter()
            await engine.select(text)
            took = time.perf_counter() - started
            done.set()
        return took * 1e3, lag * 1e3

    async def run() -> dict[str, tuple[float, float]]:
        config = EngineConfig(cache_dir=cache, warmup=WarmupConfig(wait=True))
        async with open_engine(catalog, config=config, embedder=embedder) as engine:
            await engine.select("warm up the model")
            runs: dict[str, list[tuple[float, float]]] = {"2 MB": [], "short": []}
            for _ in range(7):
                runs["2 MB"].append(await lag_while(engine, request))
                runs["short"].append(await lag_while(engine, "sign a contract online"))
            return {
                name: (p50([t for t, _ in values]), p50([lag for _, lag in values]))
                for name, values in runs.items()
            }

    figures = trio.run(run)
    (took, lag), (normal, normal_lag) = figures["2 MB"], figures["short"]
    print(f"2 MB request: select p50 {took:.1f} ms, event-loop lag p50 {lag:.1f} ms "
          f"(a short request on the same engine: {normal:.1f} ms, lag {normal_lag:.1f} ms; "
          f"7 runs each)")  # fmt: skip

    from toolroute import Tool

    normal_tool = next(iter(catalog))
    huge = Tool("huge", "read_contract", "Reads a contract. " + "lorem ipsum dolor " * 290_000)
    assert len(huge.description) >= 5_000_000

    def index_cost(tool: Tool) -> float:
        costs = []
        for _ in range(5):
            started = time.perf_counter()
            ToolIndex(Catalog([tool]), embedder=embedder, cache=None)
            costs.append(time.perf_counter() - started)
        return min(costs) * 1e3

    long_tool = max(
        Catalog.from_file(root / "bfcl" / "tools.json"), key=lambda t: len(embedding_text(t))
    )
    before = rss_mb()
    normal_ms, long_ms, huge_ms = index_cost(normal_tool), index_cost(long_tool), index_cost(huge)
    print(f"5 MB description: indexed in {huge_ms:.1f} ms; a normal MetaTool tool "
          f"{normal_ms:.1f} ms ({huge_ms / normal_ms:.2f}x); BFCL's longest tool, which also "
          f"fills the model's 128 word pieces, {long_ms:.1f} ms ({huge_ms / long_ms:.2f}x); "
          f"RSS {before:.0f} -> {rss_mb():.0f} MB")  # fmt: skip


# -- 5. 100k tools --------------------------------------------------------------------------------


def scoring_100k() -> None:
    print("\n## 5. Scoring 100k tools (384-d): fp32 vs int8 + exact re-scoring\n")
    rng = np.random.default_rng(0)
    tools, dim = 100_000, 384
    centres = rng.normal(size=(tools // 10, dim)).astype(np.float32)
    matrix = centres[rng.integers(0, len(centres), tools)]
    matrix += 0.6 * rng.normal(size=matrix.shape).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    exact = VectorIndex(matrix)
    started = time.perf_counter()
    int8 = Int8Index(exact, onnx_int8_product(Int8Index(exact).rows))
    build_s = time.perf_counter() - started
    queries = matrix[rng.integers(0, tools, 1000)] + rng.normal(size=(1000, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    fp32_ms, int8_ms, same = [], [], 0
    for q in queries:
        started = time.perf_counter()
        a = top_k(exact.scores(q), 5)
        fp32_ms.append((time.perf_counter() - started) * 1e3)
        started = time.perf_counter()
        b = int8.top_k(q, 5)[0]
        int8_ms.append((time.perf_counter() - started) * 1e3)
        same += list(a) == list(b)
    print(f"fp32 top-5 p50 {p50(fp32_ms):.2f} ms; int8 top-5 p50 {p50(int8_ms):.2f} ms "
          f"(build {build_s:.1f} s); top 5 identical on {same / len(queries):.1%} of "
          f"{len(queries)} queries")  # fmt: skip


# -- 6. both cores --------------------------------------------------------------------------------


def both_cores(root: Path) -> None:
    print("\n## 6. MiniLM on 2 cores: intra-op threads vs parallel sessions\n")
    queries = [q.text for q in load_queries(root / "metatool" / "queries.json")][:400]
    print("| layout | 1 caller p50 ms | 1 caller req/s | 2 callers req/s | 4 callers req/s "
          "| warm-up of 1,200 tools (fresh process): s, peak RSS MB |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for label, threads, sessions in [("1 session x 2 threads", 2, 1),
                                     ("2 sessions x 1 thread", 1, 2)]:  # fmt: skip
        model = MiniLMEmbedder(threads=threads, sessions=sessions)
        single = [timed(lambda q=q, m=model: m.embed([q]), 1)[0] for q in queries[:150]]
        rates = []
        for callers in (1, 2, 4):
            share = queries[: 240 // callers * callers]
            parts = [share[i::callers] for i in range(callers)]
            workers = [
                threading.Thread(target=lambda p=p, m=model: [m.embed([q]) for q in p])
                for p in parts
            ]
            started = time.perf_counter()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            rates.append(len(share) / (time.perf_counter() - started))
        warm_s, peak = warm_up_peak(root, sessions)
        print(f"| {label} | {p50(single):.2f} | " + " | ".join(f"{r:.0f}" for r in rates)
              + f" | {warm_s:.1f} s, {peak:.0f} MB |")  # fmt: skip
        del model


def warm_up_peak(root: Path, sessions: int) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of a one-thread warm-up of 1,200 BFCL tools, in a fresh
    process (an in-process figure would include the previous layout's freed memory)."""
    out = subprocess.run(
        [sys.executable, __file__, "--datasets", str(root), "--warm-up-rss", str(sessions)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def warm_up_rss_child(root: Path, sessions: int) -> None:
    model = MiniLMEmbedder(sessions=sessions, threads=1 if sessions > 1 else None)
    tools = [embedding_text(t) for t in Catalog.from_file(root / "bfcl" / "tools.json")][:1200]
    started = time.perf_counter()
    model.embed(tools)
    took = time.perf_counter() - started
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            print(took, int(line.split()[1]) / 1024.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = Path(__file__).resolve()
    parser.add_argument("--datasets", type=Path, default=here.parents[3] / "shared" / "datasets")
    parser.add_argument("--quick", action="store_true", help="skip learning from served requests")
    parser.add_argument(
        "--only", default="12345678", help="sections to run, e.g. 15 for bounds and 100k"
    )
    parser.add_argument("--warm-up-rss", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_up_rss:
        warm_up_rss_child(args.datasets, args.warm_up_rss)
        return
    embedder = default_embedder()
    started = time.perf_counter()
    print(f"# bench_load ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{Path('/proc/loadavg').read_text().split()[0]})")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch)
        sections: dict[str, Callable[[], None]] = {
            "1": lambda: bounds(args.datasets, embedder),
            "2": lambda: accuracy(args.datasets, embedder, cache, args.quick),
            "3": lambda: latency(args.datasets, embedder, cache),
            "4": lambda: huge_texts(args.datasets, embedder, cache),
            "5": scoring_100k,
            "6": lambda: both_cores(args.datasets),
            "7": lambda: concurrency(args.datasets, embedder, cache, args.quick),
            "8": lambda: background(args.datasets, embedder, cache, args.quick),
        }
        for key, section in sections.items():
            if key in args.only:
                section()
                sys.stdout.flush()
    print(f"\n(total {time.perf_counter() - started:.0f} s; load average now "
          f"{Path('/proc/loadavg').read_text().split()[0]})")  # fmt: skip


if __name__ == "__main__":
    main()
