"""Large catalogues: int8 scoring against fp32, and the memory of a cold warm-up.

    python tests/bench/bench_scale.py [--datasets ../shared/datasets] [--sizes 10000,100000]
                                      [--queries 1000] [--skip-rss]
                                      [--sections scale,agreement,kernels,rss]
                                      [--real 0,10000] [--random 10000,100000]

``agreement``: the int8 index's top 5 against fp32's (ids and order) on real MiniLM vectors
(``--real``: 0 is the 2,428 bundled BFCL, LiveMCPBench and MetaTool tools, other sizes
recombine them, all embedded by the model and cached) and on random unit vectors
(``--random``), for MetaTool's and BFCL's requests (``--queries`` of each): before (8-bit
queries, zero point 128) and now (7-bit), on onnxruntime's kernel and, up to 20k tools, on the
emulated kernel of CPUs without VNNI (``tests/int8_kernels.py``, the first ``--emulate``
requests); with p50 ms per top 5, rows re-scored exactly per query, and how often the bound
widened the re-scoring. ``--worst`` adds 3,000 sign vectors with sign requests, every value at
an end of the int8 range: the case that breaks a saturating kernel.
``kernels``: ms per query of u8 x s8, u8 x u8, s8 x s8, numpy and fp32 at 100k x 384.

For each size: a synthetic catalogue recombined from the bundled tools (``bench_recall``), its
tool vectors random unit vectors put in an embedding cache (the index loads them as it would
real ones), requests MetaTool's queries embedded by the real model. Prints, for fp32 and for
the int8 index with exact re-scoring (what ``ToolIndex`` uses from ``INT8_FROM`` tools):
top-5 vector scoring p50, ranking p50 for semantic and combined recall (request vector given),
``select`` p50 (request embedding included; the embedding alone too), and how often the top 5 (ids and order) equal
fp32's. Then the peak RSS of fresh processes warming up 10k tools with no cache (every tool
through the model), with the int8 index and without it, by phase.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from toolroute import Catalog, ToolIndex
from toolroute._core.recall import quantize, vectors
from toolroute._core.recall.quantize import extreme_rows, quantize_rows
from toolroute._core.recall.vectors import INT8_FROM, Int8Index, VectorIndex, int8_index, top_k
from toolroute._core.text import embedding_text
from toolroute._stores.embedding_cache import embed_with_cache
from toolroute.evaluate import load_queries
from toolroute.providers import default_embedder
from toolroute.providers._embedders import int8_product as int8_module
from toolroute.providers._embedders.int8_product import onnx_int8_product
from toolroute.stores import EmbeddingCache

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_recall import random_unit, synthetic_catalog  # noqa: E402
from int8_kernels import saturating_kernel  # noqa: E402


def p50(values: list[float]) -> float:
    return float(np.percentile(values, 50))


def timed_ms(fn: Any, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn(*args)
    return (time.perf_counter() - started) * 1000, out


def scale_row(root: Path, cache_dir: Path, size: int, queries: list[str]) -> dict[str, Any]:
    embedder = default_embedder()
    catalog = synthetic_catalog(root, size)
    cache = EmbeddingCache(cache_dir / f"scale{size}")
    cache.put_many(
        embedder.identity, [embedding_text(t) for t in catalog], random_unit(size, 384, size)
    )
    started = time.perf_counter()
    index = ToolIndex(catalog, embedder=embedder, cache=cache, int8_from=0)
    build_s = time.perf_counter() - started
    assert index.vectors is not None
    assert index.int8 is not None
    int8_build_s, _ = timed_ms(int8_index, index.vectors, onnx_int8_product, 0)
    fp32 = copy.copy(index)
    fp32.int8 = None  # the same index scoring every row in fp32
    vectors = np.concatenate(
        [embedder.embed(queries[i : i + 32]) for i in range(0, len(queries), 32)]
    )
    times: dict[str, list[float]] = {}
    same: dict[str, int] = {"semantic": 0, "combined": 0}
    for name, fn in (("fp32", lambda v: top_k(fp32.vectors.scores(v), 5)),
                     ("int8", lambda v: index.int8.ranked(v, 5)[0])):  # fmt: skip
        for v in vectors[:20]:
            fn(v)
        times[f"vector_{name}"] = [timed_ms(fn, v)[0] for v in vectors]
    for strategy in ("semantic", "combined"):
        times[f"{strategy}_fp32"], times[f"{strategy}_int8"] = [], []
        for q, v in zip(queries, vectors, strict=True):
            t_fp32, want = timed_ms(lambda: fp32.rank(q, v, 5, strategy=strategy))  # noqa: B023
            t_int8, got = timed_ms(lambda: index.rank(q, v, 5, strategy=strategy))  # noqa: B023
            times[f"{strategy}_fp32"].append(t_fp32)
            times[f"{strategy}_int8"].append(t_int8)
            same[strategy] += got.tool_ids == want.tool_ids
    sample = queries[:200]
    times["embed"] = [timed_ms(embedder.embed, [q])[0] for q in sample]
    for name, used in (("fp32", fp32), ("int8", index)):
        for q in sample[:10]:
            used.select(q)
        times[f"select_{name}"] = [used.select(q).latency_ms for q in sample]
    row: dict[str, Any] = {
        "tools": size,
        "build_s": build_s,
        "int8_build_s": int8_build_s / 1000,
        **{f"{k}_p50_ms": p50(v) for k, v in times.items()},
        "top5_same_semantic": same["semantic"] / len(queries),
        "top5_same_combined": same["combined"] / len(queries),
        "queries": len(queries),
        "int8_failures": index.int8.failures,
    }
    print(f"  {json.dumps({k: round(v, 4) for k, v in row.items()})}", file=sys.stderr)
    return row


RSS_CODE = """
import sys, time
from pathlib import Path
sys.path.insert(0, {here!r})
from bench_recall import peak_rss_mb, synthetic_catalog
import toolroute
marks = {{"imported": peak_rss_mb()}}
from toolroute import ToolIndex
from toolroute.providers import default_embedder
catalog = synthetic_catalog(Path({root!r}), {size})
embedder = default_embedder()
embedder.embed(["load the model"])
marks["model loaded"] = peak_rss_mb()
started = time.perf_counter()
index = ToolIndex(catalog, embedder=embedder, cache=None, {int8})
marks["tools embedded"] = peak_rss_mb()
for q in ["send an email to the team", "weather in Paris", "create a github issue"]:
    index.select(q)
