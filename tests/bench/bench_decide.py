"""Batched decisions against a real loopback vendor: sliding window vs grouped, routing's
deadline against a vendor that never answers, and decisions under concurrency.

    python tests/bench/bench_decide.py [--section batches|concurrency|all] [--seeds 5]
        [--questions 1000] [--batch 64] [--concurrency 4] [--repeats 3] [--calls 500]
        [--deadline-ms 250] [--out DIR]

``--section concurrency`` (options in ``tests/bench/decide_concurrency.py``) prints the
latest end of 200 concurrent calls against their deadline on all seven vendors, stateless
and through the engine, and how long one decision's CPU work blocks the loop.

1. **Sliding vs grouped.** ``--questions`` boolean questions cut into batches of ``--batch``
   (Laya's cap is 64, so 1,000 questions are 16 batches) are sent to a loopback Laya server
   (``tests/loopback/decision_vendors.py``) by ``decide_in_batches`` with a
   ``trio.CapacityLimiter(--concurrency)``: once with ``schedule="grouped"`` (groups of
   ``--concurrency`` batches, one group after another), ``--repeats`` times with
   ``"sliding"`` (the next batch starts when any finishes), and once through ``try_decide``
   (which slides). Every batch's latency comes from ``heavy_tailed_schedule(seed, batches)``
   (log-normal around 400 ms, σ = 0.25, with ``round(batches * 5 %)`` batches — at least
   one — at 2.0–2.7 s). The delay is keyed by the batch (the first question id of the request
   body, looked up in the server's request log), not by arrival order, so every run of a seed
   sees the same latency for the same batch. Target: sliding ≤ 0.8 × grouped wall time.
   The order in which the server received the batches is recorded per run: the sliding
   window dispatches batches in question order (0, 1, …), so its time depends on where the
   seed's tail batch falls; the "reversed" model column shows the other extreme.
2. **Routing deadline.** A loopback TypeSafe server that hangs every request, a
   ``TypeSafeDecider`` pointing at it, 8 servers with descriptions, and
   ``RoutingConfig(deadline_s=decision_deadline_s=--deadline-ms, generative=False)``:
   ``--calls`` sequential ``route_servers`` calls with distinct queries. Each call's wall time
   (``time.perf_counter``) must stay within the deadline + 20 ms, with nothing excluded and
   every outcome ``failed_open``.

Prints Markdown; ``--out DIR`` also writes it to ``DIR/decide.md``. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0]))

import decide_concurrency  # noqa: E402
from loopback.decision_vendors import (  # noqa: E402
    KEY,
    Fault,
    VendorServer,
    heavy_tailed_schedule,
    serve_vendor,
)

from toolroute import Outcome, RoutingConfig, Server, route_servers, try_decide  # noqa: E402
from toolroute._core.decide.types import decision_key  # noqa: E402
from toolroute._decisions.run import decide_in_batches  # noqa: E402
from toolroute.decisions import BooleanQuestion, DecisionRequest  # noqa: E402
from toolroute.providers import LayaDecider, TypeSafeDecider  # noqa: E402

TARGET_RATIO = 0.8
SLACK_MS = 20.0
NAMESPACE = "q"
MEDIAN_S = 0.4
TAIL_FRACTION = 0.05
TAIL_S = 2.0


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- sliding vs grouped


def laya_with_cap(batch: int) -> type[LayaDecider]:
    """``LayaDecider``, or a subclass whose question cap is ``batch`` when that is not 64."""
    if batch == LayaDecider.limits.max_questions:
        return LayaDecider

    class CappedLaya(LayaDecider):
        limits = attrs.evolve(LayaDecider.limits, max_questions=batch)

    return CappedLaya


def make_request(questions: int) -> DecisionRequest:
    return DecisionRequest(
        state="Ticket 4711: the customer cannot log in after the password reset.",
        questions={
            decision_key(NAMESPACE, i): BooleanQuestion(f"Statement {i} holds for this ticket.")
            for i in range(questions)
        },
    )


def batch_of(body: Any, batch: int) -> int | None:
    """The batch a request body carries: its first question id ``q__<n>`` gives ``n // batch``."""
    questions = body.get("questions") if isinstance(body, dict) else None
    first = next(iter(questions), "") if isinstance(questions, dict) else ""
    prefix = f"{NAMESPACE}__"
    return int(first[len(prefix) :]) // batch if first.startswith(prefix) else None


