"""Decisions under concurrency: latest end against the deadline, and the loop's longest block.

    python tests/bench/bench_decide.py --section concurrency [--vendors all] [--callers 200]
        [--vendor-delay-s 0.3] [--deadline-s 1] [--rounds 3]

Each vendor runs in its own process (``tests/loopback/decision_vendors.py``), as a remote
vendor would: its 200 handler threads do not share this process's interpreter lock.

1. **Stateless routing.** ``--callers`` concurrent ``toolroute.route_servers`` calls (8
   servers each, distinct queries) through one decider, the vendor answering every request
   after ``--vendor-delay-s``, ``RoutingConfig(deadline_s=--deadline-s, generative=False)``.
   Per vendor: the latest end after the start (``time.perf_counter``), p50, calls that ended
   past deadline + 50 ms, and the outcomes. Target: latest end ≤ deadline + 50 ms.
2. **Engine routing.** The same through ``Engine.route_servers`` (the engine's decision
   concurrency, 4 by default).
3. **try_decide.** ``--callers`` concurrent ``try_decide(deadline_s=--deadline-s)`` through
   one provider, stateless and through the engine: latest end past the deadline, in ms.
4. **Loop blocked.** One ``route_servers`` call with 70 and with 200 servers on Laya (its
   768-token window splits the list into parts), the vendor answering at once; a trio
   instrument times every task step, and the longest one is how long the loop was blocked.
   Target: ≤ 5 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent

from toolroute import Catalog, RoutingConfig, Server, route_servers, try_decide  # noqa: E402
from toolroute._core.config import EngineConfig  # noqa: E402
from toolroute._runtime.engine import open_engine  # noqa: E402
from toolroute.decisions import BooleanQuestion, DecisionRequest  # noqa: E402
from toolroute.providers import (  # noqa: E402
    ClefDecider,
    LayaDecider,
    OpenAIDecisionsDecider,
    PerplexityDecider,
    ScaleDownDecider,
    TypeSafeDecider,
    XorDecider,
)

VENDORS = ("typesafe", "laya", "xor", "perplexity", "clef", "openai_decisions", "scaledown")
SLACK_S = 0.05
LOOP_TARGET_MS = 5.0

_SERVE = """
import sys, threading
sys.path.insert(0, {tests!r})
from loopback.decision_vendors import serve_vendor
delay = float(sys.argv[2])
with serve_vendor(sys.argv[1]) as server:
    server.delay_for = lambda _index: delay
    print(server.base_url, server.account_id, flush=True)
    sys.stdin.read()  # until the benchmark closes the pipe
