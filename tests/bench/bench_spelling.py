"""Misspelled requests: hit@5 with and without spelling correction, side by side.

    python tests/bench/bench_spelling.py [--datasets ../shared/datasets] [--split test]
                                         [--out tests/bench/results]

For each dataset's split, every request is ranked (``ToolIndex.search_many``, combined
recall, the bundled model) as written, and with a quarter of its words of four letters or
more mistyped (one random edit each: two letters swapped, one dropped, doubled or changed;
seeded), and written informally (lower case, no punctuation, chat shorthand such as "u",
"pls", "tmrw", "info"; the fixed list ``SHORTHAND``), each by an index with
``correct_spelling`` on and off. Printed: hit@5 of each, the
share of requests the correction changed, and the correction's cost per request (p50 and
p99 of ``RecallIndex.spelled``). The rule and its bounds were fixed on the dev splits; the
test split is the figure to report. MetaTool's dev split is read every 4th request.
"""

from __future__ import annotations

import argparse
import random
import re
import string
import time
from pathlib import Path

import numpy as np

from toolroute import Catalog, ToolIndex
from toolroute.evaluate import evaluate, load_queries
from toolroute.providers import default_embedder
from toolroute.stores import EmbeddingCache

HERE = Path(__file__).resolve().parent
DATASETS = ("metatool", "bfcl", "livemcpbench")
#: Share of the words of four letters or more that get one typo.
TYPO_RATE = 0.25
_WORD = re.compile(r"[A-Za-z]{4,}")


def typo(word: str, rng: random.Random) -> str:
    i = rng.randrange(len(word) - 1)
    kind = rng.choice(("swap", "drop", "double", "change"))
    if kind == "swap":
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == "drop":
        return word[:i] + word[i + 1 :]
    if kind == "double":
        return word[:i] + word[i] + word[i:]
    return word[:i] + rng.choice(string.ascii_lowercase) + word[i + 1 :]


#: Common chat shorthand (a general list, not drawn from any dataset), applied in order.
SHORTHAND = (
    ("please", "pls"), ("you", "u"), ("your", "ur"), ("are", "r"), ("tomorrow", "tmrw"),
    ("because", "cuz"), ("people", "ppl"), ("messages?", "msg"), ("pictures?|photos?", "pics"),
    ("information", "info"), ("want to", "wanna"), ("going to", "gonna"),
    ("what is|what's", "whats"), ("i am|i'm", "im"), ("thanks", "thx"), ("the", ""),
    ("with", "w/"), ("without", "w/o"), ("probably", "prob"), ("application", "app"),
    ("recommend", "rec"), ("number", "num"), ("maybe", "mb"), ("right now", "rn"),
)  # fmt: skip


def informal(text: str) -> str:
    text = text.lower()
    for formal, short in SHORTHAND:
        text = re.sub(rf"\b(?:{formal})\b", short, text)
    text = re.sub(r"[^\w\s/]", "", text)
    return " ".join(text.split())


def mistyped(text: str, rng: random.Random) -> str:
    return _WORD.sub(
        lambda m: typo(m.group(), rng) if rng.random() < TYPO_RATE else m.group(), text
    )


def run(root: Path, name: str, split: str, cache: EmbeddingCache) -> list[str]:
    catalog = Catalog.from_file(root / name / "tools.json")
    queries = [q for q in load_queries(root / name / "queries.json") if q.split == split]
    if name == "metatool" and split == "dev":
        queries = queries[::4]
    rng = random.Random(f"{name}/{split}")
    texts = {"as written": [q.text for q in queries]}
    texts["mistyped"] = [mistyped(t, rng) for t in texts["as written"]]
    texts["informal"] = [informal(t) for t in texts["as written"]]
    embedder = default_embedder()
    on = ToolIndex(catalog, embedder=embedder, cache=cache)
    off = ToolIndex(catalog, embedder=embedder, cache=cache, correct_spelling=False)
    lines = []
    for label, batch in texts.items():
        hits = [
            evaluate(queries, [list(r.tool_ids) for r in index.search_many(batch, 5)])["hit@5"]
            for index in (off, on)
        ]
        changed = np.mean([on.recall.spelled(t) != t for t in batch])
        lines.append(
            f"| {name} {split} | {label} | {len(queries)} | {hits[0]:.3f} | {hits[1]:.3f}"
            f" | {hits[1] - hits[0]:+.3f} | {changed:.1%} |"
        )
    costs = []
    for text in texts["mistyped"]:
        started = time.perf_counter()
        on.recall.spelled(text)
        costs.append((time.perf_counter() - started) * 1e3)
    lines.append(
        f"| {name} {split} | cost per request (ms) | | p50 {np.percentile(costs, 50):.3f}"
        f" | p99 {np.percentile(costs, 99):.3f} | | |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=HERE.parents[2] / "../shared/datasets")
    parser.add_argument("--split", default="test", choices=("dev", "test"))
    parser.add_argument("--only", default=",".join(DATASETS))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/toolroute-bench-cache"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cache = EmbeddingCache(args.cache)
    out = [
        f"# Spelling correction ({args.split} split, {TYPO_RATE:.0%} of words mistyped;"
        " informal: lower case, no punctuation, chat shorthand)",
        "",
        "| dataset | requests | n | hit@5, correction off | hit@5, correction on | Δ | requests changed |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name in args.only.split(","):
        out += run(args.datasets.resolve(), name, args.split, cache)
        print("\n".join(out[-4:]), flush=True)
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"spelling_{args.split}.md").write_text(text, "utf-8")


if __name__ == "__main__":
    main()
