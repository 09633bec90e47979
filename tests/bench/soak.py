"""Soak benchmark: one engine, 1k tools, a million selects and steps with everything else
going on, then what leaked. A command, not a test::

    python tests/bench/soak.py [--ops 1000000] [--minilm-ops 50000] [--out tests/bench/results/soak.md]

Catalogue: 1,000 real tool definitions from ``../shared/datasets`` (BFCL, LiveMCPBench,
MetaTool; LiveMCPBench tools keep their MCP server, the others are grouped into servers of
about 20), the other ~1,400 feed catalogue updates; requests are MetaTool queries. Without the
datasets the tools and queries are synthetic (the report says which).

Each mode opens one engine (``open_engine``) and runs a warm-up phase, then the main phase.
The warm-up (``--warmup-ops``: 5 % of the operations, at least 10,000, and on until 10 catalogue
updates happened) starts with bursts of
long requests from every caller at once (the largest embedding batches, whose buffers the
model runtime keeps), and nearly all its requests carry new words, so the engine's bounded
caches (the tokeniser's 2 x 65,536 words, the session store) are full before the baseline;
in the main phase 4 % of requests carry new words. After each phase, with no call in
flight, it measures the process: RSS (``/proc/self/status`` VmRSS after a collection and
glibc's ``malloc_trim``, and untrimmed), open trio tasks (the task tree under the root
task), open file descriptors (``/proc/self/fd``) and threads.

Phases run the workload of ``soak_load.py``: concurrent ``select``/``prepare_step`` callers
(a quarter under random short deadlines), catalogue updates every few seconds, subscribers
joining and leaving, and ``route_servers``/``decide``/``try_decide`` against a loopback
vendor that fails in every documented way (``soak_vendor.py``, its own process). Every
result is checked (``soak_checks.py``).

Modes: ``keyword`` (``embedder=None``) runs ``--ops`` operations; ``minilm`` (the default
offline MiniLM embedder, far slower per query) runs ``--minilm-ops``. Targets: RSS growth
<= 5 %, zero leaked tasks, zero invariant violations.

Wrong-key decisions pass ``provider=`` to ``engine.decide``: by default a new provider per
call, closed after it (a host with per-tenant keys does this);
``--wrong-key-providers one`` reuses one for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import logging
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from soak_checks import Tally  # noqa: E402
from soak_load import Catalogue, Plan, Providers, Workload  # noqa: E402

from toolroute import Catalog, EngineConfig, Tool, ToolSet, open_engine  # noqa: E402
from toolroute.evaluate import load_queries  # noqa: E402
from toolroute.providers import HttpDecider, TypeSafeDecider  # noqa: E402

CATALOGUE_SIZE = 1_000
PINNED = 30  # tools never removed: always_active and tool-set members
VENDOR_KEY = "KEY"  # the loopback vendor's accepted key
DECIDER_TIMEOUT_S = 1.0


# -- data -----------------------------------------------------------------------------------


def load_tools(datasets: Path, seed: int) -> tuple[list[Tool], str]:
    """Every tool definition of the datasets (shuffled), or synthetic ones without them."""
    rng = random.Random(seed)
    plain: list[dict[str, Any]] = []
    for name in ("bfcl", "livemcpbench", "metatool"):
        path = datasets / name / "tools.json"
        if not path.exists():
            break
        for i, tool in enumerate(json.loads(path.read_text("utf-8"))):
            server = tool.get("server") or f"{name}-{i // 20}"
            plain.append(
                {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool.get("parameters") or {},
                    "server": server,
                }
            )
    else:
        rng.shuffle(plain)
        tools = [
            Tool(
                id=f"{t['name']}__{i}",
                name=t["name"],
                description=t["description"],
                parameters=t["parameters"],
                server=t["server"],
            )
            for i, t in enumerate(plain)
        ]
        return tools, f"{len(tools)} real tool definitions from {datasets}"
    words = "search file mail calendar weather stock image translate map ticket note".split()
    tools = [
        Tool(
            id=f"tool_{i}",
            name=f"{rng.choice(words)}_{rng.choice(words)}_{i}",
            description=" ".join(rng.choices(words, k=12)),
            server=f"server{i // 20}",
        )
        for i in range(CATALOGUE_SIZE * 2)
    ]
    return tools, "synthetic tools (datasets not found)"


def load_request_texts(datasets: Path) -> list[str]:
    path = datasets / "metatool" / "queries.json"
    if path.exists():
        return [q.text for q in load_queries(path)][:5_000]
    return [f"please {w} the thing number {i}" for i, w in enumerate(["find", "send", "book"] * 50)]


# -- the process ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    rss_kib: int  # after malloc_trim: memory still in use (and fragmentation)
    untrimmed_rss_kib: int  # as the process held it: free heap pages included
    tasks: int
    fds: int
    threads: int


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def trim_heap() -> None:
    """Hand free heap pages back to the OS (glibc), so RSS shows memory still in use."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def count_tasks(task: trio.lowlevel.Task) -> int:
    return 1 + sum(count_tasks(child) for n in task.child_nurseries for child in n.child_tasks)