def batch_delays(
    server: VendorServer, batch: int, delays: Sequence[float]
) -> Callable[[int], float]:
    """A ``delay_for`` hook keyed by the batch a request carries, not by its arrival index.

    The server logs a request before it asks for its delay, so the hook reads the request's
    batch from the log. Requests that carry no batch (the warm-up) get no delay.
    """

    def delay_for(index: int) -> float:
        found = batch_of(server.requests[index].body, batch)
        return 0.0 if found is None else delays[found]

    return delay_for


def tail_fraction_for(batches: int) -> float:
    """5 %, raised so that at least one batch is in the tail (``round(batches * f) >= 1``)."""
    if round(batches * TAIL_FRACTION) >= 1:
        return TAIL_FRACTION
    return 1.0 / batches


@attrs.frozen
class Run:
    seconds: float
    answers: int
    failed: int  # -1: not reported (try_decide)
    order: tuple[int, ...]  # batch indices in the order the server received them

    def direction(self, width: int) -> str:
        """``forward`` (0, 1, …), ``reversed`` (…, 1, 0) or ``mixed``, from the first group."""
        n = len(self.order)
        first = set(self.order[:width])
        if first == set(range(min(width, n))):
            return "forward"
        if first == set(range(max(0, n - width), n)):
            return "reversed"
        return "mixed"


def arrivals(server: VendorServer, start: int, batch: int) -> tuple[int, ...]:
    """Batch indices of the requests logged since ``start``, in arrival order."""
    found = (batch_of(received.body, batch) for received in server.requests[start:])
    return tuple(index for index in found if index is not None)


async def timed(
    server: VendorServer,
    request: DecisionRequest,
    decider: LayaDecider,
    args: argparse.Namespace,
    schedule: str,
) -> Run:
    """One timed run: ``decide_in_batches`` with ``schedule``, or ``try_decide``."""
    start = len(server.requests)
    started = time.perf_counter()
    if schedule == "try_decide":
        result = await try_decide(request, provider=decider, concurrency=args.concurrency)
        failed = -1
    else:
        report = await decide_in_batches(
            request,
            decider,
            limiter=trio.CapacityLimiter(args.concurrency),
            schedule=schedule,  # type: ignore[arg-type]
        )
        result, failed = report.result, report.failed
    seconds = time.perf_counter() - started
    answers = len(result.answers) if result is not None else 0
    return Run(seconds, answers, failed, arrivals(server, start, args.batch))


def fifo_wall(delays: Sequence[float], width: int) -> float:
    """Wall time of ``delays`` dispatched in order to the first free of ``width`` slots."""
    slots = [0.0] * width
    for delay in delays:
        slot = min(range(width), key=lambda s: slots[s])
        slots[slot] += delay
    return max(slots)


def schedule_only(delays: Sequence[float], width: int) -> dict[str, float]:
    """Wall times if only the scheduled delays counted, and a floor no schedule can beat.

    Grouped: the sum over groups of each group's slowest batch. Sliding: FIFO over ``width``
    slots, batches dispatched 0, 1, … (forward) or …, 1, 0 (reversed). Floor:
    max(slowest batch, total ÷ width).
    """
    return {
        "grouped": sum(max(delays[i : i + width]) for i in range(0, len(delays), width)),
        "forward": fifo_wall(delays, width),
        "reversed": fifo_wall(delays[::-1], width),
        "floor": max(max(delays), sum(delays) / width),
    }


