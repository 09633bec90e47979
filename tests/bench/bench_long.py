"""Long requests: read whole (by parts) against read truncated, side by side in one process.

    python tests/bench/bench_long.py [--datasets ../shared/datasets] [--sample 400]
        [--rounds 3] [--cascade] [--choose]

- **Accuracy** (every dataset, test split; BFCL dev too): hit@5 of combined recall when the
  request is read truncated (the model's first 128 word pieces, as before) and when a longer
  request is read by parts and fused (``toolroute._core.recall.parts``), with the paired
  bootstrap of ``toolroute bench`` (mean difference and its 95 % interval), and the same on
  the requests that are longer than the model reads.
- **Latency**: a lone ``ToolIndex.select`` on BFCL (1,702 tools), the two readings alternated
  request by request (order shuffled per request) over ``--rounds`` passes, p50/p99 per
  length bucket in word pieces (<= 32, 33-64, 65-128, > 128).
- ``--cascade``: ``ToolIndex(..., cascade=True)``: the fast tier (fitted on the catalogue's
  tool texts) answers when its best fused score clears ``FAST_TIER_FLOOR``, else the full
  model. Prints the floor chosen on the dev splits (the largest share answered by the fast
  tier with every dataset's dev hit@5 within 0.3 points of the full model), hit@5 of every
  dataset's dev and test split at that floor with the paired bootstrap against the full
  model — the fast tier's vector fused by the model's weights and by its own — and adds
  the cascade to the latency alternation.
- ``--choose``: the dev-split sweep the parts rule was chosen by (max parts, weighting).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolroute import Catalog, ToolIndex
from toolroute._bench.report import paired_bootstrap
from toolroute._core.recall import parts
from toolroute._core.select.plan import RequestVector
from toolroute._core.select.selection import Strategy
from toolroute.evaluate import Query, load_queries
from toolroute.providers import default_embedder
from toolroute.stores import EmbeddingCache

QUERY_FILES = {
    "bfcl": "queries.json",
    "metatool": "queries.json",
    "livemcpbench": "queries.json",
    "toolpick-saas": "keyword_queries.json",
}
BUCKETS = ((0, 32, "<= 32"), (33, 64, "33-64"), (65, 128, "65-128"), (129, 10**9, "> 128"))
K = 5


class Truncating:
    """The default model read as before: it cannot count word pieces, so nothing is split."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity, self.dim, self.max_batch = inner.identity, inner.dim, inner.max_batch

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.inner.embed(texts))


class Memo:
    """Remembers vectors per text (accuracy passes only; latency uses the plain model)."""

    def __init__(self, inner: Any, *, counts: bool) -> None:
        self.inner = inner
        self.identity, self.dim, self.max_batch = inner.identity, inner.dim, inner.max_batch
        self.memo: dict[str, np.ndarray] = {}
        if counts:
            self.reach = inner.reach
            self.token_counts = inner.token_counts

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.memo]
        if missing:
            self.memo.update(zip(missing, self.inner.embed(missing), strict=True))
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.memo[t] for t in texts])


def hits(queries: Sequence[Query], rankings: Sequence[Sequence[str]]) -> np.ndarray:
    return np.array(
        [bool(set(q.expected) & set(r[:K])) for q, r in zip(queries, rankings, strict=True)],
        dtype=float,
    )


def compare(name: str, label: str, a: np.ndarray, b: np.ndarray) -> str:
    if len(a) == 0:
        return f"| {name} | {label} | 0 | - | - | - |"
    mean, lo, hi = paired_bootstrap(a, b)
    return (
        f"| {name} | {label} | {len(a)} | {b.mean():.3f} | {a.mean():.3f} | "
        f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}] |"
    )


def accuracy(root: Path, cache: Path) -> None:
    model = default_embedder()
    print("## hit@5: read truncated (before) vs read by parts (after)\n")
    print("| dataset | split / subset | n | before | after | after - before [95 % CI] |")
    print("|---|---|---:|---:|---:|---|")
    for name, file in QUERY_FILES.items():
        catalog = Catalog.from_file(root / name / "tools.json")
        queries = load_queries(root / name / file)
        memo = Memo(model, counts=True)
        whole = ToolIndex(catalog, embedder=memo, cache=EmbeddingCache(cache))
        cut = whole.with_vectors(Memo(model, counts=False), whole.vectors.matrix)  # type: ignore[union-attr]
        counts = model.token_counts([q.text for q in queries])
        splits = ("dev", "test") if name == "bfcl" else ("test",)
        for split in splits:
            chosen = [q for q in queries if q.split == split]
            texts = [q.text for q in chosen]
            before = hits(chosen, [r.tool_ids for r in cut.search_many(texts, 10)])
            after = hits(chosen, [r.tool_ids for r in whole.search_many(texts, 10)])
            print(compare(name, split, after, before))
            longer = np.array(
                [c > model.reach for q, c in zip(queries, counts, strict=True) if q.split == split]
            )
            print(compare(name, f"{split}, > 128 pieces", after[longer], before[longer]))
    print()