"""


@contextmanager
def vendor_process(vendor: str, delay_s: float) -> Iterator[tuple[str, str]]:
    """A loopback vendor in its own process; yields its base URL and Clef account id."""
    code = _SERVE.format(tests=str(HERE.parent))
    process = subprocess.Popen(
        [sys.executable, "-c", code, vendor, str(delay_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        base_url, account = process.stdout.readline().split()
        yield base_url, account
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=10)


def decider_for(vendor: str, base_url: str, account: str) -> Any:
    key = "KEY"
    match vendor:
        case "typesafe":
            return TypeSafeDecider(api_key=key, base_url=base_url)
        case "laya":
            return LayaDecider(api_key=key, base_url=base_url)
        case "xor":
            return XorDecider(api_key=key, base_url=base_url)
        case "perplexity":
            return PerplexityDecider(api_key=key, base_url=base_url)
        case "clef":
            return ClefDecider(account_id=account, api_key=key, base_url=base_url)
        case "openai_decisions":
            return OpenAIDecisionsDecider(api_key=key, base_url=base_url)
        case "scaledown":
            return ScaleDownDecider(api_key=key, base_url=base_url)
    raise ValueError(f"unknown vendor {vendor!r}")


SERVERS = [
    Server("github", "Manage GitHub repositories, issues and pull requests."),
    Server("slack", "Read and send Slack messages in channels and direct messages."),
    Server("calendar", "Create, move and list calendar events and meeting invitations."),
    Server("postgres", "Run read-only SQL queries against the analytics Postgres database."),
    Server("filesystem", "Read, write and search files in the local workspace."),
    Server("weather", "Current weather and forecasts for a city or coordinates."),
    Server("stripe", "Look up Stripe customers, invoices, refunds and subscriptions."),
    Server("jira", "Create and update Jira tickets, sprints and boards."),
]


def many_servers(count: int) -> list[Server]:
    base = SERVERS
    return [
        Server(f"{base[i % len(base)].id}_{i}", f"{base[i % len(base)].description} Region {i}.")
        for i in range(count)
    ]


def summary(
    ends: list[float],
    durations: list[float],
    deadline_s: float,
    outcomes: Counter[str],
    cpu_s: float,
    woke_s: float,
) -> dict[str, Any]:
    return {
        "longest": max(durations),
        "calls_over": sum(d > deadline_s + SLACK_S for d in durations),
        "cpu": cpu_s,
        "woke": woke_s,
        "latest": max(ends),
        "p50": statistics.median(ends),
        "over": sum(end > deadline_s + SLACK_S for end in ends),
        "outcomes": dict(outcomes),
        "calls": len(ends),
    }


async def warm(decider: Any) -> None:
    """One call first, so every run starts from the same state (code paths loaded)."""
    await try_decide(
        DecisionRequest(state="warm", questions={"w__0": BooleanQuestion("Warm?")}),
        provider=decider,
        deadline_s=5,
    )


async def burst(
    call: Callable[[int], Any], callers: int, deadline_s: float
) -> tuple[list[float], list[float], Counter[str], float, float]:
    """``callers`` concurrent ``call(n)``; each one's end after the common start, what each
    returned (an outcome's value, or ``answered``/``none`` for ``try_decide``), and the CPU
    seconds this process spent (``time.process_time``: unlike the ends, it does not grow
    when the machine is busy with other work)."""
    ends: list[float] = []
    durations: list[float] = []
    outcomes: Counter[str] = Counter()
    woke: list[float] = []
    start = time.perf_counter()
    cpu = time.process_time()

    async def sentinel() -> None:
        # Does nothing but sleep until the deadline: when it wakes is the floor the machine
        # allows, whatever the code under test does.
        await trio.sleep(deadline_s)
        woke.append(time.perf_counter() - start)

    async def one(n: int) -> None:
        began = time.perf_counter()
        result = await call(n)
        ends.append(time.perf_counter() - start)
        # A call's deadline runs from when its task first ran, which on a busy loop is
        # later than the burst's start: this is the call's own time against its deadline.
        durations.append(time.perf_counter() - began)
        outcome = getattr(result, "outcome", None)
        outcomes[
            outcome.value if outcome is not None else ("none" if result is None else "answered")
        ] += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sentinel)
        for n in range(callers):
            nursery.start_soon(one, n)
    return ends, durations, outcomes, time.process_time() - cpu, woke[0]


async def stateless_routing(decider: Any, args: argparse.Namespace) -> dict[str, Any]:
    config = RoutingConfig(deadline_s=args.deadline_s, generative=False)
    await warm(decider)
    ends, durations, outcomes, cpu, woke = await burst(
        lambda n: route_servers(
            f"request {n}: open an issue", SERVERS, decider=decider, config=config
        ),
        args.callers,
        args.deadline_s,
    )
    return summary(ends, durations, args.deadline_s, outcomes, cpu, woke)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        cache=False, routing=RoutingConfig(deadline_s=args.deadline_s, generative=False)
    )


async def engine_routing(decider: Any, args: argparse.Namespace) -> dict[str, Any]:
    catalog = Catalog.from_mcp_servers(
        {
            s.id: {
                "description": s.description,
                "tools": [{"name": f"{s.id}_tool", "description": s.description}],
            }
            for s in SERVERS
        }
    )
    async with open_engine(
        catalog, config=engine_config(args), embedder=None, decider=decider
    ) as engine:
        await warm(decider)
        ends, durations, outcomes, cpu, woke = await burst(
            lambda n: engine.route_servers(f"request {n}: open an issue"),
            args.callers,
            args.deadline_s,
        )
    return summary(ends, durations, args.deadline_s, outcomes, cpu, woke)


def decision_request(n: int) -> DecisionRequest:
    return DecisionRequest(
        state=f"Ticket {n}: the customer cannot log in after the password reset.",
        questions={f"q__{i}": BooleanQuestion(f"Statement {i} holds.") for i in range(3)},
    )


async def stateless_try_decide(decider: Any, args: argparse.Namespace) -> dict[str, Any]:
    await warm(decider)
    ends, durations, outcomes, cpu, woke = await burst(
        lambda n: try_decide(decision_request(n), provider=decider, deadline_s=args.deadline_s),
        args.callers,
        args.deadline_s,
    )
    return summary(ends, durations, args.deadline_s, outcomes, cpu, woke)


async def engine_try_decide(decider: Any, args: argparse.Namespace) -> dict[str, Any]:
    catalog = Catalog.from_mcp_servers({"a": {"tools": [{"name": "t", "description": "d"}]}})
    async with open_engine(
        catalog, config=engine_config(args), embedder=None, decider=decider
    ) as engine:
        await warm(decider)
        ends, durations, outcomes, cpu, woke = await burst(
            lambda n: engine.try_decide(decision_request(n), deadline_s=args.deadline_s),
            args.callers,
            args.deadline_s,
        )
    return summary(ends, durations, args.deadline_s, outcomes, cpu, woke)


class LongestStep(trio.abc.Instrument):
    """Times every task step: the longest is the longest the loop could not switch tasks."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_cpu = 0.0
        self._began = self._began_cpu = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began, self._began_cpu = time.perf_counter(), time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._began:  # the step that added the instrument began before it could time it
            self.longest = max(self.longest, time.perf_counter() - self._began)
            # The loop thread's own CPU: what the step cost, without the time the machine
            # spent elsewhere while the step was on the CPU queue.
            self.longest_cpu = max(self.longest_cpu, time.thread_time() - self._began_cpu)
        self._began = 0.0


async def loop_blocked(decider: Any, servers: int, rounds: int) -> dict[str, Any]:
    listed = many_servers(servers)
    config = RoutingConfig(generative=False)
    await warm(decider)
    longest: list[float] = []
    longest_cpu: list[float] = []
    outcome = ""
    for n in range(rounds):
        found: list[Any] = []

        async def call(query: str, found: list[Any] = found) -> None:
            found.append(await route_servers(query, listed, decider=decider, config=config))

        instrument = LongestStep()
        trio.lowlevel.add_instrument(instrument)
        try:
            # In a child task: its first step (where the state is split) is then timed too.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, f"request {n}: open an issue")
        finally:
            trio.lowlevel.remove_instrument(instrument)
        longest.append(instrument.longest * 1000.0)
        longest_cpu.append(instrument.longest_cpu * 1000.0)
        routed = found[0]
        outcome = f"{routed.outcome.value} ({routed.answered} of {routed.routable} answered)"
    return {
        "servers": servers,
        "longest_ms": longest,
        "longest_cpu_ms": longest_cpu,
        "outcome": outcome,
    }


def run_vendor(vendor: str, args: argparse.Namespace) -> dict[str, Any]:
    with vendor_process(vendor, args.vendor_delay_s) as (base_url, account):

        async def main() -> dict[str, Any]:
            found: dict[str, Any] = {}
            for name, section in (
                ("stateless routing", stateless_routing),
                ("engine routing", engine_routing),
                ("stateless try_decide", stateless_try_decide),
                ("engine try_decide", engine_try_decide),
            ):
                decider = decider_for(vendor, base_url, account)
                try:
                    found[name] = await section(decider, args)
                finally:
                    await decider.aclose()
                print(
                    f"  {vendor} {name}: latest {found[name]['latest']:.3f} s",
                    file=sys.stderr,
                    flush=True,
                )
            return found

        return trio.run(main)


def run_loop_blocked(args: argparse.Namespace) -> list[dict[str, Any]]:
    with vendor_process("laya", 0.0) as (base_url, account):

        async def main() -> list[dict[str, Any]]:
            decider = decider_for("laya", base_url, account)
            try:
                return [await loop_blocked(decider, n, args.rounds) for n in (70, 200)]
            finally:
                await decider.aclose()

        return trio.run(main)


def markdown(
    args: argparse.Namespace, vendors: dict[str, dict[str, Any]], blocked: list[dict[str, Any]]
) -> str:
    limit = args.deadline_s + SLACK_S
    lines = [
        "## Decisions under concurrency",
        "",
        f"{args.callers} concurrent calls, one decider per section, the loopback vendor in its"
        f" own process answering after {args.vendor_delay_s:g} s; deadline {args.deadline_s:g} s"
        f" (`RoutingConfig(deadline_s={args.deadline_s:g}, generative=False)` for routing,"
        f" `deadline_s={args.deadline_s:g}` for try_decide). Times from the common start"
        f' (`time.perf_counter`); target: latest end ≤ {limit:g} s. "Longest call" is one'
        " call's end minus its own start (its deadline runs from there). The last column is when"
        " a task that only sleeps until the deadline woke up in the same burst: how late the"
        " machine itself lets the loop run (a busy machine deschedules the process).",
        "",
        f"| vendor | section | latest end s | p50 s | ends past {limit:g} s | longest call s"
        f" | calls longer than {limit:g} s | outcomes | CPU s of the burst"
        " | an idle sleeper woke at s |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for vendor, sections in vendors.items():
        for name, row in sections.items():
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].items()))
            lines.append(
                f"| {vendor} | {name} | {row['latest']:.3f} | {row['p50']:.3f} | {row['over']}"
                f" | {row['longest']:.3f} | {row['calls_over']}"
                f" | {outcomes} | {row['cpu']:.3f} | {row['woke']:.3f} |"
            )
    every = [row["latest"] for sections in vendors.values() for row in sections.values()]
    longest = [row["longest"] for sections in vendors.values() for row in sections.values()]
    lines += [
        "",
        f"Latest end over every vendor and section: {max(every):.3f} s"
        f" ({'meets' if max(every) <= limit else 'misses'} ≤ {limit:g} s); longest single"
        f" call (its end − its own start): {max(longest):.3f} s.",
        "",
        "### Loop blocked by one decision's CPU work (Laya, vendor answering at once)",
        "",
        f"Longest single trio task step during one `route_servers` call, {args.rounds} calls each;"
        f" target ≤ {LOOP_TARGET_MS:g} ms.",
        "",
        "| servers | longest step per call, wall ms | longest step per call, CPU ms (thread time)"
        " | outcome of the last call |",
        "|---:|---|---|---|",
    ]
    for row in blocked:
        steps = ", ".join(f"{ms:.1f}" for ms in row["longest_ms"])
        cpu = ", ".join(f"{ms:.1f}" for ms in row["longest_cpu_ms"])
        lines.append(f"| {row['servers']} | {steps} | {cpu} | {row['outcome']} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vendors", default="all", help="comma-separated, or all")
    parser.add_argument("--callers", type=int, default=200)
    parser.add_argument("--vendor-delay-s", type=float, default=0.3)
    parser.add_argument("--deadline-s", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3, help="loop-blocked calls per size")


def run(args: argparse.Namespace) -> str:
    names = VENDORS if args.vendors == "all" else tuple(args.vendors.split(","))
    vendors = {vendor: run_vendor(vendor, args) for vendor in names}
    blocked = run_loop_blocked(args)
    return markdown(args, vendors, blocked)