async def sliding_vs_grouped(
    server: VendorServer, args: argparse.Namespace, batches: int, tail_fraction: float
) -> list[dict[str, Any]]:
    decider = laya_with_cap(args.batch)(api_key=KEY, base_url=server.base_url)
    request = make_request(args.questions)
    # Warm-up: the connection pool and the code paths, with no scheduled delay.
    warm = DecisionRequest(state="warm up", questions={"warm__0": BooleanQuestion("Warm.")})
    await decide_in_batches(warm, decider, limiter=trio.CapacityLimiter(args.concurrency))
    rows: list[dict[str, Any]] = []
    for seed in range(args.seeds):
        delays = heavy_tailed_schedule(
            seed, batches, median=MEDIAN_S, tail_fraction=tail_fraction, tail=TAIL_S
        )
        server.delay_for = batch_delays(server, args.batch, delays)
        grouped = await timed(server, request, decider, args, "grouped")
        sliding = [
            await timed(server, request, decider, args, "sliding") for _ in range(args.repeats)
        ]
        via_try = await timed(server, request, decider, args, "try_decide")
        mean_sliding = statistics.fmean(r.seconds for r in sliding)
        rows.append(
            {
                "seed": seed,
                "grouped": grouped,
                "sliding": sliding,
                "mean_sliding": mean_sliding,
                "try": via_try,
                "ratio": mean_sliding / grouped.seconds,
                "tails": [(i, d) for i, d in enumerate(delays) if d >= TAIL_S],
                "sum": sum(delays),
                "model": schedule_only(delays, args.concurrency),
            }
        )
        runs = ", ".join(f"{r.seconds:.3f} s ({r.direction(args.concurrency)})" for r in sliding)
        progress(
            f"  seed {seed}: grouped {grouped.seconds:.3f} s; sliding {runs};"
            f" try_decide {via_try.seconds:.3f} s ({via_try.direction(args.concurrency)})"
        )
    server.delay_for = lambda _index: 0.0
    return rows


# --------------------------------------------------------------------------- routing deadline

SERVERS = (
    Server("github", "Manage GitHub repositories, issues and pull requests."),
    Server("slack", "Read and send Slack messages in channels and direct messages."),
    Server("calendar", "Create, move and list calendar events and meeting invitations."),
    Server("postgres", "Run read-only SQL queries against the analytics Postgres database."),
    Server("filesystem", "Read, write and search files in the local workspace."),
    Server("weather", "Current weather and forecasts for a city or coordinates."),
    Server("stripe", "Look up Stripe customers, invoices, refunds and subscriptions."),
    Server("jira", "Create and update Jira tickets, sprints and boards."),
)

QUERY_TEMPLATES = (
    "open an issue about the failing build number {n}",
    "tell the team in #release that version 1.{n} is out",
    "move my {n} o'clock meeting to tomorrow",
    "how many orders did we ship last week in region {n}?",
    "find every TODO in src/module_{n}.py",
    "will it rain in city number {n} this weekend?",
    "refund invoice INV-{n} for the customer",
    "create a ticket for bug {n} in the current sprint",
)


def routing_queries(count: int) -> list[str]:
    return [
        f"{QUERY_TEMPLATES[i % len(QUERY_TEMPLATES)].format(n=i)} (request {i})"
        for i in range(count)
    ]


async def routing_deadline(server: VendorServer, args: argparse.Namespace) -> dict[str, Any]:
    deadline_s = args.deadline_ms / 1000.0
    decider = TypeSafeDecider(api_key=KEY, base_url=server.base_url)
    config = RoutingConfig(deadline_s=deadline_s, decision_deadline_s=deadline_s, generative=False)
    walls: list[float] = []
    outcomes: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    excluded = 0
    for n, query in enumerate(routing_queries(args.calls)):
        started = time.perf_counter()
        result = await route_servers(query, SERVERS, decider=decider, config=config)
        walls.append((time.perf_counter() - started) * 1000.0)
        outcomes[str(result.outcome.value)] += 1
        reasons[result.reason] += 1
        excluded += bool(result.excluded or result.excluded_tools)
        if (n + 1) % 100 == 0:
            progress(f"  {n + 1}/{args.calls} route_servers calls")
    return {
        "walls": walls,
        "outcomes": outcomes,
        "reasons": reasons,
        "with_exclusions": excluded,
        "requests": len(server.requests),
        "limit_ms": args.deadline_ms + SLACK_MS,
    }


# --------------------------------------------------------------------------- report