marks["after selects"] = peak_rss_mb()
marks["seconds"] = time.perf_counter() - started
marks["int8"] = index.int8 is not None
print(marks)
"""


def rss_run(root: Path, size: int, int8: bool) -> dict[str, Any]:
    """Peak RSS of a fresh process warming up ``size`` tools with no cache, by phase."""
    code = RSS_CODE.format(
        here=str(HERE), root=str(root), size=size, int8="" if int8 else "int8_product=None"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    marks: dict[str, Any] = eval(out.stdout.strip().splitlines()[-1])  # our own dict literal
    return marks


# -- int8 agreement with fp32, before / after, on real MiniLM vectors and random ones --------


@contextlib.contextmanager
def eight_bit_queries() -> Iterator[None]:
    """The quantiser as it was before 7-bit queries (zero point 128, values 1 to 255), for a
    side-by-side "before" in the same process."""
    saved = quantize.QUERY_ZERO_POINT, quantize.QUERY_PEAK, vectors.QUERY_ZERO_POINT
    quantize.QUERY_ZERO_POINT, quantize.QUERY_PEAK, vectors.QUERY_ZERO_POINT = 128, 127, 128
    int8_module.QUERY_ZERO_POINT = 128
    try:
        yield
    finally:
        quantize.QUERY_ZERO_POINT, quantize.QUERY_PEAK, vectors.QUERY_ZERO_POINT = saved
        int8_module.QUERY_ZERO_POINT = saved[0]


def real_vectors(root: Path, cache_dir: Path, size: int) -> np.ndarray:
    """MiniLM vectors of a real catalogue: the bundled BFCL, LiveMCPBench and MetaTool tools
    (``size`` 0), or ``size`` tools recombined from them; cached between runs."""
    embedder = default_embedder()
    if size:
        catalog = synthetic_catalog(root, size)
    else:
        pool = [
            tool
            for name in ("bfcl", "livemcpbench", "metatool")
            for tool in json.loads((root / name / "tools.json").read_text("utf-8"))
        ]
        catalog = Catalog.from_plain(
            [
                {
                    "name": f"{tool['name']}_{i}",  # names repeat across the datasets
                    "description": tool.get("description", ""),
                    "parameters": tool.get("parameters") or {},
                }
                for i, tool in enumerate(pool)
            ]
        )
    texts = [embedding_text(t) for t in catalog]
    return embed_with_cache(embedder, texts, EmbeddingCache(cache_dir / "real"), None)


def agreement_row(
    name: str, matrix: np.ndarray, queries: np.ndarray, emulate: int
) -> dict[str, Any]:
    """int8 top 5 against fp32's, per variant: 8-bit queries (before) and 7-bit (now), on
    onnxruntime's kernel and, for the first ``emulate`` queries, on the emulated kernel of
    CPUs without VNNI (numpy, slow). Variants alternate query by query in a rotating order
    (the one right after fp32's full pass finds a cold cache), so they share the noise."""
    exact = VectorIndex(matrix)
    variants: dict[str, tuple[Any, bool]] = {}
    with eight_bit_queries():
        quantized = quantize_rows(exact.matrix)
        rows = quantized[0]
        index = Int8Index(exact, onnx_int8_product(rows), quantized)
        variants["before, onnxruntime"] = (index, True)
        if emulate:
            kernel = saturating_kernel(group=2, zero_point=128)
            before = Int8Index(exact, kernel(rows), quantized)
            variants["before, AVX2 emulated"] = (before, True)
        # The other way to keep int16 pairs from saturating: 7-bit rows, 8-bit queries.
        narrow = seven_bit_rows(exact.matrix)
        variants["7-bit rows"] = (Int8Index(exact, onnx_int8_product(narrow[0]), narrow), True)
    started = time.perf_counter()
    now = int8_index(exact, onnx_int8_product, 0)
    build_s = time.perf_counter() - started
    assert now is not None, "the kernel failed its check on this CPU"
    variants["now, onnxruntime"] = (now, False)
    if emulate:
        emulated = int8_index(exact, saturating_kernel(group=2), 0)
        assert emulated is not None
        variants["now, AVX2 emulated"] = (emulated, False)
    times: dict[str, list[float]] = {"fp32": [], **{v: [] for v in variants}}
    same, asked = dict.fromkeys(variants, 0), dict.fromkeys(variants, 0)
    for v in queries[:10]:  # warm-up
        top_k(exact.scores(v), 5)
    for i, v in enumerate(queries):
        t_fp32, want = timed_ms(lambda: top_k(exact.scores(v), 5))  # noqa: B023
        times["fp32"].append(t_fp32)
        names = list(variants)
        for variant in names[i % len(names) :] + names[: i % len(names)]:  # rotate the order
            index, old = variants[variant]
            if "emulated" in variant and i >= emulate:
                continue
            asked[variant] += 1
            with eight_bit_queries() if old else contextlib.nullcontext():
                elapsed, (picked, _) = timed_ms(index.ranked, v, 5)
            times[variant].append(elapsed)
            same[variant] += picked.tolist() == want.tolist()
    row: dict[str, Any] = {"catalogue": name, "tools": len(matrix), "queries": len(queries)}
    row["now_build_s"] = build_s
    row["fp32_p50_ms"] = p50(times["fp32"])
    for variant, (index, _) in variants.items():
        row[variant] = {
            "queries": asked[variant],
            "top5_same": same[variant] / asked[variant],
            "p50_ms": p50(times[variant]),
            "rescored_per_query": index.rescored / asked[variant],
            "widened": index.widened / asked[variant],
        }
    print(f"  {json.dumps(row, default=lambda x: round(x, 4))}", file=sys.stderr)
    return row


def seven_bit_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows in [-64, 64] (2 * 255 * 64 <= 32,767 with 8-bit queries): the road not taken."""
    scales = (np.abs(matrix).max(axis=1) / 64.0).astype(np.float32)
    rows = np.clip(np.rint(matrix / np.maximum(scales, 1e-30)[:, None]), -64, 64)
    return rows.astype(np.int8), scales


def agreement(root: Path, cache_dir: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    embedder = default_embedder()
    texts = [q.text for q in load_queries(root / "metatool" / "queries.json")][: args.queries]
    texts += [q.text for q in load_queries(root / "bfcl" / "queries.json")][: args.queries]
    queries = embed_with_cache(embedder, texts, EmbeddingCache(cache_dir / "real"), None)
    rows = []
    for size in [int(x) for x in args.real.split(",") if x.strip()]:
        matrix = real_vectors(root, cache_dir, size)
        name = "real, bundled tools" if size == 0 else "real, recombined"
        rows.append(agreement_row(name, matrix, queries, _emulated(args, len(matrix))))
    for size in [int(x) for x in args.random.split(",") if x.strip()]:
        matrix = random_unit(size, embedder.dim, size)
        rows.append(agreement_row("random unit", matrix, queries, _emulated(args, size)))
    if args.worst:
        matrix, asked = sign_vectors(3000, embedder.dim, len(queries))
        rows.append(agreement_row("sign vectors, answer at 0.84", matrix, asked, args.emulate))
    return rows


def _emulated(args: argparse.Namespace, tools: int) -> int:
    """Requests for the numpy emulation (its int32 temporaries grow with the catalogue)."""
    return args.emulate if tools <= 20_000 else 0


def sign_vectors(n: int, dim: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """The worst case for a saturating kernel: rows of equal-magnitude entries (all +-127 in
    int8), and queries that are a row with 8 % of its signs flipped (cosine 0.84, sign
    queries too: every value at an end of the range)."""
    rng = np.random.default_rng(7)
    rows = rng.choice([-1.0, 1.0], size=(n, dim)).astype(np.float32)
    asked = rows[rng.integers(0, n, queries)].copy()
    flips = rng.random(asked.shape) < 0.08
    asked[flips] *= -1
    return rows / np.sqrt(dim), asked / np.sqrt(dim)


def print_agreement(rows: list[dict[str, Any]]) -> None:
    print("\n## int8 top 5 = fp32's (ids and order), before (8-bit queries) / now (7-bit)\n")
    print(
        "| catalogue | tools | queries | kernel | top 5 = fp32 before / now "
        "| p50 ms before / now (fp32) | rows re-scored per query before / now "
        "| bound widened before / now |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        for kernel in ("onnxruntime", "AVX2 emulated"):
            if f"now, {kernel}" not in r:
                continue
            b, n = r[f"before, {kernel}"], r[f"now, {kernel}"]
            print(
                f"| {r['catalogue']} | {r['tools']:,} | {n['queries']:,} | {kernel} "
                f"| {100 * b['top5_same']:.1f} % / {100 * n['top5_same']:.1f} % "
                f"| {b['p50_ms']:.2f} / {n['p50_ms']:.2f} ({r['fp32_p50_ms']:.2f}) "
                f"| {b['rescored_per_query']:.0f} / {n['rescored_per_query']:.0f} "
                f"| {100 * b['widened']:.1f} % / {100 * n['widened']:.1f} % |"
            )
    print("\n7-bit rows with 8-bit queries instead (also safe from saturation), onnxruntime:\n")
    print(
        "| catalogue | tools | top 5 = fp32 | p50 ms | rows re-scored per query | bound widened |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        a = r["7-bit rows"]
        print(
            f"| {r['catalogue']} | {r['tools']:,} | {100 * a['top5_same']:.1f} % "
            f"| {a['p50_ms']:.2f} | {a['rescored_per_query']:.0f} | {100 * a['widened']:.1f} % |"
        )


# -- the kernels one could use, measured side by side ------------------------------------------


def _graph(
    a_type: int, b_type: int, weights: bytes, dims: list[int], zero_points: list[int]
) -> bytes:
    """A one-node ``MatMulInteger`` graph like the provider's, for any operand types."""
    m = int8_module
    inputs = [m._text(1, "q"), m._text(1, "m"), m._text(1, "za")]
    if len(zero_points) > 1:
        inputs.append(m._text(1, "zb"))
    node = b"".join(inputs) + m._text(2, "s") + m._text(3, "s") + m._text(4, "MatMulInteger")
    graph = m._field(1, node) + m._text(2, "g")
    graph += m._field(5, m._tensor("m", b_type, dims, weights))
    graph += m._field(5, m._tensor("za", a_type, [], bytes([zero_points[0] & 0xFF])))
    if len(zero_points) > 1:
        graph += m._field(5, m._tensor("zb", b_type, [], bytes([zero_points[1] & 0xFF])))
    graph += m._field(11, m._value_info("q", a_type, [1, dims[0]]))
    graph += m._field(12, m._value_info("s", m._INT32, [1, dims[1]]))
    return m._int(1, 8) + m._field(8, m._text(1, "") + m._int(2, 13)) + m._field(7, graph)


def kernel_rows(size: int, dim: int, queries: int) -> list[dict[str, Any]]:
    """ms per query of each way to compute the int8 product at ``size`` x ``dim`` on this CPU,
    alternated query by query, and whether each is exact on ``extreme_rows`` against 7-bit
    queries at both ends (the numpy reference and fp32 are exact by definition)."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    u8, s8 = int8_module._UINT8, int8_module._INT8

    def open_session(a: int, b: int, rows: np.ndarray, zero_points: list[int]) -> Any:
        weights = np.ascontiguousarray(rows.T)
        if b == u8:
            weights = (weights.astype(np.int16) + 128).astype(np.uint8)
        model = _graph(a, b, weights.tobytes(), [rows.shape[1], len(rows)], zero_points)
        return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])

    # name -> (open the session for some rows, encode a signed 7-bit query for it)
    ways: dict[str, tuple[Any, Any]] = {
        "u8 x s8, 7-bit queries (used)": (
            lambda rows: open_session(u8, s8, rows, [64]),
            lambda q: (q + 64).astype(np.uint8),
        ),
        "u8 x u8, rows shifted by 128": (
            lambda rows: open_session(u8, u8, rows, [128, 128]),
            lambda q: (q + 128).astype(np.uint8),
        ),
        "s8 x s8": (lambda rows: open_session(s8, s8, rows, [0]), lambda q: q.astype(np.int8)),
    }
    rng = np.random.default_rng(0)
    rows = rng.integers(-127, 128, (size, dim)).astype(np.int8)
    fp32 = rng.standard_normal((size, dim)).astype(np.float32)
    sessions = {name: open_(rows) for name, (open_, _) in ways.items()}
    signed = [rng.integers(-63, 64, dim) for _ in range(queries)]
    times: dict[str, list[float]] = {name: [] for name in ways}
    times["fp32 einsum (no int8)"], times["numpy int8 (the reference)"] = [], []
    for i, q in enumerate(signed):
        for name, (_, encode) in ways.items():
            feed = {"q": encode(q).reshape(1, dim)}
            times[name].append(timed_ms(sessions[name].run, None, feed)[0])
        times["fp32 einsum (no int8)"].append(
            timed_ms(np.einsum, "ij,j->i", fp32, q.astype(np.float32))[0]
        )
        if i % 10 == 0:  # the slow one, every tenth query
            times["numpy int8 (the reference)"].append(
                timed_ms(lambda: np.matmul(rows, q.astype(np.int32), dtype=np.int32))[0]  # noqa: B023
            )
    probe = extreme_rows(dim)
    place = np.arange(dim)
    ends = [np.full(dim, 63), np.full(dim, -63), np.where(place % 2 == 0, 63, -63)]
    out = []
    for name, values in times.items():
        row: dict[str, Any] = {"way": name, "p50_ms": p50(values), "size": size, "dim": dim}
        if name in ways:
            open_, encode = ways[name]
            session = open_(probe)
            row["exact_on_extremes"] = all(
                np.array_equal(
                    session.run(None, {"q": encode(q).reshape(1, dim)})[0][0],
                    probe.astype(np.int64) @ q,
                )
                for q in ends
            )
        out.append(row)
    return out


def print_kernels(rows: list[dict[str, Any]]) -> None:
    size, dim = rows[0]["size"], rows[0]["dim"]
    print(f"\n## int8 product, one query against {size:,} x {dim} (this CPU, one thread)\n")
    print("| way | p50 ms | exact on extreme rows and 7-bit queries |")
    print("|---|---:|---|")
    for r in rows:
        exact = {True: "yes", False: "NO"}.get(r.get("exact_on_extremes"), "(reference)")
        print(f"| {r['way']} | {r['p50_ms']:.2f} | {exact} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--rss-size", type=int, default=10_000)
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--sections", default="scale,agreement,kernels,rss")
    parser.add_argument("--real", default="0,10000", help="real catalogue sizes (0: bundled)")
    parser.add_argument("--random", default="10000,100000", help="random catalogue sizes")
    parser.add_argument("--emulate", type=int, default=300, help="queries on the emulation")
    parser.add_argument("--worst", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--kernel-size", type=int, default=100_000)
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    root = Path(args.datasets)
    if not (root / "metatool").exists():
        root = Path("/work/shared/datasets")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    queries = [q.text for q in load_queries(root / "metatool" / "queries.json")][: args.queries]
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]  # --sizes "": memory only
    report: dict[str, Any] = {}
    if "agreement" in sections:
        report["agreement"] = agreement(root, out / "cache", args)
        print_agreement(report["agreement"])
    if "kernels" in sections:
        report["kernels"] = kernel_rows(args.kernel_size, 384, 200)
        print_kernels(report["kernels"])
    if "scale" not in sections:
        sizes = []
    rows = [scale_row(root, out / "cache", size, queries) for size in sizes]
    report["scale"] = rows
    if rows:
        print(f"\n## Large catalogues (ToolIndex uses int8 from {INT8_FROM:,} tools)\n")
        print(
            "| tools | top-5 vector scoring p50 fp32 / int8 ms | semantic rank p50 fp32 / int8 ms "
            "| combined rank p50 fp32 / int8 ms | request embedding p50 ms "
            "| combined select p50 fp32 / int8 ms | top 5 = fp32 (semantic / combined) "
            "| int8 index build s |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['tools']:,} | {r['vector_fp32_p50_ms']:.2f} / {r['vector_int8_p50_ms']:.2f} "
                f"| {r['semantic_fp32_p50_ms']:.2f} / {r['semantic_int8_p50_ms']:.2f} "
                f"| {r['combined_fp32_p50_ms']:.2f} / {r['combined_int8_p50_ms']:.2f} "
                f"| {r['embed_p50_ms']:.2f} "
                f"| {r['select_fp32_p50_ms']:.2f} / {r['select_int8_p50_ms']:.2f} "
                f"| {100 * r['top5_same_semantic']:.1f} % / {100 * r['top5_same_combined']:.1f} % "
                f"of {r['queries']} | {r['int8_build_s']:.2f} |"
            )
    if not args.skip_rss and "rss" in sections:
        report["rss"] = {
            "int8": rss_run(root, args.rss_size, True),
            "fp32": rss_run(root, args.rss_size, False),
        }
        print(f"\n## Cold warm-up of {args.rss_size:,} tools (no cache), peak RSS MB by phase\n")
        print("| index | imported | model loaded | tools embedded | after selects | seconds |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, m in report["rss"].items():
            print(
                f"| {name} | {m['imported']:.0f} | {m['model loaded']:.0f} "
                f"| {m['tools embedded']:.0f} | {m['after selects']:.0f} | {m['seconds']:.1f} |"
            )
    (out / "scale.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