def choose(root: Path, cache: Path) -> None:
    """The dev sweep: which max parts and weighting, on the dev requests past the reach."""
    model = default_embedder()
    print("## Choosing the parts rule (dev splits, requests past the reach; sum of hit@5)\n")
    print("| dataset | n | truncated | max parts | weighting | by parts |")
    print("|---|---:|---:|---:|---|---:|")
    memo = Memo(model, counts=False)
    for name, file in QUERY_FILES.items():
        catalog = Catalog.from_file(root / name / "tools.json")
        dev = [q for q in load_queries(root / name / file) if q.split == "dev"]
        counts = model.token_counts([q.text for q in dev])
        longer = [q for q, c in zip(dev, counts, strict=True) if c > model.reach]
        if not longer:
            continue
        index = ToolIndex(catalog, embedder=memo, cache=EmbeddingCache(cache)).recall
        texts = [q.text for q in longer]

        def ranked(
            vectors: np.ndarray, chosen: list[Query] = longer, index: Any = index
        ) -> np.ndarray:
            return hits(
                chosen,
                [
                    index.ranked(q.text, RequestVector.full(v), 10, Strategy.COMBINED).tool_ids
                    for q, v in zip(chosen, vectors, strict=True)
                ],
            )

        truncated = ranked(memo.embed(texts)).sum()
        for max_parts in (2, 4, 8):
            plan = parts.plan_parts(texts, model.token_counts, model.reach, max_parts=max_parts)
            pieces = [min(n, model.reach) for n in model.token_counts(list(plan.texts))]
            for weighting in ("word pieces", "equal"):
                weights = tuple(pieces) if weighting == "word pieces" else (1,) * len(plan.texts)
                weighted = parts.PartsPlan(plan.texts, plan.owners, weights, plan.requests)
                got = ranked(weighted.fold(memo.embed(list(plan.texts)))).sum()
                print(
                    f"| {name} | {len(longer)} | {truncated:.0f} | {max_parts} | {weighting} "
                    f"| {got:.0f} |"
                )
    print()


def bucket_of(pieces: int) -> str:
    return next(label for lo, hi, label in BUCKETS if lo <= pieces <= hi)


def latency(root: Path, cache: Path, sample: int, rounds: int, cascade: bool) -> None:
    model = default_embedder()
    catalog = Catalog.from_file(root / "bfcl" / "tools.json")
    queries = load_queries(root / "bfcl" / "queries.json")
    whole = ToolIndex(catalog, embedder=model, cache=EmbeddingCache(cache))
    cut = whole.with_vectors(Truncating(model), whole.vectors.matrix)  # type: ignore[union-attr]
    runs: dict[str, Callable[[str], object]] = {
        "truncated (before)": cut.select,
        "by parts (after)": whole.select,
    }
    if cascade:
        fast_first = ToolIndex(catalog, embedder=model, cache=EmbeddingCache(cache), cascade=True)
        runs["by parts + cascade (cascade=True)"] = fast_first.select
    rng = random.Random(0)
    chosen = rng.sample(queries, min(sample, len(queries)))
    counts = model.token_counts([q.text for q in chosen])
    for q in chosen[:20]:  # warm-up, excluded
        for run in runs.values():
            run(q.text)
    times: dict[str, list[tuple[str, float]]] = {name: [] for name in runs}
    order = list(runs)
    for _ in range(rounds):
        for q, n in zip(chosen, counts, strict=True):
            rng.shuffle(order)  # alternate: neither reading always runs first
            for name in order:
                started = time.perf_counter()
                runs[name](q.text)
                times[name].append((bucket_of(n), (time.perf_counter() - started) * 1000))
    print(
        f"## Lone BFCL select ({len(catalog)} tools), {len(chosen)} requests x {rounds} rounds, "
        "alternated\n"
    )
    print("| reading | bucket (word pieces) | n | p50 ms | p99 ms |")
    print("|---|---|---:|---:|---:|")
    for name, rows in times.items():
        for label in ["all", *(b[2] for b in BUCKETS)]:
            ms = np.array([t for b, t in rows if label in ("all", b)])
            if len(ms):
                print(
                    f"| {name} | {label} | {len(ms)} | {np.percentile(ms, 50):.2f} | "
                    f"{np.percentile(ms, 99):.2f} |"
                )
    print()