def markdown(
    args: argparse.Namespace,
    batches: int,
    tail_fraction: float,
    rows: list[dict[str, Any]],
    routing: dict[str, Any],
) -> str:
    command = "python tests/bench/bench_decide.py " + shlex.join(sys.argv[1:])
    lines = [
        "# Batched decisions on a loopback vendor",
        "",
        f"Command: `{command.strip()}`",
        "",
        f"Machine: {os.cpu_count()} cores ({platform.machine()}), python"
        f" {platform.python_version()}, trio {trio.__version__}; vendors are"
        " `tests/loopback/decision_vendors.py` servers on 127.0.0.1.",
        "",
        "## Sliding window vs group-after-group",
        "",
        f"{args.questions} boolean questions, {args.batch} per batch ({batches} batches),"
        f" `trio.CapacityLimiter({args.concurrency})`, loopback Laya. Per-batch latency from"
        f" `heavy_tailed_schedule(seed, {batches}, median={MEDIAN_S}, tail_fraction="
        f"{tail_fraction:g}, tail={TAIL_S})`, keyed by the batch (its first question id), so"
        " every run of a seed sees the same latency for the same batch. Grouped and sliding"
        f" are `decide_in_batches(schedule=...)`: grouped once, sliding {args.repeats} times"
        " per seed (sliding s is their mean); `try_decide` (which slides) once more as a check.",
        "",
        "Dispatch order (from the order the server received the batches): the sliding window"
        " sends batches in question order (f = 0, 1, …), so its time depends on whether the"
        " seed's tail batch comes early or late; grouped runs each group at once, so order"
        " does not change its time.",
        "",
        "| seed | tail batch (index: s) | sum of delays s | grouped s | sliding runs s (order)"
        " | sliding s (mean) | sliding ÷ grouped | try_decide s (order)"
        " | schedule-only: grouped / sliding forward / sliding reversed / floor s"
        " | answers (grouped / sliding / try_decide) |",
        "|---:|---|---:|---:|---|---:|---:|---|---|---|",
    ]
    width = args.concurrency
    for r in rows:
        tails = ", ".join(f"{i}: {d:.2f}" for i, d in r["tails"])
        runs = ", ".join(f"{x.seconds:.3f} ({x.direction(width)[0]})" for x in r["sliding"])
        model = r["model"]
        answers = ", ".join(str(x.answers) for x in r["sliding"])
        lines.append(
            f"| {r['seed']} | {tails} | {r['sum']:.2f} | {r['grouped'].seconds:.3f} | {runs}"
            f" | {r['mean_sliding']:.3f} | {r['ratio']:.3f}"
            f" | {r['try'].seconds:.3f} ({r['try'].direction(width)[0]})"
            f" | {model['grouped']:.2f} / {model['forward']:.2f} / {model['reversed']:.2f}"
            f" / {model['floor']:.2f}"
            f" | {r['grouped'].answers} / {answers} / {r['try'].answers} |"
        )
    ratios = [r["ratio"] for r in rows]
    mean, median = statistics.fmean(ratios), statistics.median(ratios)
    passing = sum(ratio <= TARGET_RATIO for ratio in ratios)
    by_order: dict[str, list[float]] = {}
    for r in rows:
        for x in [*r["sliding"], r["try"]]:
            by_order.setdefault(x.direction(width), []).append(x.seconds / r["grouped"].seconds)
    orders = "; ".join(
        f"{name}: {len(v)} runs, mean {statistics.fmean(v):.3f}, max {max(v):.3f},"
        f" {sum(x > TARGET_RATIO for x in v)} over {TARGET_RATIO}"
        for name, v in sorted(by_order.items())
    )
    runs = [x for r in rows for x in (r["grouped"], *r["sliding"], r["try"])]
    complete = all(x.answers == args.questions for x in runs) and all(x.failed <= 0 for x in runs)
    verdict = "meets" if mean <= TARGET_RATIO else "misses"
    lines += [
        "",
        f"Sliding (mean of its runs) ÷ grouped, per seed: mean {mean:.3f}, median {median:.3f},"
        f" min {min(ratios):.3f}, max {max(ratios):.3f}; {passing} of {len(ratios)} seeds"
        f" ≤ {TARGET_RATIO}. The mean ratio {verdict} the target of ≤ {TARGET_RATIO}×.",
        "",
        f"Every sliding and try_decide run ÷ its seed's grouped time, by dispatch order: {orders}.",
        "",
        f"All {args.questions} answers came back in every run, no batch failed: "
        f"{'yes' if complete else 'NO'}.",
        "",
        "Schedule-only columns: grouped is the sum of each group's slowest batch; sliding is"
        f" a FIFO simulation of {width} slots with the batches dispatched forward or reversed;"
        f" the floor is max(slowest batch, sum ÷ {width}), which no schedule can beat.",
        "",
    ]
    walls = np.asarray(routing["walls"])
    over = int((walls > routing["limit_ms"]).sum())
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(routing["outcomes"].items()))
    reasons = "; ".join(f"`{k}` × {v}" for k, v in routing["reasons"].most_common())
    all_open = routing["outcomes"].get(Outcome.FAILED_OPEN.value, 0) == args.calls
    lines += [
        "## Routing deadline with a hanging vendor",
        "",
        f"Loopback TypeSafe with `Fault.hang()`, `TypeSafeDecider`, {len(SERVERS)} servers,"
        f" `RoutingConfig(deadline_s={args.deadline_ms / 1000:g},"
        f" decision_deadline_s={args.deadline_ms / 1000:g}, generative=False)`;"
        f" {args.calls} sequential `route_servers` calls with distinct queries, wall time by"
        " `time.perf_counter`.",
        "",
        "| calls | requests the vendor saw | p50 ms | p99 ms | max ms"
        f" | calls over {routing['limit_ms']:g} ms | calls with exclusions | outcomes |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {len(walls)} | {routing['requests']} | {np.percentile(walls, 50):.1f}"
        f" | {np.percentile(walls, 99):.1f} | {walls.max():.1f} | {over}"
        f" | {routing['with_exclusions']} | {outcomes} |",
        "",
        f"Reasons: {reasons}.",
        "",
        f"Every call within {routing['limit_ms']:g} ms: {'yes' if over == 0 else 'NO'};"
        f" no exclusions: {'yes' if routing['with_exclusions'] == 0 else 'NO'};"
        f" every outcome failed_open: {'yes' if all_open else 'NO'}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5, help="latency schedules (seeds 0..N-1)")
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64, help="questions per batch")
    parser.add_argument("--concurrency", type=int, default=4, help="batches in flight")
    parser.add_argument("--repeats", type=int, default=3, help="sliding runs per seed")
    parser.add_argument("--calls", type=int, default=500, help="sequential route_servers calls")
    parser.add_argument("--deadline-ms", type=float, default=250.0, help="routing deadline")
    parser.add_argument("--out", default=None, help="directory to write decide.md to")
    parser.add_argument("--section", choices=["batches", "concurrency", "all"], default="batches")
    decide_concurrency.add_arguments(parser)
    args = parser.parse_args()
    if min(args.seeds, args.questions, args.batch, args.concurrency, args.repeats, args.calls) < 1:
        parser.error("--seeds, --questions, --batch, --concurrency, --repeats, --calls must be ≥ 1")
    if args.section == "concurrency":
        print(decide_concurrency.run(args))
        return
    batches = -(-args.questions // args.batch)
    tail_fraction = tail_fraction_for(batches)

    progress(f"sliding vs grouped: {args.seeds} seeds, {batches} batches ...")
    with serve_vendor("laya") as server:
        rows = trio.run(sliding_vs_grouped, server, args, batches, tail_fraction)
    progress(f"routing deadline: {args.calls} calls against a hanging vendor ...")
    with serve_vendor("typesafe") as server:
        server.fault = Fault.hang()
        routing = trio.run(routing_deadline, server, args)

    report = markdown(args, batches, tail_fraction, rows, routing)
    if args.section == "all":
        progress("decisions under concurrency ...")
        report += "\n\n" + decide_concurrency.run(args)
    print(report)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "decide.md").write_text(report + "\n", encoding="utf-8")
        progress(f"\nwrote {out / 'decide.md'}")


if __name__ == "__main__":
    main()