async def probe(settle_s: float) -> Probe:
    """The process at rest: after ``settle_s`` for abandoned work to drain, and a collection."""
    await trio.sleep(settle_s)
    gc.collect()
    root = trio.lowlevel.current_root_task()
    assert root is not None  # we are inside trio.run
    untrimmed = rss_kib()
    trim_heap()
    return Probe(
        rss_kib=rss_kib(),
        untrimmed_rss_kib=untrimmed,
        tasks=count_tasks(root),
        fds=len(os.listdir("/proc/self/fd")),
        threads=threading.active_count(),
    )


class LogCount(logging.Handler):
    """Counts the library's log records (provider failures are logged) instead of printing
    a million of them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.name} {record.levelname}"] += 1


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- one mode -----------------------------------------------------------------------------------


@dataclass
class ModeResult:
    mode: str
    ops: int
    wall_s: float
    warm: Probe
    end: Probe
    tally: Tally
    warmup_s: float
    logged: Counter[str]


async def run_mode(
    mode: str,
    ops: int,
    warmup_ops: int,
    tools: Sequence[Tool],
    queries: Sequence[str],
    vendor_url: str,
    args: argparse.Namespace,
) -> ModeResult:
    keyword_only = mode == "keyword"
    catalogue = Catalogue(tools[:CATALOGUE_SIZE], tools[CATALOGUE_SIZE:], PINNED)
    pinned = catalogue.pinned
    tool_sets = [
        ToolSet(
            name=f"set{i}", members=pinned[i * 5 : i * 5 + 5], anchors=pinned[i * 5 : i * 5 + 1]
        )
        for i in range(3)
    ]
    cache_dir = tempfile.mkdtemp(prefix="toolroute-soak-")
    config = EngineConfig.from_mapping(
        {
            "sessions": {"max_sessions": 2_000, "idle_s": 60.0},
            "routing": {"decision_deadline_s": 1.0, "deadline_s": 2.0},
            "events": {"buffer": 64},
            "cache_dir": cache_dir,
        }
    )
    plan = Plan(
        callers=args.callers,
        deadline_mean_s=0.002 if keyword_only else 0.05,
        slack_s=args.slack,
        own_bound_s=0.0 if keyword_only else config.deadlines.embed_s,
        update_every_s=args.update_every,
        keyword_only=keyword_only,
        route_deadline_s=config.routing.deadline_s,
    )

    def decider(key: str, url: str = vendor_url) -> HttpDecider:
        return TypeSafeDecider(api_key=key, base_url=url, timeout_s=DECIDER_TIMEOUT_S)

    shared = decider(VENDOR_KEY)
    wrong_key = decider("wrong-key")
    fresh = args.wrong_key_providers == "fresh"
    providers = Providers(
        make_bad_key=(lambda: decider("wrong-key")) if fresh else (lambda: wrong_key),
        closed_port=decider(VENDOR_KEY, f"http://127.0.0.1:{closed_port()}"),
        fresh=fresh,
    )
    engine_args: dict[str, Any] = {"embedder": None} if keyword_only else {}
    log = LogCount()
    library_logger = logging.getLogger("toolroute")
    library_logger.addHandler(log)
    library_logger.propagate = False
    started = time.perf_counter()
    async with open_engine(
        Catalog(catalogue.tools.values()),
        config=config,
        tool_sets=tool_sets,
        decider=shared,
        **engine_args,
    ) as engine:
        await engine.ready()
        warmup_s = time.perf_counter() - started
        workload = Workload(engine, catalogue, tool_sets, queries, providers, plan, args.seed)
        print(f"[{mode}] ready in {warmup_s:.1f} s; warm-up phase: {warmup_ops} ops", flush=True)
        await workload.run(
            warmup_ops, fresh_share=args.warmup_fresh, peak_first=True, min_updates=10
        )
        warm = await probe(args.settle)
        print(f"[{mode}] after warm-up: {warm}; main phase: {ops} ops", flush=True)
        started = time.perf_counter()
        reporter = trio.CancelScope()

        async def report_progress() -> None:
            with reporter:
                while True:
                    await trio.sleep(60)
                    done = sum(workload.tally.ops[k] for k in ("select", "prepare_step"))
                    rate = done / (time.perf_counter() - started)
                    print(
                        f"[{mode}] {done} ops, {rate:.0f}/s, RSS {rss_kib() // 1024} MiB, "
                        f"violations {sum(workload.tally.violations.values())}",
                        flush=True,
                    )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(report_progress)
            tally = await workload.run(ops)
            reporter.cancel()
        wall_s = time.perf_counter() - started
        end = await probe(args.settle)
        print(f"[{mode}] at the end: {end}", flush=True)
    for provider in (shared, wrong_key, providers.closed_port):
        await provider.aclose()
    library_logger.removeHandler(log)
    return ModeResult(mode, ops, wall_s, warm, end, tally, warmup_s, log.counts)


# -- the report -----------------------------------------------------------------------------------


def growth(before: int, after: int) -> str:
    return f"{(after - before) / before * 100:+.1f} %"


def table(results: Sequence[ModeResult], source: str, command: str) -> str:
    lines = [
        "# Soak benchmark",
        "",
        f"Command: `{command}`  ",
        f"Catalogue: {CATALOGUE_SIZE} tools ({source}); machine: {os.cpu_count()} cores.",
        "Targets: RSS growth <= 5 %, tasks and fds back to their warm-up count, 0 violations.",
        "RSS is read after `gc.collect()` and glibc's `malloc_trim(0)` (free heap pages handed "
        "back), so it counts memory in use; the untrimmed figure is what the process held.",
        "",
        "| mode | select + step ops | ops/s | cancelled | route / decide calls | updates "
        "| subscriptions | RSS warm → end (MiB) | RSS growth | untrimmed RSS growth "
        "| tasks warm → end | fds warm → end | threads warm → end | violations |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        t = r.tally
        done = t.ops["select"] + t.ops["prepare_step"]
        decisions = sum(v for k, v in t.ops.items() if k.startswith(("route", "decide", "try_")))
        cancelled = t.cancelled["select"] + t.cancelled["prepare_step"]
        lines.append(
            f"| {r.mode} | {done:,} | {done / r.wall_s:,.0f} | {cancelled:,} | {decisions:,} "
            f"| {t.ops['update']:,} | {t.ops['subscribe']:,} "
            f"| {r.warm.rss_kib / 1024:.1f} → {r.end.rss_kib / 1024:.1f} "
            f"| {growth(r.warm.rss_kib, r.end.rss_kib)} "
            f"| {growth(r.warm.untrimmed_rss_kib, r.end.untrimmed_rss_kib)} "
            f"| {r.warm.tasks} → {r.end.tasks} "
            f"| {r.warm.fds} → {r.end.fds} | {r.warm.threads} → {r.end.threads} "
            f"| {sum(t.violations.values())} |"
        )
    for r in results:
        lines += details(r)
    return "\n".join(lines) + "\n"


def details(r: ModeResult) -> list[str]:
    t = r.tally
    latencies = sorted(t.latencies_s)
    p50 = statistics.median(latencies) * 1000 if latencies else 0.0
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0.0

    def counts(counter: Any) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in sorted(counter.items())) or "none"

    lines = [
        "",
        f"## {r.mode}",
        "",
        f"- engine ready in {r.warmup_s:.1f} s; main phase {r.wall_s:.0f} s",
        f"- calls: {counts(t.ops)}",
        f"- cancelled by the caller's deadline: {counts(t.cancelled)}",
        f"- outcomes: {counts(t.outcomes)}",
        f"- expected errors: {counts(t.errors)}",
        f"- events received: {counts(t.events)}; dropped (slow subscribers, reported): "
        f"{t.dropped_events:,}",
        f"- latency of completed calls (1 in 97, {len(latencies):,} kept at random): "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms",
        f"- library log records (counted, not printed): {counts(r.logged)}",
        "- worst finish past a deadline (the caller's, else the engine's own; keyword select and"
        " step have none, so this is their longest call): "
        + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in sorted(t.max_overshoot_s.items())),
        f"- violations: {counts(t.violations)}",
    ]
    lines += [f"  - e.g. {example}" for example in t.examples]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ops",
        "--selects",
        type=int,
        default=1_000_000,
        dest="ops",
        help="select + prepare_step calls of the keyword engine's main phase",
    )
    parser.add_argument(
        "--minilm-ops",
        type=int,
        default=50_000,
        help="the same with the default MiniLM embedder (0 to skip)",
    )
    parser.add_argument(
        "--warmup-ops", type=int, default=None, help="default: 5 %% of the ops, at least 10,000"
    )
    parser.add_argument(
        "--warmup-fresh",
        type=float,
        default=0.99,
        help="share of warm-up requests with new words (fills bounded caches; main phase: 4 %%)",
    )
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--update-every", type=float, default=3.0)
    parser.add_argument(
        "--slack",
        type=float,
        default=2.0,
        help="how late past a deadline a call may finish (a loaded machine)",
    )
    parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds of rest before each measurement"
    )
    parser.add_argument(
        "--wrong-key-providers",
        choices=["fresh", "one"],
        default="fresh",
        help="a new wrong-key decider per call (each closed after), or one for the run",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--datasets",
        type=Path,
        default=HERE.parents[2] / "shared" / "datasets",
        help="default: ../shared/datasets beside the repository",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "soak.md")
    args = parser.parse_args()
    tools, source = load_tools(args.datasets, args.seed)
    queries = load_request_texts(args.datasets)
    vendor = subprocess.Popen(
        [sys.executable, str(HERE / "soak_vendor.py"), "--seed", str(args.seed)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert vendor.stdout is not None
        url = vendor.stdout.readline().strip()
        results = []
        for mode, ops in (("keyword", args.ops), ("minilm", args.minilm_ops)):
            if ops > 0:
                warmup = args.warmup_ops if args.warmup_ops is not None else max(ops // 20, 10_000)
                results.append(trio.run(run_mode, mode, ops, warmup, tools, queries, url, args))
    finally:
        assert vendor.stdin is not None
        vendor.stdin.close()
        vendor.wait(timeout=30)
    command = "python tests/bench/soak.py " + " ".join(sys.argv[1:])
    report = table(results, source, command.strip())
    print(report)
    out = args.out / "soak.md" if args.out.is_dir() else args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report, encoding="utf-8")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