def cascade(root: Path, cache: Path) -> None:
    """The floor of the cascade chosen on every dev split; dev and test hit@5 per dataset,
    with the fast tier's vector fused by the model's weights and by its own (``FAST_TIER``)."""
    from toolroute.providers._embedders.fast_tier.tier import FastTier

    model = default_embedder()
    memo = Memo(model, counts=True)
    weightings: dict[str, Callable[[np.ndarray], RequestVector]] = {
        "model's weights": RequestVector.full,
        "fast tier's own weights": lambda v: RequestVector.stepped_down(v, "fast tier"),
    }
    rows: dict[str, dict[str, np.ndarray]] = {w: {} for w in weightings}
    for name, file in QUERY_FILES.items():
        catalog = Catalog.from_file(root / name / "tools.json")
        queries = load_queries(root / name / file)
        index = ToolIndex(catalog, embedder=memo, cache=EmbeddingCache(cache))
        recall = index.recall
        assert recall.vectors is not None
        fast = FastTier.open(
            model, cache_dir=None, tool_texts=recall.embedding_texts(),
            tool_vectors=recall.vectors.matrix,
        )  # fmt: skip
        texts = [q.text for q in queries]
        full = index.query_vectors(texts)
        quick = fast.embed(texts)
        for split in ("dev", "test"):
            tables: dict[str, list[tuple[float, bool, bool]]] = {w: [] for w in weightings}
            for q, f, v in zip(queries, full, quick, strict=True):
                if q.split != split:
                    continue
                by_full = recall.ranked(q.text, RequestVector.full(f), 10, Strategy.COMBINED)
                for weighting, request in weightings.items():
                    by_fast = recall.ranked(q.text, request(v), 10, Strategy.COMBINED)
                    top = by_fast.scores[0] if by_fast.scores else -np.inf
                    both = hits([q, q], [by_full.tool_ids, by_fast.tool_ids])
                    tables[weighting].append((top, both[0], both[1]))
            for weighting, table in tables.items():
                rows[weighting][f"{name}/{split}"] = np.array(table)
    for weighting, table_rows in rows.items():
        cascade_table(weighting, table_rows)


def cascade_table(weighting: str, rows: dict[str, np.ndarray]) -> None:
    dev = {key: arr for key, arr in rows.items() if key.endswith("/dev")}
    pooled = np.concatenate([arr[:, 0] for arr in dev.values()])
    floor, share = float("inf"), 0.0
    for candidate in np.quantile(pooled, np.linspace(0.02, 0.98, 49)):
        answered = [arr[:, 0] >= candidate for arr in dev.values()]
        holds = all(
            np.where(a, arr[:, 2], arr[:, 1]).mean() >= arr[:, 1].mean() - 0.003
            for a, arr in zip(answered, dev.values(), strict=True)
        )
        got = float(np.concatenate(answered).mean())
        if holds and got > share:
            floor, share = float(candidate), got
    print(
        f"## Cascade, {weighting}: floor chosen on the dev splits {floor:.3f} (answers "
        f"{share:.0%} of dev requests from the fast tier); test figures at that floor\n"
    )
    print(
        "| dataset / split | n | full model hit@5 | fast tier alone | cascade hit@5 "
        "| cascade - full [95 % CI] | answered by the fast tier |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for key, arr in rows.items():
        answered = arr[:, 0] >= floor
        mixed = np.where(answered, arr[:, 2], arr[:, 1])
        mean, lo, hi = paired_bootstrap(mixed, arr[:, 1])
        print(
            f"| {key} | {len(arr)} | {arr[:, 1].mean():.3f} | {arr[:, 2].mean():.3f} | "
            f"{mixed.mean():.3f} | {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] | {answered.mean():.0%} |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    parser.add_argument("--cache", type=Path, default=Path("bench-out/long-cache"))
    parser.add_argument("--sample", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cascade", action="store_true")
    parser.add_argument("--choose", action="store_true")
    parser.add_argument("--skip-accuracy", action="store_true")
    args = parser.parse_args()
    if args.choose:
        choose(args.datasets, args.cache)
    if not args.skip_accuracy:
        accuracy(args.datasets, args.cache)
        if args.cascade:
            cascade(args.datasets, args.cache)
    latency(args.datasets, args.cache, args.sample, args.rounds, args.cascade)


if __name__ == "__main__":
    main()
